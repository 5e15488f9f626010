// Finding the plugins (see plugin_path.hpp).
#include "ddprun/base/plugin_path.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

namespace ddprun {

namespace {

bool file_exists(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0;
}

// Looked up once: both plugins are searched beside it.
const std::string& own_directory() {
    static const std::string dir = [] {
        std::error_code error;
        auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
        return error ? std::string() : exe.parent_path().string();
    }();
    return dir;
}

}  // namespace

// Set by CMake from the install layout (bin -> lib/ddprun): relative, so that
// a copied prefix finds its plugins like the original.
#ifndef DDPRUN_PLUGIN_RELATIVE_DIR
#define DDPRUN_PLUGIN_RELATIVE_DIR "../lib/ddprun"
#endif

PluginLocation locate_plugin(const char* file_name, const char* environment_variable) {
    PluginLocation location;
    if (const char* explicit_path = std::getenv(environment_variable);
        explicit_path != nullptr && *explicit_path != '\0') {
        location.path = explicit_path;
        location.searched.push_back(explicit_path);
        location.from_environment = true;
        return location;
    }
    const std::string& dir = own_directory();
    if (dir.empty()) return location;
    for (std::filesystem::path candidate :
         {std::filesystem::path(dir), std::filesystem::path(dir) / DDPRUN_PLUGIN_RELATIVE_DIR}) {
        candidate = candidate.lexically_normal();
        location.searched.push_back(candidate.string());
        if (std::string file = (candidate / file_name).string(); file_exists(file)) {
            location.path = file;
            break;
        }
    }
    return location;
}

std::string searched_places(const PluginLocation& location) {
    std::string text;
    for (std::size_t i = 0; i < location.searched.size(); ++i)
        text += (i == 0 ? "in " : " or ") + location.searched[i];
    return text;
}

PluginOpen open_plugin(const std::string& path_or_name, const char* entry) {
    void* handle = ::dlopen(path_or_name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        return {nullptr, why != nullptr ? why : "unknown error", true};
    }
    void* symbol = ::dlsym(handle, entry);
    return {symbol, {}, symbol != nullptr};
}

}  // namespace ddprun
