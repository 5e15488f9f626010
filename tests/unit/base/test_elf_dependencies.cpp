// --version reports the libtorch the store plugin would load by reading the
// plugin's ELF headers and searching as the loader does; these tests hold that
// search to what the loader really does for this very test binary.

#include "ddprun/base/elf_dependencies.hpp"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddprun {
namespace {

std::string own_path() {
    return std::filesystem::read_symlink("/proc/self/exe").string();
}

// Where the loader really put `name` in this process.
std::string loaded_path(const std::string& name) {
    void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return {};
    link_map* map = nullptr;
    ::dlinfo(handle, RTLD_DI_LINKMAP, &map);
    std::string path = map != nullptr ? map->l_name : "";
    ::dlclose(handle);
    return path;
}

TEST(ElfDependencies, ReadsTheNeededLibrariesOfThisBinary) {
    auto dependencies = read_elf_dependencies(own_path());
    ASSERT_TRUE(dependencies.has_value()) << dependencies.error();
    const auto& needed = dependencies->needed;
    EXPECT_NE(std::find(needed.begin(), needed.end(), "libc.so.6"), needed.end());
}

TEST(ElfDependencies, ResolvesAsTheLoaderDid) {
    auto dependencies = read_elf_dependencies(own_path());
    ASSERT_TRUE(dependencies.has_value()) << dependencies.error();
    const char* ld_library_path = std::getenv("LD_LIBRARY_PATH");
    const MappedFile cache(k_loader_cache);
    ASSERT_FALSE(cache.data().empty());
    for (const std::string& name : dependencies->needed) {
        std::string loaded = loaded_path(name);
        if (loaded.empty()) continue;
        std::string resolved = resolve_needed(name, *dependencies,
                                              ld_library_path ? ld_library_path : "", cache.data());
        EXPECT_EQ(std::filesystem::canonical(resolved), std::filesystem::canonical(loaded)) << name;
    }
}

TEST(ElfDependencies, WithoutTheCacheTheDefaultDirectoriesAreSearched) {
    ElfDependencies none;
    const MappedFile missing("/nonexistent/ld.so.cache");
    EXPECT_TRUE(missing.data().empty());
    std::string path = resolve_needed("libc.so.6", none, "", missing.data());
    EXPECT_FALSE(path.empty());
    const MappedFile cache(k_loader_cache);
    EXPECT_TRUE(resolve_needed("libddprun-no-such-library.so.1", none, "", cache.data()).empty());
}

TEST(ElfDependencies, RunPathAndLibraryPathComeFirst) {
    char dir_template[] = "/tmp/ddprun-elf-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    std::filesystem::path dir = dir_template;
    // A copy of this (loadable) binary under a library's name.
    std::filesystem::copy_file(own_path(), dir / "libfake.so.1");
    ElfDependencies object;
    object.run_path = {dir.string()};
    const MappedFile cache(k_loader_cache);
    EXPECT_EQ(resolve_needed("libfake.so.1", object, "", cache.data()),
              (dir / "libfake.so.1").string());
    EXPECT_EQ(resolve_needed("libfake.so.1", ElfDependencies{}, "/nonexistent:" + dir.string(),
                             cache.data()),
              (dir / "libfake.so.1").string());
    EXPECT_TRUE(resolve_needed("libfake.so.1", ElfDependencies{}, "", cache.data()).empty());
    std::filesystem::remove_all(dir);
}

TEST(ElfDependencies, ANonElfFileIsAnErrorNamingIt) {
    char path[] = "/tmp/ddprun-elf-test-XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "#!/bin/sh\n", 10), 10);
    ::close(fd);
    auto dependencies = read_elf_dependencies(path);
    ASSERT_FALSE(dependencies.has_value());
    EXPECT_NE(dependencies.error().find(path), std::string::npos) << dependencies.error();
    std::filesystem::remove(path);
    auto missing = read_elf_dependencies("/nonexistent/libx.so");
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.error().find("/nonexistent/libx.so"), std::string::npos);
}

}  // namespace
}  // namespace ddprun
