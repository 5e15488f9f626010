// What a shared object would load, found without loading it: its DT_NEEDED
// entries and its run path, read from the ELF file, and each name resolved the
// way the dynamic loader does (LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, the
// default directories). Used by --version to say which libtorch the store
// plugin would bring in: dlopen'ing it to find out would cost 0.4 s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <limits>
#include <string>
#include <string_view>
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
// The same from `file`, the bytes of `path` (a MappedFile's): --version maps a
// plugin once for its dependencies and its marker string (every system call
// costs 10-100 us on a VM, and --version has 3 ms).
std::expected<ElfDependencies, std::string> read_elf_dependencies(const std::string& path,
                                                                  std::string_view file);

// The loadable part of the ELF file whose bytes are `file` (what the loader maps
// of it: not the debug information after it); empty if it is no ELF file.
std::string_view loaded_part(std::string_view file);

// A file's first `limit` bytes (all of it when shorter), mapped read-only: the
// kernel maps the cached pages around each fault, where a read would zero and
// copy every page, and only the pages touched cost anything. Empty when the
// file cannot be opened or mapped.
class MappedFile {
  public:
    explicit MappedFile(const std::string& path,
                        std::size_t limit = std::numeric_limits<std::size_t>::max());
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::string_view data() const { return m_data; }

    // Leaves the mapping to the process's exit, which tears the whole address
    // space down at once: for a process that ends next (--version), where each
    // munmap's TLB flush costs more on a VM than what was read.
    void keep_until_exit() { m_data = {}; }

  private:
    std::string_view m_data;
};

inline constexpr const char* k_loader_cache = "/etc/ld.so.cache";

// Where the loader would find `name` (a DT_NEEDED entry) for an object with
// these dependencies; empty when nowhere. `ld_library_path` is the value of
// LD_LIBRARY_PATH (may be empty), `cache` the bytes of the loader's cache
// (MappedFile(k_loader_cache), mapped once for every name: each unmapping is a
// TLB flush that costs more than a lookup; empty for none).
std::string resolve_needed(const std::string& name, const ElfDependencies& object,
                           const std::string& ld_library_path, std::string_view cache);

}  // namespace ddprun
