// Where ddprun finds its plugins (libddprun_store.so, libddprun_openssl.so):
// the libraries that only some jobs need, dlopen'ed on first use, so that the
// binary itself links nothing but libc and libstdc++ and starts like one.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

struct PluginLocation {
    std::string path;                   // empty when not found
    std::vector<std::string> searched;  // every directory (or path) looked at, in order
    bool from_environment = false;      // the environment variable named it
};

// $`environment_variable` (used alone when set), then `file_name` beside the
// running binary, then in the install's plugin directory relative to it
// (bin -> lib/ddprun, so that a copied prefix finds its plugins like the
// original). Not found: path empty; the caller may still try the loader's
// search path (a test binary's RUNPATH names the build tree).
PluginLocation locate_plugin(const char* file_name, const char* environment_variable);

// "in DIR or DIR", for a message that says where a plugin was looked for.
std::string searched_places(const PluginLocation& location);

// A plugin opened (never closed: what it makes lives as long as its owners)
// and its entry point looked up; each caller words the failures for its plugin.
struct PluginOpen {
    void* entry = nullptr;
    std::string dl_error;   // dlerror() when the file could not be loaded
    bool has_entry = true;  // false: loaded, but it has no `entry` (another version)
};
PluginOpen open_plugin(const std::string& path_or_name, const char* entry);

}  // namespace ddprun
