// The Store half that lives in libddprun: finding and loading the TCPStore
// plugin on demand (ddprun never links libtorch, so a single-node run never
// pays its load time or memory).
#include "ddprun/store.hpp"

#include <array>
#include <string_view>

namespace ddprun {

namespace {

constexpr std::string_view k_need_libtorch =
    "multi-node jobs need libtorch: install libtorch-dev (scripts/install-deps.sh) and rebuild";

// ---------------------------------------------------------------------------
// Loading the plugin

struct PluginLoad {
    StorePluginEntry entry = nullptr;
    std::string error;     // why entry is null, for the user
    std::string dl_error;  // dlerror() of a failed dlopen
};

// dlerror() of a missing libtorch names the library; keep it, it says what
// is missing, but on the same line as what to do.
PluginLoad load_from(const std::string& path) {
    PluginOpen opened = open_plugin(path, k_store_plugin_entry);
    if (!opened.dl_error.empty())
        return {
            nullptr,
            std::string(k_need_libtorch) + " (cannot load " + path + ": " + opened.dl_error + ")",
            opened.dl_error};
    if (!opened.has_entry)
        return {nullptr,
                path + " is from another version of ddprun (it has no " + k_store_plugin_entry +
                    "): rebuild ddprun",
                {}};
    return {reinterpret_cast<StorePluginEntry>(opened.entry), {}, {}};
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

PluginLocation locate_store_plugin() {
    return locate_plugin(k_store_plugin_name, "DDPRUN_STORE_PLUGIN");
}

}  // namespace ddprun
