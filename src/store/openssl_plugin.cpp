// Loading libddprun_openssl.so on first use (see openssl_plugin.hpp).
#include "ddprun/store/openssl_plugin.hpp"

#include "ddprun/store/store.hpp"

namespace ddprun {

namespace {

constexpr const char* k_reinstall =
    "it comes with ddprun (etcd jobs and job secrets need it): rebuild or reinstall ddprun, or "
    "name it with DDPRUN_OPENSSL_PLUGIN=PATH";

struct Loaded {
    const OpenSslPlugin* plugin = nullptr;
    std::string error;  // why plugin is null
};

// Where locate_openssl_plugin() finds it, else on the loader's search path
// (a test binary's RUNPATH names the build tree).
Loaded load() {
    PluginLocation location = locate_openssl_plugin();
    const std::string target = location.path.empty() ? k_openssl_plugin_name : location.path;
    PluginOpen opened = open_plugin(target, k_openssl_plugin_entry);
    if (!opened.dl_error.empty()) {
        if (location.path.empty() && opened.dl_error.starts_with(k_openssl_plugin_name))
            return {nullptr, std::string(k_openssl_plugin_name) + " not found " +
                                 searched_places(location) + ": " + k_reinstall};
        return {nullptr, "cannot load " + target + ": " + opened.dl_error + ": " + k_reinstall};
    }
    if (!opened.has_entry)
        return {nullptr, target + " is from another version of ddprun (it has no " +
                             k_openssl_plugin_entry + "): rebuild or reinstall ddprun"};
    return {reinterpret_cast<OpenSslPluginEntry>(opened.entry)(), {}};
}

}  // namespace

const OpenSslPlugin& openssl_plugin() {
    static const Loaded loaded = load();
    if (loaded.plugin == nullptr) throw StoreError(StoreError::Kind::Other, loaded.error);
    return *loaded.plugin;
}

PluginLocation locate_openssl_plugin() {
    return locate_plugin(k_openssl_plugin_name, "DDPRUN_OPENSSL_PLUGIN");
}

}  // namespace ddprun
