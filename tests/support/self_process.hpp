// Running this test binary again, as a child with a gtest filter, for checks
// that need a fresh process: which libraries a step loads can only be seen
// in a process that has loaded nothing yet.
#pragma once

#include <filesystem>
#include <string>
#include <utility>

namespace ddprun {

// /proc/self/exe.
std::filesystem::path own_path();

// Runs `exe` (this binary) with --gtest_filter=`filter`, `env` ("NAME=value
// ...", or "-u NAME") added to its environment and DDPRUN_TEST_CHILD=1:
// its exit code and its output (stdout and stderr).
std::pair<int, std::string> run_self(const std::string& filter, const std::string& env,
                                     const std::filesystem::path& exe = own_path());

// True in the child run_self started: the child tests skip everywhere else.
bool in_child();

// True if a library whose file name contains `name` is mapped in this process.
bool library_loaded(const std::string& name);

}  // namespace ddprun
