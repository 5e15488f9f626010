// What an agent shows on --metrics-port (docs/metrics.md): a snapshot of its state,
// taken on the agent's loop when a scrape comes, and the Prometheus text made from it.
// Pure: no I/O, every line unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// The agent's state as /metrics names it, in the order a job goes through them.
enum class JobState { Connecting, Checking, Joining, Running, Stopping, Between };
inline constexpr std::string_view k_job_states[] = {"connecting", "checking", "joining",
                                                    "running",    "stopping", "between_rounds"};
std::string_view state_name(JobState state);

// One rank of this node that beats on DDPRUN_PROGRESS_FD (--hang-timeout).
struct RankBeats {
    int rank = 0;
    std::int64_t beats = 0;                  // this round's
    double seconds_since_beat = 0;           // since its last beat
    std::optional<double> beats_per_second;  // as HangMonitor::rates() says
};

struct AgentSnapshot {
    std::string run_id;
    std::string host;
    int node_rank = -1;  // -1 until the first join assigns it
    JobState state = JobState::Connecting;
    bool healthy = true;  // /healthz: false once stopping because of a failure
    std::string unhealthy_why;
    int round = 0;
    int restarts = 0;
    int workers = 0;  // this node's, in the round
    int workers_alive = 0;
    std::map<std::string, std::int64_t> worker_exits;  // by cause: see k_exit_causes
    std::vector<RankBeats> ranks;
    std::optional<double> rendezvous_seconds;    // the last join's
    std::optional<double> exit_barrier_seconds;  // the last exit barrier's
    // A multi-node agent's calls on the rendezvous store, and those that failed.
    std::optional<std::int64_t> store_requests;
    std::optional<std::int64_t> store_errors;
};

// How a worker ended, as ddprun_worker_exits_total's `cause` says it.
inline constexpr std::string_view k_exit_causes[] = {"success", "failure", "signal", "oom",
                                                     "stopped"};

// The snapshot in Prometheus' text exposition format (version 0.0.4), every family
// with its HELP and TYPE, label values escaped.
std::string prometheus_text(const AgentSnapshot& snapshot);

}  // namespace ddprun
