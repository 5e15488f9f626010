// Elastic jobs (--nnodes=MIN:MAX) over a Store: the protocol between the
// agents and their leader, the agent that hosts the store (node 0 of every
// round). Agents never wait on each other, only on the leader:
//  - An agent arrives once (a number from the "arrivals" count: its id, in
//    arrival order), then, for every round it wants, appends a join event to
//    the job's one event queue and waits for its numbered answer: a round, or
//    "spare", or that there is nothing to join. A stop signal appends a leave.
//  - The leader waits on the next event of the queue (a store wait, so a
//    newcomer is seen at once), watches every agent's heartbeat, and carries
//    out what MembershipPlanner (membership.hpp) decides: it publishes each
//    round's membership under the same "result" key as a fixed-size job,
//    stops the running round with a "reform" stop, and answers.
// A round then runs, stops and ends exactly as in a fixed-size job
// (rendezvous.hpp): workers fail, finish and are signalled through the
// round's keys. Keys: ddprun/<run_id>/e/{arrivals, events, event/<i>,
// answer/<agent>/<n>, answer/<agent>/<n>/read, hb/<agent>, hb/host, state}.
//
// On etcd no agent hosts the store, so any agent may lead: the first to
// create "e/leader" under its lease (etcd_liveness.hpp). Its queue is its own
// (e/L<agent>/events, e/L<agent>/event/<i>), so that a successor starts on an
// empty one; liveness is the agents' leases ("e/alive/<agent>"), whose
// deletions the leader's agent posts as "lost" events. When the leader is
// lost, the agents elect another; it takes over from the last round's record
// ("state"), stops that round, and every waiting agent asks it again.
// Node 0 is then the first survivor of the previous round, and MASTER_ADDR
// its address.
#pragma once

#include <atomic>
#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/elastic/membership.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

// One agent's side of the protocol. Blocking calls on the Store it was given
// (one thread at a time, as every Store).
class ElasticMember {
  public:
    ElasticMember(Store& store, std::string run_id, int agent);

    // Why an agent cannot arrive: the job under `run_id` already ended (over etcd a
    // run's keys outlive it, and a later job may reuse its run id). nullopt if it did
    // not. Throws StoreError.
    static std::optional<Error> ended(Store& store, const std::string& run_id);
    // Arrives: returns this agent's id (ids count arrivals from 0). Throws StoreError.
    static int arrive(Store& store, const std::string& run_id);

    // Asks to join the next round and waits for it: the membership, or why
    // there is nothing to join (exit code 0: the job is finishing). `me`
    // carries this node's record (agent_id identifies it in the result).
    // `on_spare` gets one line when the job is full and this agent waits as
    // a spare. `cancelled` is asked between waits of at most half a second.
    std::expected<RoundMembership, Error> join(const NodeInfo& me,
                                               const std::function<void(std::string)>& on_spare,
                                               const std::function<bool()>& cancelled);
    // Leaves the job (a stop signal): the leader re-forms without this node.
    // Throws StoreError.
    void leave(const std::string& why);
    // On etcd, the leader's own agent reports `agent`, whose lease expired.
    void report_lost(int agent, const std::string& why);
    // On etcd: the agent that leads now, whose queue events go to (from any
    // thread). A join in progress asks the new leader again.
    void follow_leader(int leader) { m_leader = leader; }
    // The leader's own agent ends the job: waiting agents are told `message`
    // (exit code 0: the job finished). Throws StoreError.
    void close(int exit_code, const std::string& message);

    int agent() const { return m_agent; }
    // Where this agent beats, and where the leader does.
    std::string heartbeat_key(bool leader) const;

  private:
    void post(const std::string& event);

    Store& m_store;
    std::string m_run_id;
    int m_agent;
    int m_next_answer = 0;
    std::atomic<int> m_leader{-1};  // -1: the store's host leads (c10d)
};

// The queue's keys ("events", "event/<i>") of the leader `leader` (-1: the
// store's host, whose queue is the job's).
std::string queue_key(const std::string& run_id, int leader, std::string_view name);

// How an agent lost through its etcd lease (TTL `ttl`) is described.
std::string lease_expired(std::chrono::milliseconds ttl);

// The leader: a thread over its own Store connection, from start() until the
// job closes (ElasticMember::close from its agent) or it is destroyed.
class ElasticLeader {
  public:
    struct Options {
        std::string run_id;
        int agent = 0;  // the leader's own agent id
        NodeInfo me;    // the leader's node record (fingerprint, address)
        MembershipLimits limits;
        std::chrono::milliseconds heartbeat_timeout{15000};
        // On etcd: liveness comes as "lost" events, the queue is this agent's,
        // and no agent is node 0 by right.
        bool leases = false;
        // On etcd, a successor: the leader it takes over from, and the agents
        // whose lease was alive when it won.
        int lost_leader = -1;
        std::vector<int> alive;
        // A record it must act on (a round's result or stop, its predecessor's
        // state, a departure) fails the job secret's check: it stops leading and
        // says why here (its agent ends the job, 75), as it cannot lead from it.
        std::function<void(std::string)> on_untrusted;
    };
    ElasticLeader(std::unique_ptr<Store> store, Options options);
    ~ElasticLeader();
    ElasticLeader(const ElasticLeader&) = delete;
    ElasticLeader& operator=(const ElasticLeader&) = delete;

    void start();
    // After its agent's close(): waits, at most `bound`, until the leader has
    // told every waiting agent.
    void wait_closed(std::chrono::milliseconds bound);
    // Asks the thread to stop; true when it has returned within `bound`.
    bool stop_within(std::chrono::milliseconds bound);
    // The thread is stuck in a store call: abandon it instead of joining.
    void abandon();

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    std::thread m_thread;
};

}  // namespace ddprun
