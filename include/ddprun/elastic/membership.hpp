// MembershipPlanner: the decisions of an elastic job (--nnodes=MIN:MAX) about
// who takes part in each round, made by one agent, the leader (the store's
// host). It is fed what happened (an agent asks to join, leaves, is lost;
// the running round stopped; the job is finishing; the time) and answers with
// actions for the leader to carry out over the store (elastic.hpp). No I/O and
// no clock of its own, so every rule is tested without a store or a sleep.
//
// The rules (docs/elastic.md):
//  - The first round forms as soon as MAX agents wait, or when at least MIN
//    do and last_call has passed since the MIN-th came. A later round forms
//    as soon as every live agent waits (the survivors of the previous round
//    after stopping their workers, spares, newcomers) and at least MIN do.
//    join_timeout bounds the wait of a round that cannot form.
//  - Node ranks: the leader is node 0 when it hosts the store (c10d), then the
//    previous round's nodes in their order, then the others in the order they
//    first came. Past MAX the rest wait as spares. On etcd no agent is special:
//    node 0 is the first of the previous round's survivors.
//  - While a round runs, a newcomer stops it if the round has fewer than MAX
//    nodes (else it is a spare); a member that leaves or is lost stops it.
//    Once any node's workers have all succeeded the job is finishing: a
//    newcomer or spare is told so, and losing a member fails the round.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddprun/records/records.hpp"

namespace ddprun {

struct MembershipLimits {
    int min_nnodes = 1;
    int max_nnodes = 1;
    std::chrono::milliseconds last_call{30000};
    std::chrono::milliseconds join_timeout{600000};
};

// What the leader must do, in order.
struct MembershipAction {
    enum class Kind {
        Form,    // publish round `round` with `members` (by node rank); `spares` wait
        Stop,    // stop the running round `round`: `message`; `failure` when finishing
        Answer,  // tell agent `agent` it waits as a spare (Spare), or why it leaves
        GiveUp,  // no round can form: `members` (every waiting agent) leave with `message`
    };
    enum class Reply { Spare, Finished, Refused };
    Kind kind = Kind::Form;
    int round = 0;
    std::vector<int> members;  // agent ids
    std::vector<int> spares;
    std::string message;  // Form: the membership change ("" for the first round)
    bool failure = false;
    FailureKind failure_kind = FailureKind::NodeLost;
    int agent = -1;
    Reply reply = Reply::Spare;
    int exit_code = 0;
    bool operator==(const MembershipAction&) const = default;
};

class MembershipPlanner {
  public:
    using Clock = std::chrono::steady_clock;

    // `leader`: the agent id of the store's host (node 0 of every round), or -1
    // where no agent hosts it (etcd); `job`: the fingerprint every agent must share.
    MembershipPlanner(MembershipLimits limits, int leader, Fingerprint job,
                      Clock::time_point start);

    // A new leader takes over from a lost one (etcd): `round` was the last formed,
    // with `members` (agent ids by node rank, and their records); `running` unless
    // its stop was seen; the `others` alive then (spares, newcomers) are expected to
    // ask again, and the next round waits for them as for the members. Call before
    // anything else.
    void resume(int round, const std::vector<std::pair<int, NodeInfo>>& members, bool running,
                const std::vector<int>& others, Clock::time_point now);

    // Agent `agent` (ids count arrivals, so they give the join order) asks to
    // join the next round: a newcomer, a spare, or a member whose round stopped.
    void join(int agent, const NodeInfo& info, Clock::time_point now);
    // It left on a stop signal (graceful), or its heartbeat stopped (lost).
    void leave(int agent, const std::string& why, Clock::time_point now);
    void lost(int agent, const std::string& why, Clock::time_point now);
    // The running round stopped for a reason of its own (a worker failure, an
    // abort); a member's join says so too.
    void round_stopped(Clock::time_point now);
    // Some node's workers all succeeded: membership is frozen from now on.
    void finishing();
    // Time passed: the last call, the join timeout.
    void tick(Clock::time_point now);

    // When tick() may next decide something (last call, join timeout).
    std::optional<Clock::time_point> next_deadline() const;
    std::vector<MembershipAction> take_actions();

    // Who waits for an answer now (for closing the job).
    std::vector<int> waiting() const;
    // Every agent still taking part, waiting or running.
    std::vector<int> live() const;
    int round() const { return m_round; }
    bool running() const { return m_running; }
    const NodeInfo* info(int agent) const;

  private:
    enum class State { Waiting, Member, Expected, Gone };
    struct Agent {
        State state = State::Waiting;
        NodeInfo info;
    };
    void depart(int agent, const std::string& change, bool lost, Clock::time_point now);
    void try_form(Clock::time_point now);
    void form();
    std::string describe(int agent) const;

    MembershipLimits m_limits;
    int m_leader;
    Fingerprint m_job;
    std::map<int, Agent> m_agents;
    std::vector<int> m_members;  // the last round's, by node rank
    int m_round = -1;            // the last round formed
    bool m_running = false;      // m_round runs (its stop not seen yet)
    bool m_stop_sent = false;    // a Stop for m_round was asked already
    bool m_finishing = false;
    bool m_given_up = false;
    std::vector<std::string> m_changes;              // since the last round formed
    std::set<int> m_spares;                          // told they wait as spares
    std::vector<std::string> m_departed;             // every node that left or was lost, and how
    Clock::time_point m_forming_since;               // the wait for the next round began
    std::optional<Clock::time_point> m_min_reached;  // first round: MIN agents wait
    std::vector<MembershipAction> m_actions;
};

}  // namespace ddprun
