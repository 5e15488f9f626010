// The agent's state (see agent.cpp for the state machine, agent_signals.cpp
// for how signals are answered in each phase): shared by the two files that
// implement Agent, and by nothing else.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent_event_log.hpp"
#include "ddprun/agent/agent.hpp"
#include "ddprun/base/ports.hpp"
#include "ddprun/base/signal_reader.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/events/event_log.hpp"
#include "ddprun/fanout/lifeline.hpp"
#include "ddprun/hang/hang_monitor.hpp"
#include "ddprun/hang/stacks.hpp"
#include "ddprun/hang/uninterruptible.hpp"
#include "ddprun/metrics/metrics_server.hpp"
#include "ddprun/workers/health_check.hpp"
#include "lifeline_link.hpp"
#include "uninterruptible_guard.hpp"

namespace ddprun {

namespace asio = boost::asio;

// A --progress-file as it was at one moment: a change to any of it is progress
// (a checkpoint rewritten in place, or replaced by a rename).
struct FileStamp {
    bool exists = false;
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::int64_t size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
};
FileStamp stamp_of(const std::string& path);

// How a round ended for this node.
struct RoundResult {
    // Reformed: an elastic job's membership changed; the next round follows, no restart used.
    enum class Kind { Succeeded, Failed, Stopped, Aborted, Reformed } kind = Kind::Succeeded;
    int exit_code = 0;
};

struct Agent::Impl {
    LaunchContext ctx;
    ClusterFactory make_cluster;
    asio::io_context io;
    WorkerGroup workers;
    std::unique_ptr<Cluster> cluster;
    std::optional<SignalReader> signals;
    SignalCopies signal_copies;
    std::optional<PortReservation> port;  // MASTER_PORT, held for the round
    // Node 0's, where the round's workers share the agent's store (worker_store.hpp): a
    // TCPStore at MASTER_PORT, kept until the next round replaces it or the agent ends.
    std::unique_ptr<WorkerStoreHost> worker_store;

    enum class Phase {
        Connecting,
        Checking,
        Joining,
        Running,
        Stopping,
        Killing,
        Done
    } phase = Phase::Done;
    int round = 0;
    int node_rank = -1;   // -1 until the first join assigns it
    int stop_signal = 0;  // the signal that stopped this agent, 0 if none
    bool failure_published = false;
    bool kill_requested = false;          // another node asked every node to kill its workers
    bool left = false;                    // an elastic job's node leaving on a stop signal
    bool join_failed = false;             // the join's error is in; signals only give up
    std::optional<StopEvent> stop_event;  // how the round ended job-wide

    // --max-no-progress-restarts (agent_progress.cpp): whether this node's ranks made
    // progress in the round (decided at its stop, told to the others), the progress
    // file as the round started, and the restarts in a row after rounds without any.
    std::optional<bool> made_progress;
    std::optional<FileStamp> progress_stamp;
    int restarts_without_progress = 0;
    void watch_progress();         // at the round's start
    void note_progress();          // at its failure's stop: this node's, told to the others
    bool stops_for_no_progress();  // after a failed round that would restart: every node alike

    // --health-check (agent_health.cpp): run before each join; one for the agent's life,
    // as a run's handlers may still be queued on the loop after it ended.
    HealthCheck health_check{io, ctx.config.health_check, ctx.config.health_check_timeout};
    std::optional<RoundInfo> last_round;  // the round joined last: the node's ranks
    // This round's failure restarts the job: the next round's count is one more.
    bool restart_decided = false;
    // Restarts after failures so far, job-wide, the one count every output gives
    // (/metrics, the status record, the event log, the health check): the round
    // record's (RoundInfo::restart_count, the workers' TORCHELASTIC_RESTART_COUNT), and
    // one more from a restart decided here until the next round's record says it.
    int restart_count() const;
    std::optional<int> check_health();  // an exit code where this node stays out
    std::string describe_node() const;  // "node 1 (gpu02)", or the host before a rank

    // --event-log (agent_events.cpp, agent_event_log.hpp).
    AgentEventLog events;
    void log_round_stop();       // stop_event, just set; and the barrier left, if entered
    int job_end(int exit_code);  // writes the job's end to the event log; returns exit_code

    // --metrics-port (agent_metrics.cpp, metrics_server.hpp): served on the agent's loop
    // from what the agent keeps below and above.
    std::unique_ptr<MetricsServer> metrics;
    std::map<std::string, std::int64_t> exits_by_cause;  // this node's workers, every round
    std::optional<double> last_join_seconds;
    std::optional<double> last_barrier_seconds;
    std::optional<int> serve_metrics();  // an exit code where it cannot listen
    void count_exit(const WorkerOutcome& outcome);
    AgentSnapshot snapshot();

    // Status (agent_status.cpp, node_status.hpp): a multi-node agent hands its cluster its
    // record every k_status_tick, which publishes it at its own pace; node 0 names
    // stragglers from every node's rates, measured over rate_window().
    static constexpr std::chrono::seconds k_status_tick{1};
    std::unique_ptr<asio::steady_timer> status_timer;
    void watch_status();
    NodeStatus node_status();
    void on_straggler(const Straggler& straggler);
    HangMonitor::Clock::duration rate_window() const;

