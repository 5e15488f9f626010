// Coordinator: one agent's link to the other nodes of a multi-node job. It
// owns the store connection (and, on the store's host, the store itself) and
// the threads that block on it, so the agent's event loop never does: joins
// and publications run on one operations thread, the wait for the round's
// stop on a watcher thread, heartbeats on their own thread. Results come back
// as handlers posted to the agent's io_context.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/elastic/elastic.hpp"
#include "ddprun/records/node_status.hpp"
#include "ddprun/rendezvous/etcd_liveness.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/rendezvous/status_publisher.hpp"
#include "ddprun/rendezvous/straggler.hpp"
#include "ddprun/store/etcd_store.hpp"
#include "ddprun/store/store.hpp"
#include "ddprun/store/store_counts.hpp"

namespace boost::asio {
class io_context;
class thread_pool;
}  // namespace boost::asio

namespace ddprun {

class Coordinator {
  public:
    struct Options {
        StoreOptions store;  // the rendezvous endpoint; is_server on the store's host
        // --rdzv_backend=etcd: the cluster instead (store.host/port: its first member,
        // for messages); no agent hosts the store, node 0 watches the others.
        std::optional<EtcdStoreOptions> etcd;
        std::string run_id;
        // The job secret (signed_store.hpp): every record is signed and checked with it.
        // Empty: none, and a signed record is refused.
        std::string secret;
        NodeInfo me;  // node_rank -1: assigned at join
        std::chrono::milliseconds join_timeout{600000};
        std::chrono::milliseconds heartbeat_timeout{15000};
        std::chrono::milliseconds barrier_timeout{300000};
        // --nnodes=MIN:MAX: rounds are formed by the store's host (elastic.hpp).
        bool elastic = false;
        MembershipLimits limits;
        // With progress beats (--hang-timeout): node 0 names stragglers (straggler.hpp).
        std::optional<StragglerLimits> stragglers;
    };

    using JoinDone = std::function<void(std::expected<RoundMembership, Error>)>;
    using StopHandler = std::function<void(StopEvent)>;
    using LostHandler = std::function<void(std::string)>;
    using SignalHandler = std::function<void(int)>;

    // Opens (or hosts) the store. Blocking; call before the event loop runs.
    static std::expected<std::unique_ptr<Coordinator>, Error> open(boost::asio::io_context& io,
                                                                   Options options);
    ~Coordinator();
    Coordinator(const Coordinator&) = delete;
    Coordinator& operator=(const Coordinator&) = delete;

    const Options& options() const { return m_options; }
    // The nodes of the round joined last (an elastic job's vary).
    int nnodes() const { return m_round_nnodes; }

    // Elastic jobs: this agent arrives (the store's host starts the leader).
    // Heartbeats may start right after. Blocking.
    std::optional<Error> arrive();
    // Elastic jobs: this node leaves the job (a stop signal); the others
    // re-form without it. Blocking (bounded by the store timeout).
    void leave(const std::string& why);
    // Elastic jobs, on the store's host, as the job ends: agents still waiting
    // to join are told (`exit_code` 0: the job finished). Blocking, bounded.
    void close_job(int exit_code, const std::string& message);
    // Elastic jobs: where the job is full, `on_spare` (on the loop) gets the
    // line saying that this agent waits as a spare.
    void on_spare(std::function<void(std::string)> on_spare) { m_on_spare = std::move(on_spare); }

    // Joins `round` off the loop; `done` runs on the loop. `master_port`
    // matters on node 0 only (the others learn it from node 0). `node_rank`:
    // the rank to claim, -1 to be assigned one (a restart keeps the rank the
    // node was assigned in round 0).
    void join(int round, int node_rank, int master_port, JoinDone done);

    // Watches the round's stop (first failure anywhere, abort, or every node
    // done); `on_stop` runs on the loop, once.
    void watch(int round, StopHandler on_stop);

    // Fire and forget; the outcome arrives through watch().
    void publish_failure(int round, FailureRecord record);
    // Publishes this node's ranks' progress at a hang and hands `done` (on the loop)
    // every node's that arrived within `bound`, `mine` included.
    void share_progress(int round, int node_rank, std::vector<RankProgress> mine,
                        std::chrono::milliseconds bound,
                        std::function<void(std::vector<RankProgress>)> done);
    void publish_finished(int round, int node_rank);
    // --max-no-progress-restarts: this node's ranks made progress in the failed round
    // (fire and forget, at the stop); then, blocking between rounds, whether any node's
    // did: the others' that arrive within `bound` (a node that said nothing counts
    // as one that did, so that a slow node never stops the job).
    void publish_made_progress(int round, int node_rank, bool made);
    bool made_progress_anywhere(int round, int node_rank, bool mine,
                                std::chrono::milliseconds bound);

    // Blocking (bounded by the store timeout): gives the round up on every
    // node, e.g. when this agent got a signal during the join.
    void abort(int round, const std::string& message, int exit_code);

