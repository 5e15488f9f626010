// The table behind known_error_fix (known_errors.hpp). Each entry is a text
// that appears in the error verbatim, in every torch version that prints it,
// and the one fix that is right whenever it does.
#include "ddprun/report/known_errors.hpp"

#include <array>

namespace ddprun {
namespace {

struct KnownError {
    std::string_view text;
    std::string_view fix;
};

constexpr std::array k_known_errors{
    // torch 2.4 and later: TCPStore defaults to libuv, which Debian's torch (and
    // other source builds) lack, so every init_process_group(env://) fails; with the
    // agent's store shared (TORCHELASTIC_USE_AGENT_STORE=True), even with USE_LIBUV=0. The
    // text stops short of "built": torch 2.6 (Debian 13's) says "was build without".
    KnownError{"use_libuv was requested but PyTorch was buil",
               "this torch has no libuv: export USE_LIBUV=0 before ddprun (workers inherit it) "
               "and leave TORCH_DISABLE_SHARE_RDZV_TCP_STORE unset (torch's client of a shared "
               "store ignores USE_LIBUV); a TCPStore(...) of your own needs use_libuv=False"},
    // A CPU-only torch (Debian's, pip's +cpu wheels) asked for NCCL.
    KnownError{"Distributed package doesn't have NCCL built in",
               "this torch has no NCCL (a CPU-only build): use backend=\"gloo\", or install a "
               "CUDA build of torch"},
    // The python3 on PATH is not the one torch is installed for.
    KnownError{"No module named 'torch'",
               "the worker's Python has no torch: name the interpreter that has it with "
               "PYTHON_EXEC=/path/to/python (e.g. /usr/bin/python3 for Debian's python3-torch)"},
};

}  // namespace

std::optional<std::string_view> known_error_fix(std::string_view error_message,
                                                const std::vector<std::string>& stderr_tail) {
    for (const KnownError& known : k_known_errors) {
        if (error_message.contains(known.text)) return known.fix;
        for (const std::string& line : stderr_tail)
            if (line.contains(known.text)) return known.fix;
    }
    return std::nullopt;
}

}  // namespace ddprun
