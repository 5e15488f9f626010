// Rendezvous: the protocol ddprun's agents (one per node) run over a Store to
// agree on a round of the job: who takes part and with which node rank (join),
// how the round ends (the first failure anywhere, an abort, or every node done:
// one "stop" record everyone reads), and that the store's host stays up until
// every node has seen the end (acknowledge). Heartbeats let agents notice a
// node that is gone or frozen (HeartbeatMonitor, heartbeat.hpp, decides which).
//
// It owns no threads and no timers: every call blocks on the Store it was
// given, for at most the timeout passed in (or the store's own timeout for a
// single operation). A Store connection serves one thread at a time, so an
// agent gives each of its threads its own Rendezvous over its own
// Store::clone().
//
// Keys live under the round's (JobKeys::round, job_keys.hpp): assign, claim/<rank>,
// info/<rank>, zero, joined, joined/<count>, result, stop, finished, ack/<rank>, acks,
// acked, hb/<rank>. Records are JSON (records.hpp); whatever is found under
// these keys is parsed defensively: a malformed record is reported as one line
// naming the key, never as a crash.
//
// Store operations per agent do not grow with the number of nodes, apart
// from node 0, which reads every node's record once per round to check that
// the nodes agree, and from the error paths that name the missing nodes.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/exit_codes.hpp"
// HeartbeatMonitor judges the readings read_heartbeats() returns; included so
// that this header stays the one a user of the rendezvous needs.
#include "ddprun/records/records.hpp"
#include "ddprun/rendezvous/heartbeat.hpp"
#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

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
    // `hosted`: an agent hosts the store (c10d); without one (etcd) ranks are
    // assigned 0..n-1 in join order.
    std::expected<RoundMembership, Error> join(int round, NodeInfo me, bool is_store_host,
                                               std::chrono::milliseconds timeout,
                                               bool hosted = true);

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
    // true. Authenticated (a job secret): each node first writes its own signed
    // "finished/<node_rank>", and a count of `nnodes` or more stops the round
    // only once all of them are there and signed, so that a forged add never
    // makes a false success. Throws StoreError.
    bool publish_finished(int round, int nnodes, int node_rank = -1);

    // With a job secret (signed_store.hpp): counters that decide something are
    // confirmed by signed records (publish_finished).
    void set_authenticated(bool authenticated) { m_authenticated = authenticated; }

    // Blocks until the round stops or `timeout` passes. Never throws: a lost
    // store is a StopEvent too. Meant for its own thread and Store::clone().
    StopEvent wait_stop(int round, std::chrono::milliseconds timeout) noexcept;

    // A failed round's workers on `node_rank` (failed or stopped), for the one
    // summary node 0 prints where every node's output shares a console.
    // Throws StoreError.
    void publish_outcomes(int round, int node_rank, const std::vector<FailureRecord>& workers);
    // What every node but `except` published; a node that did not, or whose
    // record is malformed (logged), is left out. Throws StoreError.
    std::vector<FailureRecord> read_outcomes(int round, int nnodes, int except);

    // At a hang: this node's ranks' progress, and every other node's that is there
    // within `bound` (a node whose record is missing or malformed, logged, is left
    // out). Throw StoreError.
    void publish_progress(int round, int node_rank, const std::vector<RankProgress>& ranks);
    std::vector<RankProgress> read_progress(int round, int nnodes, int except,
                                            std::chrono::milliseconds bound);

    // After a failed round (--max-no-progress-restarts): whether this node's ranks
    // made progress; and of the other nodes, how many said they did and how many
    // said nothing within `bound` (or something unreadable, logged). Throw StoreError.
    void publish_made_progress(int round, int node_rank, bool made);
    struct ProgressVotes {
        int made = 0;
        int missing = 0;
    };
    ProgressVotes read_made_progress(int round, int nnodes, int except,
                                     std::chrono::milliseconds bound);

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

    // While join() waits, every `interval` (30 s by default) one line says who
    // is missing: "waiting for nodes 1, 3 (2 of 4 joined, 30 s of 600)". Node
    // 0 reads the records and publishes the list; the others read it. No store
    // wait of a join is longer than the interval. `report` gets the line
    // (spdlog's info by default).
    using ProgressReport = std::function<void(const std::string&)>;
    void set_join_progress(std::chrono::milliseconds interval, ProgressReport report);

  private:
    using Clock = std::chrono::steady_clock;
    // The join in progress: its bounds, for the waits and the progress lines.
    struct JoinClock {
        int round = 0;
        const NodeInfo* me = nullptr;
        Clock::time_point start, deadline, next_report;
        bool hosted = true;  // node 0 hosts the store (c10d)
    };
    // Waits for `keys` until the join's deadline (throws JoinTimedOut past it),
    // in slices of at most the progress interval, reporting after each; returns
    // their values (Store::wait_get).
    // `missing_at`: the store's revision at which the keys were missing (Store::Claim).
    std::vector<std::string> wait_joining(const std::vector<std::string>& keys,
                                          std::int64_t missing_at = 0);
    void report_waiting();

    std::optional<Error> collect(int round, const NodeInfo& me);
    // Why `round` cannot be joined when it already stopped; nullopt if it did not.
    std::optional<Error> ended_before(int round);
    // `peeked`: node 0's record as the claim (at revision `missing_at`) read it, if
    // it was there already.
    bool check_node_zero(int round, const NodeInfo& me, const std::optional<std::string>& peeked,
                         std::int64_t missing_at);
    std::string abort_join(int round, const std::string& message, int exit_code, int nnodes);
    std::expected<RoundMembership, Error> read_result(int round, const NodeInfo& me);
    std::expected<RoundMembership, Error> join_timed_out(int round, const NodeInfo& me,
                                                         std::chrono::milliseconds timeout);

    Store& m_store;
    JobKeys m_keys;
    std::string m_agent_id;
    std::optional<std::int64_t> read_beat(const std::string& hb_key);

    bool m_authenticated = false;
    std::chrono::milliseconds m_progress_interval = std::chrono::seconds(30);
    ProgressReport m_report_progress;
    JoinClock m_join;
};

}  // namespace ddprun
