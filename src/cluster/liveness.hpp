// The liveness of a job's nodes, as the Coordinator's heartbeat thread keeps it
// (coordinator_heartbeat.cpp): one strategy per way the nodes watch each other.
//
//   c10d, the store's host:  beats and reads every other node's heartbeat counter
//                            (an elastic job's leader watches the members itself,
//                            elastic_leader.cpp: its host reads none)
//   c10d, any other node:    beats and reads the store's host's counter, whose loss
//                            ends this agent (the store is gone with it)
//   etcd:                    keeps its lease alive and watches the others' lease keys
//                            (etcd_liveness.hpp); node 0 publishes a lost node
//
// Each beats for this agent, observes the others, and says what is lost: a node
// (the round's failure, which the thread publishes) or the store's host (the agent
// stops). The thread decides when, and reports each round's first loss only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ddprun/elastic/elastic.hpp"
#include "ddprun/records/records.hpp"
#include "ddprun/rendezvous/etcd_liveness.hpp"
#include "ddprun/rendezvous/heartbeat.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

class Liveness {
  public:
    using Clock = HeartbeatMonitor::Clock;

    // What was seen to stop answering: a node, published as the round's failure; or,
    // with no node, the store's host, whose loss `message` tells this agent.
    struct Loss {
        std::optional<FailureRecord> node;
        std::string message;
    };
    // What the heartbeat thread does after a StoreError of beat(), observe() or watch().
    enum class AfterError {
        GiveUp,      // the store is lost: the agent is told (lost_store) and the thread ends
        RetryLater,  // a transient error: beat again after an interval
        RetryNow,    // a transient error while watching: beat (renew) at once
        Return,      // the agent is closing and cancelled the call: the thread ends
    };

    virtual ~Liveness() = default;

    // `round` begins: -1 is an elastic agent's time before its first round.
    virtual void start_round(int round, int nnodes, Clock::time_point now) = 0;
    // This agent's beat. Throws StoreError.
    virtual void beat(Clock::time_point now) = 0;
    // The others, after the beat. Throws StoreError.
    virtual std::optional<Loss> observe(Clock::time_point now) = 0;
    // Whether this strategy watches the store between beats (a lease's watch); one that
    // does not is left to wait. watch() does until `next` or `interrupted()`, handing
    // what it sees lost to `report`. Throws StoreError.
    virtual bool watches() const { return false; }
    virtual void watch(Clock::time_point next, const std::function<bool()>& interrupted,
                       const std::function<void(Loss)>& report) {
        (void)next;
        (void)interrupted;
        (void)report;
    }
    // `closing`: the agent is closing; `recent`: the last beat was within the timeout.
    virtual AfterError after(const StoreError& error, bool closing, bool recent,
                             bool watching) const = 0;
    // What this agent is told when the store is given up after `error`.
    virtual std::string lost_store(const StoreError& error) const;
};

// What every strategy works with: the heartbeat thread's own connection and this node.
struct LivenessSetup {
    Store& store;
    Rendezvous& rendezvous;             // over `store`
    ElasticMember* member;              // an elastic job's (its heartbeat keys); else null
    int node_rank;                      // the node's rank (an elastic agent's changes by round)
    std::chrono::milliseconds timeout;  // heartbeat_timeout
    // What the etcd strategy takes from the Coordinator:
    EtcdLiveness* leases = nullptr;         // the lease (null: c10d)
    const EnteredRound* entered = nullptr;  // the round whose lease key the join put
    // An elastic job's election and its leader's watch, until the deadline.
    std::function<void(EtcdLiveness&, Liveness::Clock::time_point)> watch_leadership{};
    // Called as a watch makes progress (the thread's stall detector).
    std::function<void()> progressed{};
};

// `host`: this agent watches the others (the store's host; on etcd, node 0).
std::unique_ptr<Liveness> make_liveness(LivenessSetup setup, bool host);

// The round's failure when `node` stopped answering: `why` is how that was seen.
FailureRecord node_lost(int node, const std::string& why);

}  // namespace ddprun
