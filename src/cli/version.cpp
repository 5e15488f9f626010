// --version (see version.hpp). The commit comes from a header that CMake
// rewrites only when the commit changes (cmake/GitCommit.cmake), so a new
// commit recompiles this one file.
#include "ddprun/cli/version.hpp"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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

// `path` with the symbolic links of its file followed (libtorch.so.1.13 ->
// libtorch.so.1.13.0: the name that shows the version) and "." and ".." taken
// out (a RUNPATH's $ORIGIN/../lib), as ldd names it: the directories' own links
// (/lib -> usr/lib) are left, each a readlink at 10-15 us on a VM where
// --version has 3 ms in all.
std::string resolved(std::string path) {
    for (int hop = 0; hop < 16; ++hop) {
        std::array<char, PATH_MAX> target{};
        const ssize_t length = ::readlink(path.c_str(), target.data(), target.size());
        if (length <= 0 || static_cast<std::size_t>(length) >= target.size()) break;
        const std::string_view link(target.data(), static_cast<std::size_t>(length));
        path = link.starts_with('/') ? std::string(link)
                                     : path.substr(0, path.rfind('/') + 1) + std::string(link);
    }
    return std::filesystem::path(path).lexically_normal().string();
}

// The libraries of `plugin` whose names start with one of `prefixes`, each
// where the loader would find it (symbolic links resolved, so the file name
// shows the version): "libtorch: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0, ...".
std::string needed_line(const std::string& label, const std::string& plugin,
                        std::string_view plugin_file,
                        std::initializer_list<std::string_view> prefixes,
                        const std::string& when_missing, std::string_view loader_cache) {
    auto dependencies = plugin_file.empty() ? read_elf_dependencies(plugin)  // names why
                                            : read_elf_dependencies(plugin, plugin_file);
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
        found += (found.empty() ? "" : ", ") + resolved(path);
    }
    if (found.empty() && missing.empty()) return label + ": the plugin links none\n";
    if (missing.empty()) return label + ": " + found + "\n";
    return label + ": missing " + missing + " (" + when_missing + ")\n";
}

// Two lines for a plugin: where it is (or where it was looked for), then the
// libraries of its own that it would load.
std::string plugin_lines(const std::string& label, const PluginLocation& plugin,
                         std::string_view plugin_file, const char* variable, const char* needed_by,
                         const std::string& libraries,
                         std::initializer_list<std::string_view> prefixes,
                         const std::string& when_missing, std::string_view loader_cache) {
    if (plugin.path.empty())
        return label + ": not found " + searched_places(plugin) + " (" + needed_by + ")\n" +
               libraries + ": not needed without the " + label + "\n";
    return label + ": " + plugin.path +
           (plugin.from_environment ? std::string(" (") + variable + ")" : "") + "\n" +
           needed_line(libraries, plugin.path, plugin_file, prefixes, when_missing, loader_cache);
}

}  // namespace

const char* version() {
    return DDPRUN_VERSION;
}

const char* build_commit() {
    return DDPRUN_GIT_COMMIT;
}

std::string version_report() {
    // Each file mapped once, for all that is read of it, and left mapped: the
    // three munmaps would cost 0.4 ms of a --version that has 3 ms on a VM.
    MappedFile loader_cache(k_loader_cache);
    std::string report = std::string("ddprun ") + version() + " (commit " + build_commit() + ")\n";
    const PluginLocation store_plugin = locate_store_plugin();
    MappedFile store_file(store_plugin.path);
    report += plugin_lines("store plugin", store_plugin, store_file.data(), "DDPRUN_STORE_PLUGIN",
                           "multi-node c10d jobs need it; single-node and etcd jobs do not",
                           "libtorch", {"libtorch", "libc10"},
                           "multi-node c10d jobs need it: install libtorch, e.g. Debian's "
                           "libtorch-dev",
                           loader_cache.data());
    if (!store_plugin.path.empty()) {
        const std::string built_against = torch_version_in_store_plugin(store_file.data());
        report += "store plugin built against: libtorch " +
                  (built_against.empty() ? std::string("unknown") : built_against) + "\n";
    }
    const PluginLocation openssl_plugin = locate_openssl_plugin();
    MappedFile openssl_file(openssl_plugin.path);
    report +=
        plugin_lines("openssl plugin", openssl_plugin, openssl_file.data(), "DDPRUN_OPENSSL_PLUGIN",
                     "etcd jobs and job secrets need it; it comes with ddprun", "OpenSSL",
                     {"libssl", "libcrypto"}, "etcd jobs and job secrets need it: install libssl3",
                     loader_cache.data());
    for (MappedFile* file : {&loader_cache, &store_file, &openssl_file}) file->keep_until_exit();
    return report;
}

}  // namespace ddprun
