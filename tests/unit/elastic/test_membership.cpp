// The leader's rules of an elastic job (MembershipPlanner), fed events and a
// clock by hand: when rounds form, who gets which node rank, what a newcomer,
// a leave or a loss does to a running round, spares, the finishing job, the
// join timeout, and the agents it refuses.
#include "ddprun/elastic/membership.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Action = MembershipAction;
using Kind = MembershipAction::Kind;
using Clock = MembershipPlanner::Clock;

Fingerprint job() {
    Fingerprint f{3, "./train", 0, "job", "1.0"};
    f.min_nnodes = 2;
    f.last_call_ms = 1000;
    return f;
}

NodeInfo node(int agent) {
    NodeInfo info;
    info.host = "h" + std::to_string(agent);
    info.pid = 100 + agent;
    info.fingerprint = job();
    return info;
}

bool mentions(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// A planner for --nnodes=2:3, last call 1 s, join timeout 10 s; agent 0 leads.
class Planner : public ::testing::Test {
  protected:
    Clock::time_point t0 = Clock::now();
    MembershipPlanner planner{{2, 3, 1s, 10s}, 0, job(), t0};

    Clock::time_point at(std::chrono::milliseconds offset) const { return t0 + offset; }
    std::vector<Action> join(int agent, std::chrono::milliseconds when = 0ms) {
        planner.join(agent, node(agent), at(when));
        return planner.take_actions();
    }
    // Forms round 0 with agents 0..n-1 (n == MAX forms at once).
    void start_with(int n) {
        for (int agent = 0; agent < n; ++agent) join(agent);
        if (n < 3) {
            planner.tick(at(2s));
            planner.take_actions();
        }
        ASSERT_TRUE(planner.running());
    }
    // Every member of the stopped round asks for the next one; returns the actions.
    std::vector<Action> rejoin(const std::vector<int>& agents, std::chrono::milliseconds when) {
        std::vector<Action> all;
        for (int agent : agents) {
            auto actions = join(agent, when);
            all.insert(all.end(), actions.begin(), actions.end());
        }
        return all;
    }
};

TEST_F(Planner, FirstRoundFormsAtOnceWhenMaxAgentsWait) {
    EXPECT_TRUE(join(0).empty());
    EXPECT_TRUE(join(1).empty()) << "MIN reached: the last call starts";
    auto actions = join(2, 100ms);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].round, 0);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(actions[0].message, "");
}

TEST_F(Planner, FirstRoundAtMinFormsWhenTheLastCallEnds) {
    join(1, 0ms);
    join(0, 500ms);  // the MIN-th agent: the last call runs from here
    planner.tick(at(1400ms));
    EXPECT_TRUE(planner.take_actions().empty());
    EXPECT_EQ(planner.next_deadline(), at(1500ms));
    planner.tick(at(1500ms));
    auto actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 1})) << "the leader is node 0";
}

TEST_F(Planner, FirstRoundBelowMinGivesUpAtTheJoinTimeout) {
    join(0);
    planner.tick(at(9s));
    EXPECT_TRUE(planner.take_actions().empty());
    planner.tick(at(10s));
    auto actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::GiveUp);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0}));
    EXPECT_EQ(actions[0].exit_code, 75);
    EXPECT_TRUE(mentions(actions[0].message, "1 of at least 2 nodes joined")) << actions[0].message;
    EXPECT_TRUE(mentions(actions[0].message, "--nnodes=2:3")) << actions[0].message;
}

TEST_F(Planner, ANewcomerStopsARoundBelowMaxAndJoinsTheNext) {
    start_with(2);
    auto actions = join(2, 3s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Stop);
    EXPECT_EQ(actions[0].round, 0);
    EXPECT_FALSE(actions[0].failure);
    EXPECT_TRUE(mentions(actions[0].message, "h2 (agent pid 102) joined")) << actions[0].message;
    // The members come back one by one, after stopping their workers; the round forms when
    // the last one does.
    EXPECT_TRUE(join(1, 4s).empty());
    actions = join(0, 5s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].round, 1);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 1, 2}));
    EXPECT_TRUE(mentions(actions[0].message, "h2 (agent pid 102) joined")) << actions[0].message;
}

TEST_F(Planner, TwoNewcomersStopTheRoundOnce) {
    // Limits 1:4 (the fingerprint is only compared, not read for them).
    MembershipPlanner wide{{1, 4, 1s, 10s}, 0, job(), t0};
    wide.join(0, node(0), t0);
    wide.tick(at(2s));
    wide.take_actions();
    wide.join(1, node(1), at(3s));
    wide.join(2, node(2), at(3s));
    auto actions = wide.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Stop);
}

