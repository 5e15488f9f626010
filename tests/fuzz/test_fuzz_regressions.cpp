// Replays every saved fuzz input through its parser in the normal build:
// tests/fuzz/corpus/<target>/ (the seeds) and tests/fuzz/regressions/<target>/
// (inputs that once crashed or broke a promise, saved there by
// scripts/fuzz.sh). A fixed bug stays fixed even where clang and libFuzzer
// are not installed.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/build_paths.hpp"
#include "targets.hpp"

namespace ddprun_fuzz {
// Names a target in test output instead of dumping its bytes.
void PrintTo(const Target& target, std::ostream* os) {
    *os << target.name;
}
}  // namespace ddprun_fuzz

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(std::string_view target) {
    std::vector<fs::path> files;
    for (const char* kind : {"corpus", "regressions"}) {
        fs::path dir = fs::path(ddprun_test::build_paths::fuzz_dir) / kind / target;
        std::error_code error;
        for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
            if (it->is_regular_file() && it->path().filename() != ".gitkeep")
                files.push_back(it->path());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::string read_bytes(const fs::path& path) {
    std::ifstream file(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

class FuzzRegressions : public ::testing::TestWithParam<ddprun_fuzz::Target> {};

TEST_P(FuzzRegressions, EverySavedInputKeepsTheParsersPromises) {
    const auto& target = GetParam();
    auto files = inputs_of(target.name);
    // The seeds are part of the repository: an empty list means a wrong fuzz_dir.
    ASSERT_FALSE(files.empty()) << "no inputs under " << ddprun_test::build_paths::fuzz_dir
                                << "/corpus/" << target.name;
    for (const auto& file : files) {
        EXPECT_EQ(target.check(read_bytes(file)), "") << file;
    }
}

INSTANTIATE_TEST_SUITE_P(Parsers, FuzzRegressions, ::testing::ValuesIn(ddprun_fuzz::k_targets),
                         [](const ::testing::TestParamInfo<ddprun_fuzz::Target>& param_info) {
                             return std::string(param_info.param.name);
                         });

}  // namespace