    Impl(LaunchContext context, ClusterFactory factory, WorkerGroup::Options worker_options)
        : ctx(std::move(context)),
          make_cluster(std::move(factory)),
          workers(
              io, ctx, [this] { finish_round_if_done(); }, worker_options) {
        node_rank = ctx.config.nnodes > 1 ? ctx.config.node_rank.value_or(-1)
                                          : ctx.config.node_rank.value_or(0);
    }

    template <class Done>
    void run_until(Done done) {
        // The signal reader always has a read pending, so run_one() blocks rather than spins.
        io.restart();
        while (!done()) io.run_one();
    }

    std::optional<int> open();
    int run_rounds();  // every round, until the job's exit code is known
    std::expected<RoundInfo, int> join();
    // Node 0 hosts the workers' store of a round that shares it (worker_store.hpp).
    Status host_worker_store(const RoundInfo& info);
    RoundResult run_round(const RoundInfo& info);
    RoundResult round_result();
    // The failure's box (this node's, or the job's where one console is shared);
    // returns the exit code: the root cause's, or `job_exit_code` where ddprun chose one.
    int report_failure(const std::string& title, std::optional<int> job_exit_code = std::nullopt);
    // Every node's output goes to one console (srun's, mpirun's): one summary
    // box for the job, on node 0, instead of a partial one per node.
    bool shared_console() const {
        return ctx.config.nnodes > 1 &&
               (ctx.config.scheduler == "slurm" || ctx.config.scheduler == "mpi");
    }

    void on_signal(const ReceivedSignal& received);
    // A forward-only signal relayed from Slurm's step daemon waits this long for
    // the agent's direct copy, which says the workers have theirs already.
    static constexpr std::chrono::milliseconds k_step_copy_window{200};
    std::map<int, std::unique_ptr<asio::steady_timer>> held_forwards;  // by signal
    void hold_forward(int signal);
    // `workers_have_it`: Slurm's step daemon signalled the agent directly, so it
    // signalled the workers too (see sent_by_step_daemon).
    void on_stop_signal(int signal, bool workers_have_it = false);
    // Kills this node's workers now and makes every other node do the same (an elastic
    // job's node leaves instead): the user, or whoever started ddprun, is gone.
    // `cause` is this node's error line, `why` what the other nodes report.
    void kill_everywhere(std::string_view cause, const std::string& why);
    void on_child_exit(pid_t pid, int status);
    void on_round_stop(StopEvent event);
    void begin_stop(int signal, bool workers_have_it = false);
    void kill_now();
    void finish_round_if_done();
    void publish_failure(FailureRecord record);
    void publish_signal(int signal, std::string message);

    // --lifeline (agent_lifeline.cpp): the --hosts launcher's link, on stdin, read from
    // the start to the end: "signal N" lines act as signal N, its end kills everything.
    std::optional<LifelineLink> lifeline;
    void watch_lifeline();
    void on_lifeline_message(const LifelineMessage& message);

    // Hangs (agent_hang.cpp). With --hang-timeout a timer looks at the workers'
    // beats; a hung rank is published as the round's failure, and a hang's stop,
    // from this node or another, captures every worker's stacks before stopping.
    HangMonitor hang_monitor;
    std::unique_ptr<asio::steady_timer> hang_timer;
    struct HangStop {
        std::vector<WorkerGroup::Running> workers;  // running at the stop
        std::vector<NativeStack> native;
        std::string tool;            // what captured them: "eu-stack", "gdb" or "" (none found)
        std::vector<pid_t> dumping;  // Python workers sent SIGABRT for their tracebacks
        std::vector<RankProgress> progress;  // every node's ranks, as shared
        std::thread capture;
        std::unique_ptr<asio::steady_timer> dump_bound;
        std::vector<std::string> rank_lines;  // the summary's: each rank's top frames
        // The round ends once every node's progress is in (or given up on): the
        // summary needs it.
        bool shared = false;
        std::unique_ptr<asio::steady_timer> share_bound;
        bool captured = false;  // the native stacks are in
    };
    void progress_shared(std::vector<RankProgress> all);
    std::unique_ptr<HangStop> hang_stop;
    HangLimits limits() const;
    void watch_hangs();
    void look_for_hang();
    void begin_hang_stop();
    void stacks_captured(std::vector<NativeStack> stacks);
    void dump_tracebacks();
    void dump_exited(pid_t pid);
    void end_hang_stop();
    // After a hung round: every worker's stacks to --log_dir, and the summary's lines.
    void keep_hang_stacks();

    // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (agent_uninterruptible.cpp): while a round
    // runs, a timer looks at the workers' states; one in D for the timeout gives the round up
    // on every node (exit kUnhealthy), no restart.
    UninterruptibleGuard d_state{io};
    void watch_uninterruptible();  // at the round's start
};

}  // namespace ddprun