TEST_F(Planner, ANewcomerToAFullJobWaitsAsASpareAndReplacesALostNode) {
    start_with(3);
    auto actions = join(3, 3s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Answer);
    EXPECT_EQ(actions[0].reply, Action::Reply::Spare);
    EXPECT_EQ(actions[0].agent, 3);

    planner.lost(1, "stopped answering", at(4s));
    actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Stop);
    EXPECT_FALSE(actions[0].failure);
    actions = rejoin({2, 0}, 5s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    // Node 2 moves up to rank 1 (a node before it left); the spare comes last.
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 2, 3}));
    EXPECT_TRUE(mentions(actions[0].message, "h1 (agent pid 101) stopped answering"))
        << actions[0].message;
    EXPECT_TRUE(mentions(actions[0].message, "h3 (agent pid 103) joined (a spare)"))
        << actions[0].message;
}

TEST_F(Planner, RanksKeepThePreviousOrderThenNewcomersInJoinOrder) {
    auto info = [](int agent) {
        NodeInfo n = node(agent);
        n.fingerprint.min_nnodes = 1;
        n.fingerprint.nnodes = 4;
        return n;
    };
    Fingerprint f = info(0).fingerprint;
    MembershipPlanner p{{1, 4, 1s, 10s}, 5, f, t0};
    p.join(7, info(7), t0);
    p.join(5, info(5), t0);
    p.tick(at(2s));
    auto actions = p.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].members, (std::vector<int>{5, 7}));
    p.join(6, info(6), at(3s));  // came after 7: ranked after it
    p.join(4, info(4), at(3s));
    p.take_actions();
    p.join(7, info(7), at(4s));
    p.join(5, info(5), at(4s));
    actions = p.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].members, (std::vector<int>{5, 7, 4, 6}))
        << "ids count arrivals: 4 came before 6";
}

TEST_F(Planner, ALeaveStopsTheRoundAndTheRestReformAtOnce) {
    start_with(3);
    planner.leave(2, "left (SIGTERM)", at(3s));
    auto actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Stop);
    actions = rejoin({0, 1}, 3100ms);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 1}));
    EXPECT_TRUE(mentions(actions[0].message, "h2 (agent pid 102) left (SIGTERM)"));
}

TEST_F(Planner, BelowMinTheSurvivorsWaitForANewcomerThenGiveUp) {
    start_with(2);
    planner.lost(1, "stopped answering", at(3s));
    planner.take_actions();
    EXPECT_TRUE(rejoin({0}, 4s).empty()) << "1 node is below MIN 2: wait";
    // A newcomer within join_timeout saves the job.
    auto actions = join(5, 6s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 5}));

    // Lost again, and nobody comes this time.
    planner.lost(5, "stopped answering", at(7s));
    planner.take_actions();
    rejoin({0}, 8s);  // the wait for the next round starts: join_timeout runs from here
    planner.tick(at(17s));
    EXPECT_TRUE(planner.take_actions().empty());
    planner.tick(at(18s));
    actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::GiveUp);
    EXPECT_EQ(actions[0].exit_code, 75);
    EXPECT_TRUE(mentions(actions[0].message, "1 node(s) left of at least 2")) << actions[0].message;
    EXPECT_TRUE(mentions(actions[0].message, "h5 (agent pid 105) stopped answering"))
        << actions[0].message;
    EXPECT_TRUE(mentions(actions[0].message, "h1 (agent pid 101) stopped answering"))
        << actions[0].message;
}

TEST_F(Planner, AWorkerFailureStopIsSeenThroughTheMembersRejoining) {
    start_with(3);
    // The round stopped on its own (a worker failed): no action until they are all back.
    EXPECT_TRUE(rejoin({1, 2}, 3s).empty());
    auto actions = join(0, 3s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Form);
    EXPECT_EQ(actions[0].members, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(actions[0].message, "") << "the membership did not change";
}

TEST_F(Planner, AFinishingJobTurnsNewcomersAndSparesAwayAndFailsOnALoss) {
    start_with(3);
    join(3, 3s);  // a spare
    planner.finishing();
    auto actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Answer);
    EXPECT_EQ(actions[0].reply, Action::Reply::Finished);
    EXPECT_EQ(actions[0].agent, 3);
    EXPECT_EQ(actions[0].exit_code, 0);

    actions = join(4, 4s);
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].reply, Action::Reply::Finished);

    planner.lost(2, "stopped answering", at(5s));
    actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Stop);
    EXPECT_TRUE(actions[0].failure) << "membership is frozen: a loss fails the job";
    EXPECT_EQ(actions[0].failure_kind, FailureKind::NodeLost);
    EXPECT_EQ(actions[0].agent, 2) << "its node rank";
}

TEST_F(Planner, AnAgentOfAnotherJobIsRefusedNamingTheField) {
    start_with(2);
    NodeInfo other = node(9);
    other.fingerprint.min_nnodes = 1;
    other.fingerprint.program = "./other";
    other.fingerprint.last_call_ms = 5000;
    planner.join(9, other, at(3s));
    auto actions = planner.take_actions();
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].kind, Kind::Answer);
    EXPECT_EQ(actions[0].reply, Action::Reply::Refused);
    EXPECT_EQ(actions[0].exit_code, 75);
    EXPECT_TRUE(mentions(actions[0].message, "nnodes differ: 2:3 on node 0, 1:3 on this node"))
        << actions[0].message;
    EXPECT_TRUE(mentions(actions[0].message, "program and arguments differ")) << actions[0].message;
    EXPECT_TRUE(
        mentions(actions[0].message, "last_call_timeout differ: 1000 ms on node 0, 5000 ms"))
        << actions[0].message;
    EXPECT_TRUE(planner.running()) << "the job goes on";
}

