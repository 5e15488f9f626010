// --version (see version.hpp). The commit comes from a header that CMake
// rewrites only when the commit changes (cmake/GitCommit.cmake), so a new
// commit recompiles this one file.
#include "ddprun/cli/version.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string_view>

#include "ddprun/base/elf_dependencies.hpp"
#include "ddprun/store/openssl_plugin.hpp"
#include "ddprun/store/store.hpp"
#include "ddprun_git_commit.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "unknown"
#endif

namespace ddprun {
namespace {

// The libraries of `plugin` whose names start with one of `prefixes`, each
// where the loader would find it (symbolic links resolved, so the file name
// shows the version): "libtorch: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0, ...".
std::string needed_line(const std::string& label, const std::string& plugin,
                        std::initializer_list<std::string_view> prefixes,
                        const std::string& when_missing, std::string_view loader_cache) {
    auto dependencies = read_elf_dependencies(plugin);
    if (!dependencies) return label + ": unknown (" + dependencies.error() + ")\n";
    const char* ld_library_path = std::getenv("LD_LIBRARY_PATH");
    std::string found, missing;
    for (const std::string& name : dependencies->needed) {
        if (std::none_of(prefixes.begin(), prefixes.end(),
                         [&](std::string_view prefix) { return name.starts_with(prefix); }))
            continue;
        std::string path = resolve_needed(
            name, *dependencies, ld_library_path != nullptr ? ld_library_path : "", loader_cache);
        if (path.empty()) {
            missing += (missing.empty() ? "" : ", ") + name;
            continue;
        }
        std::error_code error;
        auto real = std::filesystem::canonical(path, error);
        found += (found.empty() ? "" : ", ") + (error ? path : real.string());
    }
    if (found.empty() && missing.empty()) return label + ": the plugin links none\n";
    if (missing.empty()) return label + ": " + found + "\n";
    return label + ": missing " + missing + " (" + when_missing + ")\n";
}

// Two lines for a plugin: where it is (or where it was looked for), then the
// libraries of its own that it would load.
std::string plugin_lines(const std::string& label, const PluginLocation& plugin,
                         const char* variable, const char* needed_by, const std::string& libraries,
                         std::initializer_list<std::string_view> prefixes,
                         const std::string& when_missing, std::string_view loader_cache) {
    if (plugin.path.empty())
        return label + ": not found " + searched_places(plugin) + " (" + needed_by + ")\n" +
               libraries + ": not needed without the " + label + "\n";
    return label + ": " + plugin.path +
           (plugin.from_environment ? std::string(" (") + variable + ")" : "") + "\n" +
           needed_line(libraries, plugin.path, prefixes, when_missing, loader_cache);
}

}  // namespace

const char* version() {
    return DDPRUN_VERSION;
}

const char* build_commit() {
    return DDPRUN_GIT_COMMIT;
}

std::string version_report() {
    const MappedFile loader_cache(k_loader_cache);
    std::string report = std::string("ddprun ") + version() + " (commit " + build_commit() + ")\n";
    const PluginLocation store_plugin = locate_store_plugin();
    report += plugin_lines("store plugin", store_plugin, "DDPRUN_STORE_PLUGIN",
                           "multi-node c10d jobs need it; single-node and etcd jobs do not",
                           "libtorch", {"libtorch", "libc10"},
                           "multi-node c10d jobs need it: install libtorch, e.g. Debian's "
                           "libtorch-dev",
                           loader_cache.data());
    if (!store_plugin.path.empty()) {
        const std::string built_against = store_plugin_torch_version(store_plugin.path);
        report += "store plugin built against: libtorch " +
                  (built_against.empty() ? std::string("unknown") : built_against) + "\n";
    }
    report +=
        plugin_lines("openssl plugin", locate_openssl_plugin(), "DDPRUN_OPENSSL_PLUGIN",
                     "etcd jobs and job secrets need it; it comes with ddprun", "OpenSSL",
                     {"libssl", "libcrypto"}, "etcd jobs and job secrets need it: install libssl3",
                     loader_cache.data());
    return report;
}

}  // namespace ddprun
