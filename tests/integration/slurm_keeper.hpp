// The keeper of the scheduler tests' Slurm cluster: a small process that owns
// the daemons and the cluster's /etc/hosts line, so that nothing of the
// cluster outlives the test binary, not even when it crashes or CTest's
// timeout SIGKILLs it, where no destructor or atexit handler runs.
//
// It is forked twice from the test binary, so it is nobody's child there (no
// test counts it as a leftover), and it is a child subreaper, so the
// slurmstepd processes that slurmd double-forks come back to it too. It reads
// requests from a pipe whose write end only the test process holds: "stop",
// or end of file (the test process is gone, however it ended), makes it stop
// the daemons, kill whatever of the cluster is left (its orphans, and the
// clients of a test binary that died), remove its /etc/hosts
// line and exit. Its first act is to add that line, after removing the lines
// of keepers that are gone (a run killed too hard even for its keeper).
#pragma once

#include <sys/types.h>

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "harness.hpp"

namespace ddprun_it {

// The text every /etc/hosts line of a keeper carries, followed by its pid.
inline constexpr std::string_view k_hosts_marker = "# ddprun slurm test harness, keeper pid ";

// A daemon the keeper may start: its own process group, stdin /dev/null,
// stdout and stderr appended to `log`.
struct DaemonSpec {
    std::string name;               // "munged", "slurmctld", "slurmd n1", ...
    std::vector<std::string> argv;  // argv[0] an absolute path
    std::string log;
};

// The test process's handle on its keeper.
class Keeper {
  public:
    Keeper() = default;
    // Closes the pipe: the keeper cleans up by itself.
    ~Keeper();
    Keeper(const Keeper&) = delete;
    Keeper& operator=(const Keeper&) = delete;

    // Forks the keeper, which maps `nodes` to 127.0.0.1 in /etc/hosts; it may
    // then start any of `daemons`. Processes whose environment holds
    // `cluster_env` (SLURM_CONF=...: the cluster's clients and their jobs)
    // are the cluster's too and do not outlive it. Its own output goes to
    // `log`. Empty when it runs, else why not (it has exited then).
    std::string start(const std::vector<DaemonSpec>& daemons, const std::vector<std::string>& nodes,
                      const std::string& cluster_env, const std::string& log);
    // Starts daemons[index]; its pid, or why not.
    std::expected<pid_t, std::string> start_daemon(std::size_t index);
    // Has the keeper stop the daemons (SIGTERM, latest started first), kill
    // what is left, restore /etc/hosts and exit; waits for that, bounded.
    // Empty when it all went well, else what did not.
    std::string stop();
    bool running() const { return m_control >= 0; }

  private:
    int m_control = -1;  // test -> keeper: "start <i>", "stop"
    int m_report = -1;   // keeper -> test: one line per request
};

}  // namespace ddprun_it
