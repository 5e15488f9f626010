// Running this test binary again (see self_process.hpp).
#include "support/self_process.hpp"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace ddprun {

std::filesystem::path own_path() {
    std::error_code error;
    return std::filesystem::read_symlink("/proc/self/exe", error);
}

std::pair<int, std::string> run_self(const std::string& filter, const std::string& env,
                                     const std::filesystem::path& exe) {
    std::string command = "env " + env + " DDPRUN_TEST_CHILD=1 '" + exe.string() +
                          "' --gtest_filter='" + filter + "' 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return {-1, "popen failed: " + command};
    std::string output;
    std::array<char, 4096> buffer{};
    while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
        output.append(buffer.data(), n);
    int status = ::pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

bool in_child() {
    return std::getenv("DDPRUN_TEST_CHILD") != nullptr;
}

bool library_loaded(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find(name) != std::string::npos) return true;
    return false;
}

}  // namespace ddprun
