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
// answer/<agent>/<n>, answer/<agent>/<n>/read, hb/<agent>, hb/host}.
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ddprun/membership.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/store.hpp"

namespace ddprun {

// The key of `name` among an elastic job's job-wide keys.
std::string elastic_key(const std::string& run_id, std::string_view name);

// One agent's side of the protocol. Blocking calls on the Store it was given
// (one thread at a time, as every Store).
class ElasticMember {
  public:
    ElasticMember(Store& store, std::string run_id, int agent);

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
};

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
    };
    ElasticLeader(std::unique_ptr<Store> store, Options options);
    ~ElasticLeader();
    ElasticLeader(const ElasticLeader&) = delete;
    ElasticLeader& operator=(const ElasticLeader&) = delete;

    void start();
    // After its agent's close(): waits, at most `bound`, until the leader has
    // told every waiting agent.
    void wait_closed(std::chrono::milliseconds bound);
    // The thread is stuck in a store call: abandon it instead of joining.
    void abandon();

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    std::thread m_thread;
};

}  // namespace ddprun