TEST_F(Planner, ANodeGivenUpIsRefusedWhenItComesBack) {
    start_with(3);
    planner.lost(2, "stopped answering", at(3s));
    planner.take_actions();
    auto actions = join(2, 4s);  // it was frozen, and thawed
    ASSERT_EQ(actions.size(), 1u);
    EXPECT_EQ(actions[0].reply, Action::Reply::Refused);
    EXPECT_TRUE(mentions(actions[0].message, "start ddprun again")) << actions[0].message;
}

TEST_F(Planner, TheLeaderNeverDeparts) {
    start_with(2);
    planner.lost(0, "stopped answering", at(3s));
    planner.leave(0, "left", at(3s));
    EXPECT_TRUE(planner.take_actions().empty());
    EXPECT_EQ(planner.live().size(), 2u);
}

TEST_F(Planner, ALostSpareOnlyLeavesTheList) {
    start_with(3);
    join(3, 3s);
    planner.lost(3, "stopped answering", at(4s));
    EXPECT_TRUE(planner.take_actions().empty());
    EXPECT_TRUE(planner.running());
    EXPECT_TRUE(planner.waiting().empty());
}

// --- etcd: no agent is node 0 by right; a successor takes over --------------------

// With no leader (-1), node 0 is the first to come, then the previous order.
TEST(PlannerWithoutLeader, NodeZeroIsTheFirstSurvivor) {
    const auto t0 = Clock::now();
    MembershipPlanner planner{{2, 3, 1s, 10s}, -1, job(), t0};
    for (int agent : {4, 2, 7}) planner.join(agent, node(agent), t0);
    auto formed = planner.take_actions();
    ASSERT_EQ(formed.size(), 1u);
    EXPECT_EQ(formed[0].members, (std::vector<int>{2, 4, 7})) << "ids give the arrival order";
    planner.lost(2, "stopped answering", t0 + 1s);
    auto stop = planner.take_actions();
    ASSERT_EQ(stop.size(), 1u);
    EXPECT_EQ(stop[0].kind, Kind::Stop);
    planner.join(7, node(7), t0 + 2s);
    planner.join(4, node(4), t0 + 2s);
    auto next = planner.take_actions();
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].members, (std::vector<int>{4, 7})) << "node 0 is the first survivor";
}

// A successor resumes the lost leader's running round: it stops it, and the next
// round waits for the spare it did not know yet as for the members.
TEST(PlannerWithoutLeader, ASuccessorStopsTheRoundAndWaitsForTheLostLeadersSpare) {
    const auto t0 = Clock::now();
    MembershipPlanner planner{{1, 2, 1s, 10s}, -1, job(), t0};
    planner.resume(3, {{0, node(0)}, {1, node(1)}}, true, {1, 5}, t0);
    planner.lost(0, "stopped answering; it led the job", t0);
    auto stop = planner.take_actions();
    ASSERT_EQ(stop.size(), 1u);
    EXPECT_EQ(stop[0].kind, Kind::Stop);
    EXPECT_EQ(stop[0].round, 3);
    EXPECT_TRUE(mentions(stop[0].message, "h0 (agent pid 100) stopped answering"))
        << stop[0].message;
    planner.join(1, node(1), t0 + 100ms);
    EXPECT_TRUE(planner.take_actions().empty()) << "the spare is still expected";
    planner.join(5, node(5), t0 + 200ms);
    auto formed = planner.take_actions();
    ASSERT_EQ(formed.size(), 1u);
    EXPECT_EQ(formed[0].kind, Kind::Form);
    EXPECT_EQ(formed[0].round, 4);
    EXPECT_EQ(formed[0].members, (std::vector<int>{1, 5}));
    EXPECT_TRUE(mentions(formed[0].message, "joined (a spare)")) << formed[0].message;
    EXPECT_FALSE(mentions(formed[0].message, "h5 (agent pid 105) joined;")) << formed[0].message;
}

// An expected agent that dies before asking again is not waited for.
TEST(PlannerWithoutLeader, AnExpectedAgentLostIsNotWaitedFor) {
    const auto t0 = Clock::now();
    MembershipPlanner planner{{1, 2, 1s, 10s}, -1, job(), t0};
    planner.resume(0, {{0, node(0)}, {1, node(1)}}, false, {5}, t0);
    planner.lost(0, "stopped answering", t0);
    planner.lost(5, "stopped answering", t0);
    planner.take_actions();
    planner.join(1, node(1), t0 + 100ms);
    auto formed = planner.take_actions();
    ASSERT_EQ(formed.size(), 1u);
    EXPECT_EQ(formed[0].members, (std::vector<int>{1}));
    EXPECT_TRUE(mentions(formed[0].message, "agent 5 stopped answering")) << formed[0].message;
}

}  // namespace
}  // namespace ddprun
