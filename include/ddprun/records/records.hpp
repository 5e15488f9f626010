// The records ddprun's agents exchange through the rendezvous store: who a node
// is (NodeInfo), what must agree between nodes (Fingerprint), what a round
// decided (RoundMembership) or why it did not start (Error), and how
// it stopped (FailureRecord, StopEvent). Kept apart from the protocol that
// moves them (rendezvous.hpp) because their wire format is a contract of its
// own: the text under a key may have been written by another ddprun version,
// a stray client or by hand, so every parse_* reads it as untrusted and
// answers with a one-line error rather than a crash.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/error.hpp"

namespace ddprun {

// What must be the same on every node, or no node starts workers.
struct Fingerprint {
    int nnodes = 1;       // MAX of an elastic job
    std::string program;  // program and its arguments, as one string
    int max_restarts = 0;
    std::string run_id;
    std::string version;            // ddprun's
    int min_nnodes = 0;             // MIN of an elastic job; 0 (or nnodes): a fixed size
    std::int64_t last_call_ms = 0;  // --rdzv_conf last_call_timeout of an elastic job
    bool agent_store = false;       // node 0's agent hosts the workers' store (worker_store.hpp)
    bool operator==(const Fingerprint&) const = default;
    int min() const { return min_nnodes > 0 ? min_nnodes : nnodes; }
    bool elastic() const { return min() < nnodes; }
};

// One agent as the others see it.
struct NodeInfo {
    int node_rank = -1;    // in a join request: -1 = assign one
    std::string host;      // this node's name, for messages
    std::string addr;      // where the others reach it; node 0's is MASTER_ADDR
    int nproc = 1;         // workers on this node (may differ between nodes)
    int master_port = 0;   // node 0 only: MASTER_PORT for the round's workers
    std::int64_t pid = 0;  // the agent's, for messages
    std::string agent_id;  // set by join(): tells two agents with the same host apart
    Fingerprint fingerprint;
};

// One rank's progress as every node reports it at a hang (hang_monitor.hpp),
// shared with the other nodes through the store.
struct RankProgress {
    int rank = -1;
    int node_rank = -1;
    std::int64_t silent_ms = -1;  // since its last beat; -1: it never beat
    std::int64_t running_ms = 0;  // since its worker started
    std::string label;            // the last line it wrote ("" if none)
    bool hung = false;
    bool operator==(const RankProgress&) const = default;
};

// The failure restarts before `round` of a fixed-size job, where every round after
// the first is a restart (an elastic job's leader counts its own: a re-formed round
// is none).
constexpr int fixed_size_restarts(int round) {
    return round;
}

// What a successful join decided.
struct RoundMembership {
    int round = 0;
    int restart_count = 0;            // failure restarts before this round
    std::string change;               // elastic: how the membership changed, for the log
    int node_rank = 0;                // this agent's
    std::vector<int> nproc_per_node;  // by node rank; ranks are their prefix sums
    std::string master_addr;          // node 0's addr
    int master_port = 0;              // node 0's master_port
};

enum class FailureKind {
    Worker,     // a worker exited non-zero or died of a signal
    NodeLost,   // a node's heartbeat stopped
    Signal,     // an agent was told to stop (SIGTERM, SIGINT, ...)
    Mismatch,   // the nodes disagree on something that must agree
    StoreLost,  // the store stopped answering
    Hang,       // a rank stopped beating for --hang-timeout (hang_monitor.hpp)
};
std::string_view to_string(FailureKind kind);

// The root cause of a failed round, carried to every node for its summary.
struct FailureRecord {
    FailureKind kind = FailureKind::Worker;
    int node_rank = 0;
    std::string host;
    int rank = -1;  // the worker's; -1 when the failure is not a worker's
    int local_rank = -1;
    std::int64_t pid = 0;
    int exit_code = 1;         // what every node exits with
    int signal = 0;            // non-zero: the worker died of this signal
    std::int64_t time_ms = 0;  // when it happened, ms since the epoch
    std::string message;
    std::vector<std::string> stderr_tail;  // kept to the last 20 lines of 500 bytes
    bool stopped_by_ddprun = false;        // a worker ddprun stopped (another failed)
    std::string oom;  // the kernel's OOM killer ended it (WorkerOutcome::oom); may be empty
    std::vector<std::string> report_lines;  // WorkerOutcome's
    std::int64_t report_lines_total = 0;
};

// How Rendezvous::wait_stop() ended: what the round's "stop" record says
// (Done, Failure, Abort), or that there was none to read (Timeout, StoreLost).
struct StopEvent {
    enum class Kind {
        Done,       // every node finished: exit 0
        Failure,    // `failure` is the round's root cause
        Abort,      // the round was given up: `message`
        Reform,     // elastic: the membership changes (`message` says how); no restart used
        Timeout,    // nothing happened within the timeout; ask again
        StoreLost,  // the store is gone: `message`
    };
    Kind kind = Kind::Timeout;
    FailureRecord failure;
    std::string message;
    int exit_code = 0;  // what this node exits with: 0, the failure's code or kRendezvous
};

// The stop of a round whose store stopped answering (`message` says how):
// kind StoreLost, exit code kRendezvous, wherever the loss is noticed.
StopEvent store_lost(std::string message);

// The records' wire format. parse_* never throw: the error says what is wrong
// with the text (the caller adds where it came from).
std::string to_json(const NodeInfo& info);
std::expected<NodeInfo, std::string> parse_node_info(std::string_view text);
std::string to_json(const FailureRecord& record);
std::expected<FailureRecord, std::string> parse_failure_record(std::string_view text);

// The record under a round's "result" key (read from `key`) of run `run_id`,
// as the agent `me` reads it (its node rank, nnodes and agent id): the round's
// membership, or why the round did not start (an abort, a record that is not
// one or is another run's, a membership that does not fit `me`) as an error
// naming the key.
std::expected<RoundMembership, Error> parse_round_result(std::string_view text,
                                                         const std::string& key,
                                                         const std::string& run_id, int round,
                                                         const NodeInfo& me);

}  // namespace ddprun
