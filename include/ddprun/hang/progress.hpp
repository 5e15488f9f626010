// ProgressChannel: how a worker tells ddprun it is making progress, with no
// library in the worker. The worker writes lines to the file descriptor named
// in DDPRUN_PROGRESS_FD (`os.write(fd, b"step 1200\n")`); each write is a beat,
// and the last line, if any, is the worker's label (its step, its section).
//
// Why an in-memory file (memfd) opened for appending rather than a pipe: a
// write to it never blocks and never fails for want of a reader, even while
// ddprun is slow or SIGSTOPped, where a full pipe would block the worker (or,
// made non-blocking, raise EAGAIN into its training loop). ddprun notices a
// beat as the file's growth when it looks, which it does a few times per
// hang-timeout: beats matter at that resolution, not each one. What was read
// is given back to the kernel with FALLOC_FL_PUNCH_HOLE, so a beat storm costs
// at most what arrives between two looks, and nothing is ever truncated under
// a writer (a beat can be neither lost nor cut).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <optional>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/base/fd.hpp"

namespace ddprun {

// The environment variable that names the worker's end.
inline constexpr const char* k_progress_fd_env = "DDPRUN_PROGRESS_FD";

class ProgressChannel {
  public:
    // A new, empty channel; both ends are close-on-exec (the worker's end is made
    // inheritable in the child only, between fork and exec).
    static std::expected<ProgressChannel, Error> create();

    // The worker's end: write-only, O_APPEND. Closed in the agent once the worker
    // has it (close_worker_end).
    int worker_fd() const { return m_worker.get(); }
    void close_worker_end() { m_worker.reset(); }

    // What arrived since the last look.
    struct Seen {
        std::uint64_t bytes = 0;  // written since the last look (0: no beat)
        std::uint64_t lines = 0;  // whole lines among them: steps, for --metrics-port's rate
        std::string label;        // the last line written, if any arrived ("" else)
    };
    // Looks at what the worker wrote since the last call. Never blocks.
    Seen look();

  private:
    ProgressChannel(UniqueFd reader, UniqueFd worker) noexcept
        : m_reader(std::move(reader)), m_worker(std::move(worker)) {}

    UniqueFd m_reader;  // read-write: read the tail, punch what was read
    UniqueFd m_worker;
    std::uint64_t m_seen = 0;     // bytes looked at so far (the file's size then)
    std::uint64_t m_punched = 0;  // bytes given back so far
};

}  // namespace ddprun
