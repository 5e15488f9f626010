// libFuzzer entry point of one fuzz target (targets.hpp), chosen when this
// file is compiled: CMake builds it once per target with DDPRUN_FUZZ_TARGET
// set to the target's name (fuzz_cli, fuzz_hostlist, ...). A broken promise
// aborts, which libFuzzer records as a crash with the input that caused it.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "targets.hpp"

namespace {

const ddprun_fuzz::Target& this_target() {
    for (const auto& target : ddprun_fuzz::k_targets) {
        if (target.name == DDPRUN_FUZZ_TARGET) return target;
    }
    std::fprintf(stderr, "fuzz_target: no target named %s\n", DDPRUN_FUZZ_TARGET);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const ddprun_fuzz::Target& target = this_target();
    std::string problem = target.check(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!problem.empty()) {
        std::fprintf(stderr, "fuzz_%s: %s\n", DDPRUN_FUZZ_TARGET, problem.c_str());
        std::abort();
    }
    return 0;
}
