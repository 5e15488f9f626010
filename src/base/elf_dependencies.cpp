// DT_NEEDED and the run path of an ELF file, and the loader's search for each
// name (see elf_dependencies.hpp). Reads only headers and the dynamic section:
// --version must stay as fast as the rest of ddprun's start.
#include "ddprun/base/elf_dependencies.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "ddprun/base/fd.hpp"

namespace ddprun {
namespace {

#if defined(__x86_64__)
constexpr std::uint16_t k_machine = EM_X86_64;
constexpr std::string_view k_multiarch = "x86_64-linux-gnu";
#elif defined(__aarch64__)
constexpr std::uint16_t k_machine = EM_AARCH64;
constexpr std::string_view k_multiarch = "aarch64-linux-gnu";
#else
constexpr std::uint16_t k_machine = EM_NONE;  // any: not checked
constexpr std::string_view k_multiarch = "";
#endif

// "a:b::c" -> a, b, c (empty items dropped, as the loader drops them).
std::vector<std::string> split_path(std::string_view text) {
    std::vector<std::string> items;
    while (!text.empty()) {
        auto colon = text.find(':');
        if (colon != 0) items.emplace_back(text.substr(0, colon));
        if (colon == std::string_view::npos) break;
        text.remove_prefix(colon + 1);
    }
    return items;
}

// A shared object's dynamic section and its string table are a few KB;
// anything past this is a damaged file, not one to allocate for.
constexpr std::uint64_t k_max_table_bytes = 16 << 20;

// The ELF header of `file` (a mapped file's bytes), if it is a 64-bit little-endian one.
std::optional<Elf64_Ehdr> header_of(std::string_view file) {
    Elf64_Ehdr header{};
    if (file.size() < sizeof header) return std::nullopt;
    std::memcpy(&header, file.data(), sizeof header);
    if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return std::nullopt;
    if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
        return std::nullopt;
    return header;
}

// A library of another architecture (an i386 one on the search path) is skipped,
// as the loader skips it.
bool loadable(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return false;
    char bytes[sizeof(Elf64_Ehdr)];
    if (::pread(fd.get(), bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes))
        return false;
    auto header = header_of({bytes, sizeof bytes});
    return header && (k_machine == EM_NONE || header->e_machine == k_machine);
}

bool exists(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string expand_origin(std::string entry, const std::string& origin) {
    for (std::string_view token : {"${ORIGIN}", "$ORIGIN"})
        for (auto at = entry.find(token); at != std::string::npos; at = entry.find(token))
            entry.replace(at, token.size(), origin);
    return entry;
}

// An entry's flags say the library's kind and architecture, as the loader reads them
// (glibc's _dl_cache_check_flags): an entry of another architecture (an i386 one) is
// skipped without opening its file.
#if defined(__x86_64__)
constexpr std::int32_t k_cache_flags = 0x0303;  // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
#elif defined(__aarch64__)
constexpr std::int32_t k_cache_flags = 0x0a03;  // FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64
#else
constexpr std::int32_t k_cache_flags = -1;  // any: not checked
#endif

// The new-format cache (glibc 2.32 and later write only this one): a header,
// then entries of (flags, key, value, osversion, hwcap) whose key and value
// are offsets of strings from the start of the header.
std::string from_cache(const std::string& name, std::string_view data) {
    constexpr std::string_view k_magic = "glibc-ld.so.cache1.1";
    constexpr std::size_t k_header = 48, k_entry = 24;
    if (data.size() < k_header || !data.starts_with(k_magic)) return {};
    std::uint32_t count = 0;
    std::memcpy(&count, data.data() + 20, sizeof count);
    if (count > (data.size() - k_header) / k_entry) return {};
    auto string_at = [&data](std::uint32_t offset) -> std::string_view {
        if (offset >= data.size()) return {};
        const char* start = data.data() + offset;
        return {start, ::strnlen(start, data.size() - offset)};
    };
    for (std::uint32_t i = 0; i < count; ++i) {
        const char* entry = data.data() + k_header + std::size_t{i} * k_entry;
        std::int32_t flags = 0;
        std::uint32_t key = 0, value = 0;
        std::memcpy(&flags, entry, sizeof flags);
        if (k_cache_flags != -1 && flags != k_cache_flags) continue;
        std::memcpy(&key, entry + 4, sizeof key);
        std::memcpy(&value, entry + 8, sizeof value);
        // The name and its terminating NUL, without measuring every key first.
        if (key >= data.size() || data.size() - key <= name.size() ||
            data.compare(key, name.size(), name) != 0 || data[key + name.size()] != '\0')
            continue;
        std::string path(string_at(value));
        if (exists(path)) return path;
    }
    return {};
}

// The program headers of `file`, the bytes of the ELF file `path`; the error names it.
std::expected<std::vector<Elf64_Phdr>, std::string> segments_of(const std::string& path,
                                                                std::string_view file) {
    auto header = header_of(file);
    if (!header) return std::unexpected(path + ": not a 64-bit little-endian ELF file");
    std::vector<Elf64_Phdr> segments(header->e_phnum);
    const std::size_t bytes = segments.size() * sizeof(Elf64_Phdr);
    if (header->e_phentsize != sizeof(Elf64_Phdr) || header->e_phoff > file.size() ||
        file.size() - header->e_phoff < bytes)
        return std::unexpected(path + ": cannot read its program headers");
    std::memcpy(segments.data(), file.data() + header->e_phoff, bytes);
    return segments;
}

// Where the last of the loadable segments ends in the file.
std::uint64_t loaded_end(const std::vector<Elf64_Phdr>& segments) {
    std::uint64_t loaded = 0;
    for (const Elf64_Phdr& segment : segments)
        if (segment.p_type == PT_LOAD)
            loaded = std::max(loaded, segment.p_offset + segment.p_filesz);
    return loaded;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, std::size_t limit) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat info {};
    if (!fd || ::fstat(fd.get(), &info) != 0 || info.st_size <= 0) return;
    const std::size_t size = std::min(static_cast<std::size_t>(info.st_size), limit);
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (mapped != MAP_FAILED) m_data = {static_cast<const char*>(mapped), size};
}

MappedFile::~MappedFile() {
    if (!m_data.empty()) ::munmap(const_cast<char*>(m_data.data()), m_data.size());
}

std::string_view loaded_part(std::string_view file) {
    auto segments = segments_of({}, file);
    if (!segments) return {};
    return file.substr(0, std::min<std::uint64_t>(loaded_end(*segments), file.size()));
}

std::expected<ElfDependencies, std::string> read_elf_dependencies(const std::string& path) {
    const MappedFile file(path);
    if (file.data().empty()) {
        // Why it could not be mapped, in the words of open(2), or an empty file.
        UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return std::unexpected(path + ": " + std::strerror(errno));
    }
    return read_elf_dependencies(path, file.data());
}

std::expected<ElfDependencies, std::string> read_elf_dependencies(const std::string& path,
                                                                  std::string_view file) {
    auto read = segments_of(path, file);
    if (!read) return std::unexpected(read.error());
    const std::vector<Elf64_Phdr>& segments = *read;
    // Dynamic entries hold addresses; the file offsets come from the loads.
    auto file_offset = [&segments](std::uint64_t address) -> std::optional<std::uint64_t> {
        for (const Elf64_Phdr& segment : segments)
            if (segment.p_type == PT_LOAD && address >= segment.p_vaddr &&
                address < segment.p_vaddr + segment.p_filesz)
                return address - segment.p_vaddr + segment.p_offset;
        return std::nullopt;
    };
    // The loadable part holds the dynamic section and its strings.
    const std::string_view loaded =
        file.substr(0, std::min<std::uint64_t>(loaded_end(segments), file.size()));
    ElfDependencies out;
    for (const Elf64_Phdr& segment : segments) {
        if (segment.p_type != PT_DYNAMIC) continue;
        // Sizes from the file are bounded before anything is allocated for them.
        if (segment.p_filesz > k_max_table_bytes)
            return std::unexpected(path + ": its dynamic section is implausibly large");
        std::vector<Elf64_Dyn> entries(segment.p_filesz / sizeof(Elf64_Dyn));
        const std::size_t bytes = entries.size() * sizeof(Elf64_Dyn);
        if (segment.p_offset > loaded.size() || loaded.size() - segment.p_offset < bytes)
            return std::unexpected(path + ": cannot read its dynamic section");
        std::memcpy(entries.data(), loaded.data() + segment.p_offset, bytes);
        std::uint64_t strtab = 0, strsz = 0;
        for (const Elf64_Dyn& entry : entries) {
            if (entry.d_tag == DT_STRTAB) strtab = entry.d_un.d_ptr;
            if (entry.d_tag == DT_STRSZ) strsz = entry.d_un.d_val;
        }
        if (strsz > k_max_table_bytes)
            return std::unexpected(path + ": its dynamic string table is implausibly large");
        auto table_offset = file_offset(strtab);
        if (!table_offset || *table_offset > loaded.size() || loaded.size() - *table_offset < strsz)
            return std::unexpected(path + ": cannot read its dynamic string table");
        const std::string_view strings = loaded.substr(*table_offset, strsz);
        auto string_at = [&strings](std::uint64_t offset) -> std::string {
            if (offset >= strings.size()) return {};
            return std::string(strings.data() + offset,
                               ::strnlen(strings.data() + offset, strings.size() - offset));
        };
        std::string origin = std::filesystem::absolute(path).parent_path().string();
        std::string rpath, runpath;
        for (const Elf64_Dyn& entry : entries) {
            if (entry.d_tag == DT_NEEDED) out.needed.push_back(string_at(entry.d_un.d_val));
            if (entry.d_tag == DT_RPATH) rpath = string_at(entry.d_un.d_val);
            if (entry.d_tag == DT_RUNPATH) runpath = string_at(entry.d_un.d_val);
        }
        // DT_RUNPATH wins over DT_RPATH when both are there, as in the loader.
        out.run_path_is_rpath = runpath.empty() && !rpath.empty();
        for (const std::string& dir : split_path(runpath.empty() ? rpath : runpath))
            out.run_path.push_back(expand_origin(dir, origin));
    }
    return out;
}

std::string resolve_needed(const std::string& name, const ElfDependencies& object,
                           const std::string& ld_library_path, std::string_view cache) {
    if (name.find('/') != std::string::npos) return exists(name) ? name : std::string();
    auto search = [&name](const std::vector<std::string>& dirs) -> std::string {
        for (const std::string& dir : dirs)
            if (std::string path = dir + "/" + name; exists(path) && loadable(path)) return path;
        return {};
    };
    std::vector<std::string> environment_dirs = split_path(ld_library_path);
    std::vector<std::string> first = object.run_path_is_rpath ? object.run_path : environment_dirs;
    std::vector<std::string> second = object.run_path_is_rpath ? environment_dirs : object.run_path;
    for (const auto* dirs : {&first, &second})
        if (std::string path = search(*dirs); !path.empty()) return path;
    if (std::string path = from_cache(name, cache); !path.empty()) return path;
    std::vector<std::string> defaults;
    if (!k_multiarch.empty())
        for (std::string_view root : {"/lib/", "/usr/lib/"})
            defaults.push_back(std::string(root) + std::string(k_multiarch));
    defaults.insert(defaults.end(), {"/lib", "/usr/lib"});
    return search(defaults);
}

}  // namespace ddprun
