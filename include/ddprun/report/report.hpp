// Report: what went wrong in a job, as data, and how to show it. Pure:
// failures in, one summary box and one exit code out. A worker's error message
// comes from its error file (error_file.hpp, included for the callers that
// fill WorkerOutcome from it).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/signals.hpp"
#include "ddprun/report/error_file.hpp"

namespace ddprun {

// How one worker ended, as the agent observed it.
struct WorkerOutcome {
    int rank = 0;
    int local_rank = 0;
    int node_rank = 0;
    std::string host;
    int pid = 0;
    int exit_code = 0;               // when it exited normally
    int signal = 0;                  // non-zero: it died of this signal
    bool stopped_by_ddprun = false;  // ddprun stopped it because of another failure or a signal
    std::chrono::system_clock::time_point time;  // when the agent saw it end
    std::string error_message;                   // from its error file, may be empty
    std::vector<std::string> stderr_tail;        // last lines of its stderr
    // Of a SIGKILL: "killed by the kernel's OOM killer (memory cgroup ...)" when
    // the cgroup's counter says so (workers/oom.hpp); empty when not, or unknown.
    std::string oom;
    // --report-lines: its stderr lines that matched (the last 10), and how many did.
    std::vector<std::string> report_lines;
    std::size_t report_lines_total = 0;

    bool failed() const { return signal != 0 || exit_code != 0; }
};

// The exit code a worker's end maps to: its code, or 128+N for signal N.
int exit_code_of(const WorkerOutcome& outcome);

// Index of the root cause among outcomes: the earliest failure by time that
// ddprun did not cause itself; if every failure was stopped by ddprun, the
// earliest failure; nullopt when nothing failed.
std::optional<std::size_t> root_cause(const std::vector<WorkerOutcome>& outcomes);

// The summary box printed when a job fails: the root cause (rank, local rank,
// host, pid, exit code or signal name, time, error-file message, stderr tail),
// then one line per other failure, those stopped by ddprun marked "stopped".
// `title` is e.g. "ddprun: job failed". Plain text, no colours, lines <= ~100
// columns apart from quoted worker output. `exit_code`: what the job exits with,
// when not the root cause's (ddprun's own choice, e.g. --max-no-progress-restarts).
std::string format_summary(const std::string& title, const std::vector<WorkerOutcome>& outcomes,
                           std::size_t root, std::optional<int> exit_code = std::nullopt);

// The summary box of a hung job (--hang-timeout): `cause` (which rank stopped
// beating, from the round's stop), `picture` (every node's ranks in one line,
// hang_monitor.hpp), then one line per rank of this node with its top frames.
std::string format_hang_summary(const std::string& title, int exit_code, const std::string& cause,
                                const std::string& picture,
                                const std::vector<std::string>& rank_lines);

}  // namespace ddprun