    // Blocking, between rounds: tells the others this node saw the stop; the
    // store's host waits, at most `bound`, until every node did, so it never
    // pulls the store from under a slower node. Nodes in `lost` (declared dead
    // by heartbeat) are acknowledged on their behalf: nobody waits for them.
    // `joined`: the round started; after a failed join, nodes that never came
    // are not expected to confirm, and are not reported.
    void end_round(int round, int node_rank, std::chrono::milliseconds bound,
                   const std::vector<int>& lost = {}, bool store_alive = true, bool joined = true);
    // For a failed round's one summary on a shared console: this node's failed
    // workers, published by end_round before it acknowledges; and, on the
    // store's host after end_round, every other node's.
    void set_outcomes(std::vector<FailureRecord> workers) { m_outcomes = std::move(workers); }
    const std::vector<FailureRecord>& others_outcomes() const { return m_others_outcomes; }

    // Agents of different jobs (--rdzv_id) on one store never meet under their
    // own keys; one key outside every job's namespace tells them apart. On a
    // mismatch, the other job's agents are told too. Blocking.
    std::optional<Error> check_run_id();

    // Heartbeats from now on, for the round given to join(). A node whose
    // heartbeat stops is published as a failure by the store's host; a store
    // that stops answering is reported through `on_lost` (on the loop).
    void start_heartbeats(int node_rank, LostHandler on_lost);

    // --broadcast-signals: publishes `signal` for every node of the round (fire
    // and forget); the heartbeat thread of each other agent picks it up within
    // a heartbeat interval and calls `on_signal` (on the loop). Set before
    // start_heartbeats.
    void broadcast_signal(int round, int node_rank, int signal);
    void on_broadcast_signal(SignalHandler on_signal) { m_on_signal = std::move(on_signal); }

    // A second stop signal to one agent kills the workers of every node at once:
    // publish_kill() asks, the heartbeat thread of each agent notices within a
    // heartbeat interval and calls `on_kill` (on the loop).
    void publish_kill(int round);

    // True when the heartbeat thread has been stuck in one store call for longer
    // than the heartbeat timeout: c10d 1.13 bounds only get and wait, so a store
    // host that stopped answering (SIGSTOP, a dead link) blocks set() forever.
    // The agent then gives up on the store; the destructor abandons the stuck
    // threads instead of joining them (the process exits right after).
    bool store_stalled() const;
    // The agent gave up waiting for a store call (e.g. a join to a listener that
    // never answers): treat the store as stalled from now on.
    void abandon();
    // The agent was killed (its supervisor or its --hosts link is gone): what it still
    // publishes is best effort, and its end waits at most k_killed_bound for the threads
    // that call the store (a store whose host died too costs reconnects on each call).
    void leave_at_once() { m_at_once = true; }
    // Ends `coordinator`: destroyed once its threads return, or, if one stays blocked in
    // a store call past k_settle_bound, abandoned with its threads to the process's exit.
    // Never freed under them: a call that returns late finds the object it uses still
    // there, sees that it was abandoned, and its thread returns without reaching the
    // agent. (Freed, it would be read by a heartbeat whose call timed out just after the
    // bound: a crash on a partitioned elastic node.)
    static void retire(std::unique_ptr<Coordinator> coordinator);
    // The join in progress (elastic) no longer matters: it returns at its next wait.
    void cancel_join() { m_join_cancelled = true; }
    void on_kill(std::function<void()> on_kill) { m_on_kill = std::move(on_kill); }

    // Status (node_status.hpp, docs/status.md): the agent's latest record, which the
    // heartbeat thread writes once per status_period() (at once when the record's state
    // or exit code changed). Node 0's thread first reads the others' and names stragglers;
    // the others then read node 0's. Each naming reaches `on_straggler` (on the loop)
    // once on every node. Set before start_heartbeats.
    void set_status(NodeStatus status);
    void on_straggler(std::function<void(Straggler)> handler) {
        m_on_straggler = std::move(handler);
    }
    // The calls this agent made on the store so far, and those that failed.
    const StoreCounts& store_counts() const { return *m_counts; }
    // One record per node per period: a fifth of the heartbeat timeout's writes at most.
    static std::chrono::milliseconds status_period(std::chrono::milliseconds heartbeat_timeout);

