// WorkerGroup: one round's workers on this node, from their start to the last
// exit. It starts them (spawn.hpp) with their log directories and error files
// ready, carries their output through a LogMux, stops them within a bounded
// grace, and keeps each one's outcome for the report. It never reaps: the
// agent owns the one waitpid loop and passes every exit to on_exit(), and it
// never decides what an exit means for the job: the agent does.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/base/error.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/report/report.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

// How long a worker that outlives SIGKILL (stuck in the kernel, e.g. in a GPU
// driver call) is waited for before it is given up on, so ddprun never hangs.
inline constexpr std::chrono::milliseconds k_kill_bound{10000};

class WorkerGroup {
  public:
    struct Options {
        std::chrono::milliseconds kill_bound = k_kill_bound;
        // Orphans of a finished round get this long to die after SIGKILL.
        std::chrono::milliseconds sweep_bound{5000};
        int stdout_fd = 1;  // the console (tests pass pipes)
        int stderr_fd = 2;
    };

    // `context` must outlive the group. `on_given_up` runs (on the loop) when
    // workers that did not die after SIGKILL were given up on: running() may
    // have dropped to 0 without an on_exit().
    WorkerGroup(boost::asio::io_context& io, const LaunchContext& context,
                std::function<void()> on_given_up, Options options);
    WorkerGroup(boost::asio::io_context& io, const LaunchContext& context,
                std::function<void()> on_given_up);
    ~WorkerGroup();
    WorkerGroup(const WorkerGroup&) = delete;
    WorkerGroup& operator=(const WorkerGroup&) = delete;

    // Starts this node's workers of round `round` as `info` places them
    // (plan_node), after making their log directories and removing stale error
    // files. Must run on the agent's main thread (see spawn.hpp). On failure
    // the workers already started keep running: the caller kills them.
    Status start(int round, const RoundInfo& info);

    // A child of the agent exited with wait status `status`. The worker's
    // outcome, complete with its error-file message and last stderr lines, when
    // `pid` was one of this group's running workers; nullopt for anything else
    // (an orphan reparented to the agent).
    std::optional<WorkerOutcome> on_exit(pid_t pid, int status);

    // Sends `signal` to every running worker now and SIGKILL to those still
    // running after `grace` (zero or less: at once).
    // `send` false: the workers got `signal` already (from Slurm's step daemon,
    // see sent_by_step_daemon); only the grace and the kill after it remain.
    void stop(int signal, std::chrono::milliseconds grace, bool send = true);
    // SIGKILL to every running worker now.
    void kill();
    // Passes `signal` on to every running worker's process group.
    void forward(int signal);

    // A running worker, for the hang report and the stacks.
    struct Running {
        int rank = 0;
        int local_rank = 0;
        pid_t pid = -1;
        std::string devices;  // its CUDA_VISIBLE_DEVICES as set; empty: left as inherited
    };
    std::vector<Running> running_workers() const;
    // Where a worker's files go under --log_dir (stdout.log, stderr.log, stacks.txt);
    // nullopt without --log_dir.
    std::optional<std::string> log_dir_of(int local_rank) const;
    // Sends `signal` to one running worker's process (not its group), as ddprun's own
    // doing: its end is not a root cause (a hang's SIGABRT for its stacks).
    // Target::MainThread directs it at the thread that runs main() (the Python
    // program): a signal sent to the process goes to whichever of its threads
    // takes it first, which for a stopped worker woken by SIGCONT is any of them.
    enum class Target { Process, MainThread };
    void signal_worker(pid_t pid, int signal, Target target = Target::Process);

    // With --hang-timeout (or --max-no-progress-restarts), each worker writes beats
    // to DDPRUN_PROGRESS_FD (progress.hpp): the running workers that wrote since the
    // last call, and the last line each wrote ("" if none).
    struct Beat {
        int rank = 0;
        std::string label;
        std::uint64_t lines = 0;  // whole lines written since the last read
    };
    std::vector<Beat> read_beats();
    // Whether any worker of the round beat (running or ended), for
    // --max-no-progress-restarts. Looks at every channel, so read_beats() sees
    // nothing of what this one read: for the round's stop.
    bool beaten();

    int running() const;

    // After the round: kills and reaps whatever the workers left behind
    // (grandchildren reparented to the agent), then carries every byte still in
    // the pipes and closes the log files. Returns the problems worth a line each.
    std::vector<std::string> finish();

    // Every worker of the round as it ended, with error-file message and stderr tail.
    std::vector<WorkerOutcome> outcomes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace ddprun
