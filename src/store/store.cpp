// The Store half that lives in libddprun: finding and loading the TCPStore
// plugin on demand (ddprun never links libtorch, so a single-node run never
// pays its load time or memory).
#include "ddprun/store/store.hpp"

#include <array>
#include <cstdint>
#include <string_view>

#include "ddprun/base/elf_dependencies.hpp"

namespace ddprun {

namespace {

constexpr std::string_view k_need_libtorch =
    "multi-node jobs need libtorch: install libtorch-dev (scripts/install-deps.sh) and rebuild";
// How a user builds the plugin for the torch they have (a pip or conda one included;
// docs/install.md).
constexpr std::string_view k_build_for_this_torch =
    "cmake -S <ddprun source> -B build -DCMAKE_PREFIX_PATH=\"$(python3 -c 'import torch; "
    "print(torch.utils.cmake_prefix_path)')\" && cmake --build build --target ddprun_store";

// The plugin is there but its libtorch cannot be loaded (not installed, another
// version, a torch whose symbols differ): say which one it needs and how to build
// one for the torch at hand.
std::string libtorch_mismatch(const std::string& path, const std::string& dl_error) {
    const std::string built_against = store_plugin_torch_version(path);
    return "multi-node jobs need the libtorch " + path + " was built against (" +
           (built_against.empty() ? std::string("version unknown") : "libtorch " + built_against) +
           "), and it cannot be loaded: " + dl_error +
           "; install that libtorch (Debian: libtorch-dev), or build the plugin for the torch at "
           "hand: " +
           std::string(k_build_for_this_torch);
}

// ---------------------------------------------------------------------------
// Loading the plugin

struct PluginLoad {
    StorePluginEntry entry = nullptr;
    StorePluginDefaultsStart defaults_start = nullptr;
    std::string error;     // why entry is null, for the user
    std::string dl_error;  // dlerror() of a failed dlopen
};

// dlerror() of a missing libtorch names the library; keep it, it says what
// is missing, but on the same line as what to do.
PluginLoad load_from(const std::string& path) {
    PluginOpen opened = open_plugin(path, k_store_plugin_entry);
    if (!opened.dl_error.empty()) {
        // dlerror() names the plugin itself when the plugin is the problem (missing,
        // not a library); anything else is a library it needs: libtorch.
        const bool plugin_missing = opened.dl_error.starts_with(path + ":");
        return {nullptr, nullptr,
                plugin_missing ? std::string(k_need_libtorch) + " (cannot load " + path + ": " +
                                     opened.dl_error + ")"
                               : libtorch_mismatch(path, opened.dl_error),
                opened.dl_error};
    }
    if (!opened.has_entry)
        return {nullptr,
                nullptr,
                path + " is from another version of ddprun (it has no " + k_store_plugin_entry +
                    "): rebuild ddprun",
                {}};
    PluginLoad load{reinterpret_cast<StorePluginEntry>(opened.entry), nullptr, {}, {}};
    // The same library, loaded already: dlopen only counts it once more.
    load.defaults_start = reinterpret_cast<StorePluginDefaultsStart>(
        open_plugin(path, k_store_plugin_defaults_start).entry);
    return load;
}

// Where locate_store_plugin() finds it, else on the loader's search path.
PluginLoad find_and_load() {
    PluginLocation location = locate_store_plugin();
    if (!location.path.empty()) return load_from(location.path);
    PluginLoad load = load_from(k_store_plugin_name);
    if (load.entry == nullptr && load.dl_error.starts_with(k_store_plugin_name)) {
        // Not built or not installed: the hint alone says everything.
        load.error = std::string(k_need_libtorch) + " (" + k_store_plugin_name + " not found " +
                     searched_places(location) + ")";
    }
    return load;
}

// Loaded once per process, on first use, never before.
const PluginLoad& plugin() {
    static const PluginLoad load = find_and_load();
    return load;
}

}  // namespace

bool wait_for(Store& store, const std::vector<std::string>& keys,
              std::chrono::milliseconds timeout) {
    try {
        store.wait(keys, timeout);
        return true;
    } catch (const StoreError& error) {
        if (error.kind() != StoreError::Kind::Timeout) throw;
        return false;
    }
}

std::unique_ptr<Store> open_tcp_store(const StoreOptions& options) {
    const PluginLoad& load = plugin();
    if (load.entry == nullptr) throw StoreError(StoreError::Kind::Other, load.error);
    std::array<char, 1024> error{};
    int kind = static_cast<int>(StoreError::Kind::Other);
    Store* store =
        load.entry(options.host.c_str(), options.port, options.is_server ? 1 : 0,
                   static_cast<long>(options.timeout.count()), &kind, error.data(), error.size());
    if (store == nullptr) {
        auto store_kind = static_cast<StoreError::Kind>(kind);
        if (store_kind != StoreError::Kind::Timeout && store_kind != StoreError::Kind::Connection)
            store_kind = StoreError::Kind::Other;
        throw StoreError(store_kind, error.data());
    }
    return std::unique_ptr<Store>(store);
}

bool tcp_store_available() {
    return plugin().entry != nullptr;
}

bool tcp_store_defaults_start() {
    static const bool start = plugin().defaults_start != nullptr && plugin().defaults_start() != 0;
    return start;
}

std::string store_plugin_torch_version(const std::string& path) {
    const MappedFile file(path);
    return torch_version_in_store_plugin(file.data());
}

std::string torch_version_in_store_plugin(std::string_view plugin_file) {
    // The marker is a string constant: in the plugin's loadable segments (about 64 KiB),
    // not in the debug information after them (2 MiB in a RelWithDebInfo build, which
    // read byte by byte cost --version 20 ms). So only the loadable part is searched.
    const std::string_view bytes = loaded_part(plugin_file);
    auto at = bytes.find(k_store_plugin_torch_marker);
    if (at == std::string_view::npos) return {};
    at += k_store_plugin_torch_marker.size();
    auto end = bytes.find('\0', at);
    if (end == std::string_view::npos || end - at > 32) return {};
    return std::string(bytes.substr(at, end - at));
}

PluginLocation locate_store_plugin() {
    return locate_plugin(k_store_plugin_name, "DDPRUN_STORE_PLUGIN");
}

}  // namespace ddprun