  private:
    // The heartbeat thread's side of the status: when it writes next, and the protocol.
    struct StatusPublication {
        std::chrono::steady_clock::time_point next{};
        StatusPublisher publisher;
    };
    void publish_status(Store& store, StatusPublication& publication);
    // The heartbeat thread's connection, liveness strategy and conversations
    // (coordinator_heartbeat.cpp).
    struct Beat;
    // How long a thread whose store is gone (not frozen) may take to fail its call: the
    // plugin's reconnect window (1 s, which c10d counts in whole seconds) and a reply.
    // An abandoned thread of that kind would post to the agent's loop after it was gone:
    // a crash of a thawed agent.
    static constexpr std::chrono::milliseconds k_settle_bound{3000};
    static constexpr std::chrono::milliseconds k_killed_bound{1000};  // leave_at_once()
    // True when the threads that call the store (watcher, heartbeat, operations,
    // elastic leader) return within `bound`: the store's host is gone, its calls fail
    // at once (nothing to abandon), rather than frozen, where they block.
    bool threads_return(std::chrono::milliseconds bound);
    // Asks the threads to return and waits for them (threads_return); false: abandoned.
    bool settle();
    // Runs `handler` on the agent's loop, unless the agent abandoned this Coordinator: what
    // the handler reaches may be gone then. Every thread reaches the agent through this.
    void reach_agent(std::function<void()> handler);
    Coordinator(boost::asio::io_context& io, Options options, std::unique_ptr<Store> store,
                std::shared_ptr<StoreCounts> counts);
    void heartbeat_loop(int node_rank, LostHandler on_lost);
    void watch_stop(int round, const StopHandler& on_stop);  // the watcher thread's body
    void stop_watcher();
    // Elastic: the agent `leader` leads; this one starts leading (after `lost_leader`,
    // on etcd, with the agents alive then).
    void follow_leader(int leader);
    int leader_of(const EtcdLiveness::Held& held) const;  // throws StoreError if malformed
    void lead(int lost_leader, std::vector<int> alive);
    // Elastic on etcd, the heartbeat thread until `deadline`: the leader's agent reports
    // the agents whose lease expired; the others elect a successor to a lost leader.
    void watch_leadership(EtcdLiveness& liveness, Store& store,
                          std::chrono::steady_clock::time_point deadline);
    void publish_watch_store(Store* store);               // the watcher's, for cancel_watch()
    void cancel_watch();                                  // the round ended: the watcher returns
    void give_up(int round, const std::string& message);  // abort on the operations thread

    boost::asio::io_context& m_io;
    Options m_options;
    std::shared_ptr<StoreCounts> m_counts;         // every clone's calls (store_counts.hpp)
    std::vector<FailureRecord> m_outcomes;         // main thread only (end_round)
    std::vector<FailureRecord> m_others_outcomes;  // main thread only (end_round)
    std::unique_ptr<Store> m_store;                // main thread only (abort, end_round)
    std::unique_ptr<Rendezvous> m_rendezvous;
    std::unique_ptr<Store> m_ops_store;  // the operations thread's connection
    std::unique_ptr<Rendezvous> m_ops_rendezvous;
    std::unique_ptr<boost::asio::thread_pool> m_ops;
    std::thread m_watcher;
    std::future<void> m_watcher_done;  // ready once the watcher thread returns
    std::thread m_heartbeat;
    std::future<void> m_heartbeat_done;  // ready once the heartbeat thread returns
    std::atomic<int> m_round{0};
    std::atomic<bool> m_closing{false};
    std::atomic<bool> m_watch_cancelled{false};  // the round ended: the watcher returns
    SignalHandler m_on_signal;
    LostHandler m_on_lost;  // start_heartbeats()'s, on the main thread: a leader that stops
    std::function<void(std::string)> m_on_spare;
    std::atomic<int> m_round_nnodes{1};
    std::atomic<bool> m_join_cancelled{false};
    int m_agent = -1;                             // elastic: this agent's id, from arrive()
    std::atomic<bool> m_left{false};              // elastic: it left the job
    std::unique_ptr<ElasticMember> m_member;      // main thread (leave, close_job)
    std::unique_ptr<ElasticMember> m_ops_member;  // the operations thread (join)
    std::unique_ptr<ElasticLeader> m_leader;      // the store's host of an elastic job
    Store* m_watch_store = nullptr;               // the watcher thread's, under m_mutex
    EtcdLiveness* m_liveness = nullptr;           // the heartbeat thread's, under m_mutex (etcd)
    std::unique_ptr<EtcdLiveness> m_entry;        // the operations thread's: puts the round's key
    EnteredRound m_entered;                       // m_entry's, which the heartbeat thread follows
    std::atomic<bool> m_at_once{false};           // leave_at_once()
    // Elastic on etcd: who leads, and the revision at which that was learnt.
    std::atomic<int> m_followed_leader{-1};
    std::atomic<std::int64_t> m_leader_revision{0};
    std::atomic<std::int64_t> m_beat_done_ms{0};  // steady clock; 0: heartbeats not started
    std::atomic<bool> m_abandoned{false};
    bool m_settled = false;    // its threads returned (settle()), main thread only
    std::mutex m_reach_mutex;  // held by reach_agent() and abandon(): no post after it
    std::function<void()> m_on_kill;
    std::function<void(Straggler)> m_on_straggler;
    std::optional<NodeStatus> m_status;        // set_status()'s, under m_mutex
    std::atomic<bool> m_status_urgent{false};  // its state changed: write it now
    std::mutex m_mutex;
    std::condition_variable m_wake;
};

}  // namespace ddprun
