// NodeStatus: what each agent of a multi-node job publishes about itself while the
// job runs, for `ddprun status` (docs/status.md) and for node 0's straggler watch
// (straggler.hpp). Kept apart from records.hpp because it is read by a process that
// is not part of the job: its wire format is a contract with every ddprun that may
// run `ddprun status` against this one. Read as untrusted text, as every record.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// One rank's progress beats (DDPRUN_PROGRESS_FD, --hang-timeout) as its node saw them.
struct RankStatus {
    int rank = 0;
    std::int64_t beats = 0;       // lines (steps) this round
    std::int64_t silent_ms = -1;  // since its last beat; -1: it never beat
    double rate = -1;             // steps per second over the rate window; -1: not known yet
    bool operator==(const RankStatus&) const = default;
};

// A rank node 0 named a straggler (or, `recovered`, no longer one): its rate against
// the job's median, and when node 0 said so. `seq` numbers the round's namings, so
// that each node prints each once.
struct Straggler {
    int rank = 0;
    int node_rank = 0;
    double rate = 0;
    double median = 0;
    std::int64_t time_ms = 0;  // wall clock, ms since the epoch
    bool recovered = false;
    int seq = 0;
    bool operator==(const Straggler&) const = default;
};

struct NodeStatus {
    int node_rank = 0;
    int round = 0;
    int restarts = 0;   // failure restarts before this round
    std::string state;  // the agent's phase: k_job_states (metrics.hpp) names them
    std::string host;
    std::string addr;
    std::int64_t pid = 0;  // the agent's
    int first_rank = 0;
    int nproc = 0;
    int workers_alive = 0;
    std::int64_t time_ms = 0;  // wall clock when written: the reader's heartbeat age
    std::vector<RankStatus> ranks;
    // Node 0's record speaks for the job: its size, the restarts it may use, how the
    // round ends once that is known, and the stragglers it named.
    int nnodes = 0;
    int world_size = 0;
    int max_restarts = 0;
    int exit_code = -1;                     // -1: the round has not stopped
    std::string stop;                       // why it stops ("rank 3 failed", "every node finished")
    std::vector<Straggler> stragglers;      // named and not recovered
    std::vector<Straggler> straggler_news;  // the round's last k_max_straggler_news namings
    bool operator==(const NodeStatus&) const = default;
};

inline constexpr std::size_t k_max_straggler_news = 64;

// Each node's record lives under JobKeys::status (job_keys.hpp): outside the rounds,
// so that a reader finds the job's latest without knowing its round.
// The record names its run: one of another run is refused (the error says whose).
std::string to_json(const NodeStatus& status, const std::string& run_id);
std::expected<NodeStatus, std::string> parse_node_status(std::string_view text,
                                                         const std::string& run_id);

}  // namespace ddprun
