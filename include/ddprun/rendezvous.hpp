// Rendezvous: the protocol ddprun's agents (one per node) run over a Store to
// agree on a round of the job: who takes part and with which node rank (join),
// how the round ends (the first failure anywhere, an abort, or every node done:
// one "stop" record everyone reads), and that the store's host stays up until
// every node has seen the end (acknowledge). Heartbeats let agents notice a
// node that is gone or frozen.
//
// It owns no threads and no timers: every call blocks on the Store it was
// given, for at most the timeout passed in (or the store's own timeout for a
// single operation). A Store connection serves one thread at a time, so an
// agent gives each of its threads its own Rendezvous over its own
// Store::clone().
//
// Keys live under "ddprun/<run_id>/r<round>/": assign, claim/<rank>,
// info/<rank>, zero, joined, joined/<count>, result, stop, finished, ack/<rank>, acks,
// acked, hb/<rank>. Records are JSON; whatever is found under these keys is
// parsed defensively: a malformed record is reported as one line naming the
// key, never as a crash.
//
// Store operations per agent do not grow with the number of nodes, apart
// from node 0, which reads every node's record once per round to check that
// the nodes agree, and from the error paths that name the missing nodes.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/exit_codes.hpp"
#include "ddprun/store.hpp"

namespace ddprun {

// What must be the same on every node, or no node starts workers.
struct Fingerprint {
    int nnodes = 1;
    std::string program;  // program and its arguments, as one string
    int max_restarts = 0;
    std::string run_id;
    std::string version;  // ddprun's
    bool operator==(const Fingerprint&) const = default;
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

// What a successful join decided.
struct RoundMembership {
    int round = 0;
    int node_rank = 0;                // this agent's
    std::vector<int> nproc_per_node;  // by node rank; ranks are their prefix sums
    std::vector<std::string> hosts;   // by node rank
    std::string master_addr;          // node 0's addr
    int master_port = 0;              // node 0's master_port
};

// Why a join failed: one line for the user, and what ddprun exits with.
struct RendezvousError {
    std::string message;
    int exit_code = exit_code::kRendezvous;
};

enum class FailureKind {
    Worker,     // a worker exited non-zero or died of a signal
    NodeLost,   // a node's heartbeat stopped
    Signal,     // an agent was told to stop (SIGTERM, SIGINT, ...)
    Mismatch,   // the nodes disagree on something that must agree
    StoreLost,  // the store stopped answering
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
};

// How wait_stop() ended.
struct StopEvent {
    enum class Kind {
        Done,       // every node finished: exit 0
        Failure,    // `failure` is the round's root cause
        Abort,      // the round was given up: `message`
        Timeout,    // nothing happened within the timeout; ask again
        StoreLost,  // the store is gone: `message`
    };
    Kind kind = Kind::Timeout;
    FailureRecord failure;
    std::string message;
    int exit_code = 0;  // what this node exits with: 0, the failure's code or kRendezvous
};

// The records' wire format. parse_* never throw: the error says what is wrong
// with the text (the caller adds where it came from).
std::string to_json(const NodeInfo& info);
std::expected<NodeInfo, std::string> parse_node_info(std::string_view text);
std::string to_json(const FailureRecord& record);
std::expected<FailureRecord, std::string> parse_failure_record(std::string_view text);
// The record under a round's "result" key (read from `key`), as the agent `me`
// reads it (its node rank, nnodes and agent id): the round's membership, or why
// the round did not start (an abort, a record that is not one, a membership that
// does not fit `me`) as an error naming the key.
std::expected<RoundMembership, RendezvousError> parse_round_result(std::string_view text,
                                                                   const std::string& key,
                                                                   int round, const NodeInfo& me);

class Rendezvous {
  public:
    // `store` must outlive this object. `run_id` (--rdzv_id) namespaces the keys.
    Rendezvous(Store& store, std::string run_id);

