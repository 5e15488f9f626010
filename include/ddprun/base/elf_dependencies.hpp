// What a shared object would load, found without loading it: its DT_NEEDED
// entries and its run path, read from the ELF file, and each name resolved the
// way the dynamic loader does (LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, the
// default directories). Used by --version to say which libtorch the store
// plugin would bring in: dlopen'ing it to find out would cost 0.4 s.
#pragma once

#include <expected>
#include <string>
#include <vector>

namespace ddprun {

struct ElfDependencies {
    std::vector<std::string> needed;    // DT_NEEDED, in order
    std::vector<std::string> run_path;  // DT_RUNPATH (else DT_RPATH), $ORIGIN expanded
    bool run_path_is_rpath = false;     // DT_RPATH: searched before LD_LIBRARY_PATH
};

// Reads a 64-bit little-endian ELF file (the only kind ddprun is built for).
// The error names the file and what is wrong with it.
std::expected<ElfDependencies, std::string> read_elf_dependencies(const std::string& path);

// Where the loader would find `name` (a DT_NEEDED entry) for an object with
// these dependencies; empty when nowhere. `ld_library_path` is the value of
// LD_LIBRARY_PATH (may be empty), `cache_file` the loader's cache.
std::string resolve_needed(const std::string& name, const ElfDependencies& object,
                           const std::string& ld_library_path,
                           const std::string& cache_file = "/etc/ld.so.cache");

}  // namespace ddprun
