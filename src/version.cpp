// --version (see version.hpp). The commit comes from a header that CMake
// rewrites only when the commit changes (cmake/GitCommit.cmake), so a new
// commit recompiles this one file.
#include "ddprun/version.hpp"

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "ddprun/elf_dependencies.hpp"
#include "ddprun/store.hpp"
#include "ddprun_git_commit.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "unknown"
#endif

namespace ddprun {
namespace {

// The libtorch libraries the plugin needs, each where the loader would find
// it (symbolic links resolved, so the file name shows libtorch's version):
// "libtorch: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0, ...".
std::string libtorch_line(const std::string& plugin) {
    auto dependencies = read_elf_dependencies(plugin);
    if (!dependencies) return "libtorch: unknown (" + dependencies.error() + ")\n";
    const char* ld_library_path = std::getenv("LD_LIBRARY_PATH");
    std::string found, missing;
    for (const std::string& name : dependencies->needed) {
        if (!name.starts_with("libtorch") && !name.starts_with("libc10")) continue;
        std::string path =
            resolve_needed(name, *dependencies, ld_library_path != nullptr ? ld_library_path : "");
        if (path.empty()) {
            missing += (missing.empty() ? "" : ", ") + name;
            continue;
        }
        std::error_code error;
        auto real = std::filesystem::canonical(path, error);
        found += (found.empty() ? "" : ", ") + (error ? path : real.string());
    }
    if (found.empty() && missing.empty()) return "libtorch: the store plugin links none\n";
    if (missing.empty()) return "libtorch: " + found + "\n";
    return "libtorch: missing " + missing +
           " (multi-node c10d jobs need it: install libtorch, e.g. Debian's libtorch-dev)\n";
}

}  // namespace

const char* version() {
    return DDPRUN_VERSION;
}

const char* build_commit() {
    return DDPRUN_GIT_COMMIT;
}

std::string version_report() {
    std::string report = std::string("ddprun ") + version() + " (commit " + build_commit() + ")\n";
    StorePluginLocation plugin = locate_store_plugin();
    if (plugin.path.empty()) {
        report += "store plugin: not found in ";
        for (std::size_t i = 0; i < plugin.searched.size(); ++i)
            report += (i == 0 ? "" : " or ") + plugin.searched[i];
        report +=
            " (multi-node c10d jobs need it; single-node and etcd jobs do not)\n"
            "libtorch: not needed without the store plugin\n";
        return report;
    }
    report += "store plugin: " + plugin.path +
              (plugin.from_environment ? " (DDPRUN_STORE_PLUGIN)" : "") + "\n";
    return report + libtorch_line(plugin.path);
}

}  // namespace ddprun