    // Joins `round` and blocks until every node has joined (me.fingerprint.nnodes
    // of them), or until `timeout`. me.node_rank < 0: the store's host becomes
    // node 0, the others 1..n-1 in join order. Fails, on every agent of the
    // round, when two agents claim the same node rank (naming both hosts), when
    // the fingerprints differ (naming the field, its values and the nodes), on
    // timeout (naming the node ranks that never joined), or after abort().
    std::expected<RoundMembership, RendezvousError> join(int round, NodeInfo me, bool is_store_host,
                                                         std::chrono::milliseconds timeout);

    // Gives the round up (e.g. the agent got SIGTERM): agents still in join()
    // fail with `message`, and wait_stop() returns Abort, unless the round
    // already stopped. Throws StoreError.
    void abort(int round, int nnodes, const std::string& message,
               int exit_code = exit_code::kRendezvous);

    // Publishes a failure as the reason the round stops. The first stop wins:
    // returns the round's stop, which is this failure unless another failure,
    // an abort or the end of the round came first. Throws StoreError.
    StopEvent publish_failure(int round, const FailureRecord& record);

    // This node's workers all succeeded (the exit barrier). The call that
    // completes the count of `nnodes` stops the round as Done and returns
    // true. Throws StoreError.
    bool publish_finished(int round, int nnodes);

    // Blocks until the round stops or `timeout` passes. Never throws: a lost
    // store is a StopEvent too. Meant for its own thread and Store::clone().
    StopEvent wait_stop(int round, std::chrono::milliseconds timeout) noexcept;

    // This node has seen the round's stop. Throws StoreError.
    void acknowledge(int round, int node_rank, int nnodes);
    // For the store's host before it exits: blocks until all `nnodes` nodes
    // acknowledged or `timeout` passes; returns the node ranks that did not.
    // Throws StoreError.
    std::vector<int> wait_acknowledged(int round, int nnodes, std::chrono::milliseconds timeout);

    // Heartbeats: each agent beats with an increasing `seq`; a reading is
    // nullopt before the first beat (or if the key holds garbage). Throw StoreError.
    void beat(int round, int node_rank, std::int64_t seq);
    std::optional<std::int64_t> read_heartbeat(int round, int node_rank);
    std::vector<std::optional<std::int64_t>> read_heartbeats(int round, int nnodes);

    // The key of `name` in `round` (see the top of this file).
    std::string key(int round, std::string_view name) const;

  private:
    std::optional<RendezvousError> collect(int round, const NodeInfo& me,
                                           std::chrono::steady_clock::time_point deadline);
    void check_node_zero(int round, const NodeInfo& me,
                         std::chrono::steady_clock::time_point deadline);
    std::string abort_join(int round, const std::string& message, int exit_code, int nnodes);
    std::expected<RoundMembership, RendezvousError> read_result(int round, const NodeInfo& me);
    std::expected<RoundMembership, RendezvousError> join_timed_out(
        int round, const NodeInfo& me, std::chrono::milliseconds timeout);
    StopEvent read_stop(int round, const std::string& text) const;

    Store& m_store;
    std::string m_run_id;
    std::string m_agent_id;
};

// Decides which nodes' heartbeats have stopped. Pure: fed readings and the
// time, so it is tested without sleeping.
class HeartbeatMonitor {
  public:
    using Clock = std::chrono::steady_clock;

    // Watches `nodes`; each has until `start + timeout` to be seen beating.
    HeartbeatMonitor(const std::vector<int>& nodes, std::chrono::milliseconds timeout,
                     Clock::time_point start);

    // One reading of `node`'s heartbeat (nullopt: none yet). A node is alive
    // at `now` when its reading differs from the previous one.
    void observe(int node, std::optional<std::int64_t> seq, Clock::time_point now);

    // The nodes whose heartbeat has not changed for `timeout`, ascending.
    std::vector<int> stale(Clock::time_point now) const;

  private:
    struct Seen {
        std::optional<std::int64_t> seq;
        Clock::time_point changed;
    };
    std::chrono::milliseconds m_timeout;
    std::map<int, Seen> m_nodes;
};

}  // namespace ddprun
