// The Store half that lives in libddprun: finding and loading the TCPStore
// plugin on demand (ddprun never links libtorch, so a single-node run never
// pays its load time or memory), and the in-process store the tests use.
#include "ddprun/store.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
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

bool file_exists(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0;
}

// dlerror() of a missing libtorch names the library; keep it, it says what
// is missing, but on the same line as what to do.
PluginLoad load_from(const std::string& path) {
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        std::string dl_error = why != nullptr ? why : "unknown error";
        return {nullptr,
                std::string(k_need_libtorch) + " (cannot load " + path + ": " + dl_error + ")",
                dl_error};
    }
    // Never dlclose: the stores it creates live as long as their owners.
    void* symbol = ::dlsym(handle, k_store_plugin_entry);
    if (symbol == nullptr) {
        return {nullptr,
                path + " is from another version of ddprun (it has no " + k_store_plugin_entry +
                    "): rebuild ddprun",
                {}};
    }
    return {reinterpret_cast<StorePluginEntry>(symbol), {}, {}};
}

std::string own_directory() {
    std::error_code error;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
    if (error) return {};
    return exe.parent_path().string();
}

// $DDPRUN_STORE_PLUGIN (used alone when set), then the plugin beside the
// running binary, then the loader's search path.
PluginLoad find_and_load() {
    if (const char* explicit_path = std::getenv("DDPRUN_STORE_PLUGIN");
        explicit_path != nullptr && *explicit_path != '\0') {
        return load_from(explicit_path);
    }
    if (std::string dir = own_directory(); !dir.empty()) {
        std::string beside = dir + "/" + k_store_plugin_name;
        if (file_exists(beside)) return load_from(beside);
    }
    PluginLoad load = load_from(k_store_plugin_name);
    if (load.entry == nullptr && load.dl_error.starts_with(k_store_plugin_name)) {
        // Not built at all: the hint alone says everything.
        load.error = std::string(k_need_libtorch) + " (" + k_store_plugin_name + " not found)";
    }
    return load;
}

// Loaded once per process, on first use, never before.
const PluginLoad& plugin() {
    static const PluginLoad load = find_and_load();
    return load;
}

// ---------------------------------------------------------------------------
// MemoryStore

// The data MemoryStore clones share.
struct MemoryData {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::string, std::less<>> values;
};

class MemoryStore final : public Store {
  public:
    MemoryStore(std::shared_ptr<MemoryData> data, std::chrono::milliseconds timeout)
        : m_data(std::move(data)), m_timeout(timeout) {}

    void set(const std::string& key, const std::string& value) override {
        {
            std::lock_guard lock(m_data->mutex);
            m_data->values[key] = value;
        }
        m_data->changed.notify_all();
    }

    std::string get(const std::string& key) override {
        std::unique_lock lock(m_data->mutex);
        wait_locked(lock, {key}, m_timeout);
        return m_data->values.find(key)->second;
    }

    std::int64_t add(const std::string& key, std::int64_t delta) override {
        std::int64_t result = 0;
        {
            std::lock_guard lock(m_data->mutex);
            auto [it, inserted] = m_data->values.try_emplace(key, "0");
            std::int64_t current = 0;
            const std::string& text = it->second;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
            if (ec != std::errc() || end != text.data() + text.size()) {
                throw StoreError(StoreError::Kind::Other, "memory store: cannot add to '" + key +
                                                              "': it holds '" + text +
                                                              "', not a number");
            }
            result = current + delta;
            it->second = std::to_string(result);
        }
        m_data->changed.notify_all();
        return result;
    }

    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        std::string result;
        bool changed = false;
        {
            std::lock_guard lock(m_data->mutex);
            auto it = m_data->values.find(key);
            std::string current = it == m_data->values.end() ? std::string() : it->second;
            if (current == expected) {
                m_data->values[key] = desired;
                result = desired;
                changed = true;
            } else {
                result = current;
            }
        }
        if (changed) m_data->changed.notify_all();
        return result;
    }

    bool check(const std::vector<std::string>& keys) override {
        std::lock_guard lock(m_data->mutex);
        return all_present(keys);
    }

    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        std::unique_lock lock(m_data->mutex);
        wait_locked(lock, keys, timeout);
    }

    std::unique_ptr<Store> clone() override {
        return std::make_unique<MemoryStore>(m_data, m_timeout);
    }

  private:
    bool all_present(const std::vector<std::string>& keys) const {
        for (const auto& key : keys)
            if (!m_data->values.contains(key)) return false;
        return true;
    }

    void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                     std::chrono::milliseconds timeout) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        if (!m_data->changed.wait_until(lock, deadline, [&] { return all_present(keys); })) {
            std::string first = keys.empty() ? std::string() : keys.front();
            throw StoreError(
                StoreError::Kind::Timeout,
                "memory store: timed out after " + std::to_string(timeout.count()) +
                    "ms waiting for '" + first + "'" +
                    (keys.size() > 1 ? " and " + std::to_string(keys.size() - 1) + " more"
                                     : std::string()));
        }
    }

    std::shared_ptr<MemoryData> m_data;
    std::chrono::milliseconds m_timeout;
};

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

std::unique_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) {
    return std::make_unique<MemoryStore>(std::make_shared<MemoryData>(), timeout);
}

}  // namespace ddprun
