// Black-box tests of a multi-node ddprun: several agents on this machine, one
// per loopback address (127.0.0.1, .2, .3), meet through the rendezvous store
// like the nodes of a cluster. The tests check what a user of a cluster relies
// on: one consistent job (ranks, MASTER_ADDR/PORT, restart rounds) across the
// nodes, and that a failure, a signal or a lost node anywhere ends the job on
// every node with the same exit code, a summary naming the root cause, and no
// process left behind. Every agent's exit code is checked, and each agent has
// its own hang guard, so "promptly" means "long before the guard".
//
// Every test runs over both rendezvous backends ("/c10d", "/etcd": backend.hpp)
// unless it is about the c10d store itself (its host, its port, a store that
// belongs to another job): those stay c10d-only, and test_etcd.cpp has etcd's
// own cases.

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

// Over both backends.
class MultiNodeEnv : public MultiNodeBackendTest {};
class MultiNodeJoin : public MultiNodeBackendTest {};
class MultiNodeFailures : public MultiNodeBackendTest {};
class MultiNodeSignals : public MultiNodeBackendTest {};
class MultiNodeLiveness : public MultiNodeBackendTest {};
class MultiNodeRestarts : public MultiNodeBackendTest {};
class MultiNodeBarrier : public MultiNodeBackendTest {};
class MultiNodePython : public MultiNodeBackendTest {};
// Over c10d only: the store node 0's agent hosts.
class MultiNodeRendezvous : public MultiNodeTest {};

#define MULTI_NODE_OVER_BOTH_BACKENDS(suite) \
    INSTANTIATE_TEST_SUITE_P(MultiNode, suite, ::testing::ValuesIn(k_backends), backend_name)
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeEnv);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeJoin);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeFailures);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeSignals);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeLiveness);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeRestarts);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodeBarrier);
MULTI_NODE_OVER_BOTH_BACKENDS(MultiNodePython);

// --- the job's shape ----------------------------------------------------------

TEST_P(MultiNodeEnv, EveryNodeGetsTheJobWideVariables) {
    // Node 0 is not on the endpoint's address: MASTER_ADDR must be node 0's own
    // address, on every node, not the endpoint's and not the local one.
    Job job;
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.2", .actions = {"env"}},
                             {.node_rank = 1, .addr = "127.0.0.1", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    std::set<std::string> ports;
    for (int node = 0; node < 2; ++node) {
        auto env = env_by_rank(r[static_cast<std::size_t>(node)].out);
        ASSERT_EQ(env.size(), 2u) << "each node shows its own two ranks\n" << describe_all(r);
        for (int local = 0; local < 2; ++local) {
            int rank = node * 2 + local;
            SCOPED_TRACE(fmt::format("node {} rank {}", node, rank));
            ASSERT_TRUE(env.contains(rank)) << describe_all(r);
            auto& e = env[rank];
            EXPECT_EQ(e["RANK"], std::to_string(rank));
            EXPECT_EQ(e["LOCAL_RANK"], std::to_string(local));
            EXPECT_EQ(e["WORLD_SIZE"], "4");
            EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
            EXPECT_EQ(e["GROUP_RANK"], std::to_string(node));
            EXPECT_EQ(e["NODE_RANK"], std::to_string(node));
            EXPECT_EQ(e["GROUP_WORLD_SIZE"], "2");
            EXPECT_EQ(e["NNODES"], "2");
            EXPECT_EQ(e["ROLE_RANK"], std::to_string(rank));
            EXPECT_EQ(e["ROLE_WORLD_SIZE"], "4");
            EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.2");
            EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
            EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], m_run_id);
            ports.insert(e["MASTER_PORT"]);
        }
    }
    ASSERT_EQ(ports.size(), 1u) << "every worker must get the same MASTER_PORT: "
                                << fmt::format("{}", fmt::join(ports, ", "));
    int port = std::atoi(ports.begin()->c_str());
    EXPECT_GT(port, 0);
    EXPECT_LT(port, 65536);
    if (!etcd()) {
        EXPECT_NE(port, m_port) << "MASTER_PORT is rank 0's store, not the rendezvous store";
    }
}

TEST_P(MultiNodeEnv, DifferentNprocPerNodeGivesPrefixSumRanks) {
    Job job;
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = {"env"}},
                             {.node_rank = 1,
                              .addr = "127.0.0.2",
                              .flags = {"--nproc_per_node=3"},
                              .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    const std::vector<std::vector<int>> ranks_of_node = {{0, 1}, {2, 3, 4}};
    for (std::size_t node = 0; node < 2; ++node) {
        auto env = env_by_rank(r[node].out);
        const auto& ranks = ranks_of_node[node];
        ASSERT_EQ(env.size(), ranks.size()) << describe_all(r);
        for (std::size_t local = 0; local < ranks.size(); ++local) {
            int rank = ranks[local];
            SCOPED_TRACE(fmt::format("node {} rank {}", node, rank));
            auto& e = env[rank];
            EXPECT_EQ(e["RANK"], std::to_string(rank));
            EXPECT_EQ(e["LOCAL_RANK"], std::to_string(local));
            EXPECT_EQ(e["WORLD_SIZE"], "5");
            EXPECT_EQ(e["LOCAL_WORLD_SIZE"], std::to_string(ranks.size()));
            EXPECT_EQ(e["NODE_RANK"], std::to_string(node));
        }
    }
}

TEST_P(MultiNodeEnv, ThreeNodesOnThreeAddressesSucceed) {
    Job job;
    job.nnodes = 3;
    std::vector<Node> nodes;
    for (int node = 0; node < 3; ++node) {
        nodes.push_back({.node_rank = node,
                         .addr = fmt::format("127.0.0.{}", node + 1),
                         .actions = {"print", "2", "env"}});
    }
    auto r = run_nodes(job, nodes);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0, 0})) << describe_all(r);
    std::set<std::string> ports;
    for (int node = 0; node < 3; ++node) {
        auto by_rank = lines_by_rank(r[static_cast<std::size_t>(node)].out);
        auto env = env_by_rank(r[static_cast<std::size_t>(node)].out);
        ASSERT_EQ(by_rank.size(), 2u) << describe_all(r);
        for (int rank : {node * 2, node * 2 + 1}) {
            SCOPED_TRACE(fmt::format("node {} rank {}", node, rank));
            ASSERT_GE(by_rank[rank].size(), 2u) << describe_all(r);
            EXPECT_EQ(by_rank[rank][0], fmt::format("line 0 rank {}", rank));
            EXPECT_EQ(by_rank[rank][1], fmt::format("line 1 rank {}", rank));
            EXPECT_EQ(env[rank]["WORLD_SIZE"], "6");
            EXPECT_EQ(env[rank]["NNODES"], "3");
            EXPECT_EQ(env[rank]["MASTER_ADDR"], "127.0.0.1");
            ports.insert(env[rank]["MASTER_PORT"]);
        }
    }
    EXPECT_EQ(ports.size(), 1u) << fmt::format("{}", fmt::join(ports, ", "));
}

// --- rendezvous -----------------------------------------------------------------

TEST_F(MultiNodeRendezvous, OmittedNodeRanksAreAssignedWithTheStoreHostAsNodeZero) {
    // The agent on 127.0.0.3 starts alone and hosts the store; the others
    // start once it listens, so it must be node 0 although it is not on the
    // endpoint's address.
    Job job;
    job.nnodes = 3;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.addr = "127.0.0.3", .actions = {"env"}}));
    bool listening = wait_until([&] { return port_accepts("127.0.0.1", m_port); }, 30s);
    ASSERT_TRUE(listening) << "the first agent never hosted the store\n" << stderr_of(agents);
    agents.push_back(start_node(job, {.addr = "127.0.0.1", .actions = {"env"}}));
    agents.push_back(start_node(job, {.addr = "127.0.0.2", .actions = {"env"}}));
    auto r = wait_nodes(agents);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0, 0})) << describe_all(r);

    std::multiset<int> ranks;
    std::set<int> node_ranks;
    for (std::size_t agent = 0; agent < 3; ++agent) {
        auto env = env_by_rank(r[agent].out);
        ASSERT_EQ(env.size(), 2u) << describe_all(r);
        std::set<std::string> node_rank_of_agent;
        for (auto& [rank, e] : env) {
            ranks.insert(rank);
            node_rank_of_agent.insert(e["NODE_RANK"]);
            EXPECT_EQ(e["RANK"], std::to_string(std::atoi(e["NODE_RANK"].c_str()) * 2 +
                                                std::atoi(e["LOCAL_RANK"].c_str())))
                << "RANK must follow the assigned node rank\n"
                << describe_all(r);
            EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.3") << "node 0 is the store's host";
            EXPECT_EQ(e["WORLD_SIZE"], "6");
        }
        ASSERT_EQ(node_rank_of_agent.size(), 1u) << "one node rank per agent\n" << describe_all(r);
        node_ranks.insert(std::atoi(node_rank_of_agent.begin()->c_str()));
        if (agent == 0) {
            EXPECT_EQ(*node_rank_of_agent.begin(), "0") << "the store's host is node 0\n"
                                                        << describe_all(r);
        }
    }
    EXPECT_EQ(node_ranks, (std::set<int>{0, 1, 2})) << describe_all(r);
    EXPECT_EQ(ranks, (std::multiset<int>{0, 1, 2, 3, 4, 5}))
        << "ranks must cover 0..world-1 exactly once\n"
        << describe_all(r);
}

struct DuplicateCase {
    std::string name;
    int nnodes;
    std::vector<Node> nodes;  // two of them claim `rank`
    int rank;
};

class MultiNodeDuplicateRank : public MultiNodeCaseTest<DuplicateCase> {};

TEST_P(MultiNodeDuplicateRank, EveryAgentFailsNamingBothHosts) {
    const DuplicateCase& c = the_case();
    Job job;
    job.nnodes = c.nnodes;
    std::vector<Node> nodes = c.nodes;
    for (auto& node : nodes) node.actions = {"print", "1"};
    auto r = run_nodes(job, nodes);
    for (std::size_t i = 0; i < r.size(); ++i) {
        SCOPED_TRACE(fmt::format("agent {} ({})", i, nodes[i].addr));
        EXPECT_FALSE(r[i].timed_out) << "a duplicate rank must fail fast\n" << describe_all(r);
        EXPECT_EQ(r[i].exit_code, k_rendezvous_exit) << describe_all(r);
    }
    // The two claimants (on 127.0.0.2 and 127.0.0.3) are named, wherever the
    // message is printed; the agents that claimed it must say it.
    for (std::size_t i = 0; i < r.size(); ++i) {
        if (nodes[i].node_rank != c.rank) continue;
        auto lines = own_lines_with(r[i].err, {"127.0.0.2", "127.0.0.3"});
        EXPECT_EQ(lines.size(), 1u) << "agent " << i << " must name both hosts in one line\n"
                                    << describe_all(r);
    }
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start\n" << describe_all(r);
}

INSTANTIATE_TEST_SUITE_P(
    MultiNode, MultiNodeDuplicateRank,
    ::testing::ValuesIn(on_backends<DuplicateCase>({{"NodeRankOne",
                                                     3,
                                                     {{.node_rank = 0, .addr = "127.0.0.1"},
                                                      {.node_rank = 1, .addr = "127.0.0.2"},
                                                      {.node_rank = 1, .addr = "127.0.0.3"}},
                                                     1},
                                                    {"NodeRankZero",
                                                     2,
                                                     {{.node_rank = 0, .addr = "127.0.0.2"},
                                                      {.node_rank = 0, .addr = "127.0.0.3"}},
                                                     0}})),
    case_and_backend<DuplicateCase>);

struct MismatchCase {
    std::string name;
    std::vector<std::string> node0_flags;
    std::vector<std::string> node0_actions;
    std::vector<std::string> node1_flags;
    std::vector<std::string> node1_actions;
    std::vector<std::string> mentions;  // the field and both values
};

class MultiNodeMismatch : public MultiNodeCaseTest<MismatchCase> {};

TEST_P(MultiNodeMismatch, StopsEveryAgentNamingTheFieldValuesAndNodes) {
    const MismatchCase& c = the_case();
    Job job;
    auto r = run_nodes(
        job,
        {{.node_rank = 0, .addr = "127.0.0.1", .flags = c.node0_flags, .actions = c.node0_actions},
         {.node_rank = 1,
          .addr = "127.0.0.2",
          .flags = c.node1_flags,
          .actions = c.node1_actions}});
    for (std::size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(fmt::format("node {}", i));
        EXPECT_FALSE(r[i].timed_out) << describe_all(r);
        EXPECT_EQ(r[i].exit_code, k_rendezvous_exit) << describe_all(r);
        std::vector<std::string> needles = c.mentions;
        needles.insert(needles.end(), {"node 0", "node 1"});
        EXPECT_EQ(own_lines_with(r[i].err, needles).size(), 1u)
            << "expected one line naming " << fmt::format("{}", fmt::join(needles, ", ")) << "\n"
            << describe_all(r);
    }
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start\n" << describe_all(r);
}

// A run id differs only over c10d: there a store is one job's, where over etcd
// jobs of other run ids share the cluster under keys of their own, never meeting.
std::vector<OnBackend<MismatchCase>> mismatch_cases() {
    auto all = on_backends<MismatchCase>(
        {{"Nnodes", {}, {"print", "1"}, {"--nnodes=3"}, {"print", "1"}, {"nnodes", "2", "3"}},
         {"ProgramArguments",
          {},
          {"print", "1"},
          {},
          {"print", "2"},
          {"program", "print 1", "print 2"}},
         {"MaxRestarts",
          {"--max_restarts=1"},
          {"print", "1"},
          {"--max_restarts=2"},
          {"print", "1"},
          {"max_restarts", "1", "2"}}});
    auto c10d_only = on_backends<MismatchCase>({{"RunId",
                                                 {"--rdzv_id=job-a"},
                                                 {"print", "1"},
                                                 {"--rdzv_id=job-b"},
                                                 {"print", "1"},
                                                 {"run id", "job-a", "job-b"}}},
                                               {"c10d"});
    all.insert(all.end(), c10d_only.begin(), c10d_only.end());
    return all;
}

INSTANTIATE_TEST_SUITE_P(MultiNode, MultiNodeMismatch, ::testing::ValuesIn(mismatch_cases()),
                         case_and_backend<MismatchCase>);

// Node 0's name does not resolve (a Slurm node name that is not in DNS): every
// node says so in one line, with the fix, within seconds; none waits for a
// socket or join timeout, no worker starts.
TEST_F(MultiNodeRendezvous, AnUnresolvableMasterHostFailsEveryNodeAtOnce) {
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    for (int rank = 0; rank < 2; ++rank) {
        RunOptions options;
        options.timeout = k_node_guard;
        agents.push_back(
            start({"--nnodes=2", fmt::format("--node_rank={}", rank), "--master_addr=node0.invalid",
                   "--nproc_per_node=1", "--rdzv_id=" + m_run_id, k_fake_worker, "print", "1"},
                  options));
    }
    auto r = wait_nodes(agents);
    for (std::size_t i = 0; i < r.size(); ++i) {
        SCOPED_TRACE(fmt::format("node {}", i));
        EXPECT_FALSE(r[i].timed_out) << describe_all(r);
        EXPECT_EQ(r[i].exit_code, 2) << describe_all(r);
        auto lines = own_lines_with(
            r[i].err, {"'node0.invalid'", "does not resolve", "--master_addr=ADDRESS of node 0"});
        EXPECT_EQ(lines.size(), 1u) << describe_all(r);
        std::printf("[ measured ] node %zu exited after %lld ms\n", i,
                    static_cast<long long>(r[i].elapsed.count()));
    }
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start\n" << describe_all(r);
}

// Two jobs whose stores end up on one endpoint never form one world: the agent
// of the job that came second is refused, the first job runs on untouched.
TEST_F(MultiNodeRendezvous, AnotherJobsStoreIsNeverJoined) {
    Job job;
    const std::vector<std::string> actions = {
        "ready", m_dir + "/ready.{rank}", "wait-file", m_dir + "/go", "print", "1"};
    std::vector<std::unique_ptr<DdprunProcess>> first;
    first.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    first.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    wait_ready(4, first);
    // The second job: its own run id and program, the first job's endpoint.
    auto second = start_node(job, {.node_rank = 1,
                                   .addr = "127.0.0.3",
                                   .flags = {"--rdzv_id=other-job"},
                                   .actions = {"print", "2"}});
    auto refused = second->wait();
    EXPECT_EQ(refused.exit_code, k_rendezvous_exit) << refused.describe();
    auto lines = own_lines_with(refused.err, {"belongs to another job", "'other-job'",
                                              "'" + m_run_id + "'", "--rdzv_endpoint"});
    EXPECT_EQ(lines.size(), 1u) << refused.describe();
    write_text_file(path("go"), "");
    auto r = wait_nodes(first);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(lines_by_rank(r[0].out + r[1].out).size(), 4u) << describe_all(r);
}

TEST_P(MultiNodeJoin, JoinTimeoutNamesTheNodesThatNeverJoined) {
    Job job;
    job.nnodes = 3;
    job.conf["join_timeout"] = "2";
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = {"print", "1"}},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = {"print", "1"}}});
    for (std::size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(fmt::format("node {}", i));
        EXPECT_FALSE(r[i].timed_out) << describe_all(r);
        EXPECT_EQ(r[i].exit_code, k_rendezvous_exit) << describe_all(r);
        auto lines = own_lines_with(r[i].err, {"never joined"});
        ASSERT_EQ(lines.size(), 1u) << "one line naming the missing nodes\n" << describe_all(r);
        EXPECT_TRUE(contains(lines[0], "node 2")) << lines[0];
        EXPECT_FALSE(contains(lines[0], "node 0") || contains(lines[0], "node 1") ||
                     contains(lines[0], "nodes 0") || contains(lines[0], "nodes 1"))
            << "only node 2 is missing: " << lines[0];
    }
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start\n" << describe_all(r);
}

// --- failures -------------------------------------------------------------------

struct FailureCase {
    std::string name;
    int failing_rank;                  // of 4: ranks 0-1 on node 0, 2-3 on node 1
    std::vector<std::string> failure;  // fake_worker actions, in pairs
    int exit_code;
    std::string root_cause;  // how the box names the failing worker
    std::string ending;      // how the box says it ended
    std::vector<std::string> stderr_tail;
};

class MultiNodeFailurePropagation : public MultiNodeCaseTest<FailureCase> {};

TEST_P(MultiNodeFailurePropagation, EveryNodeStopsAndReportsTheRootCause) {
    const FailureCase& c = the_case();
    // A worker stopped only after the 300 s grace would hit the hang guard:
    // the others must be stopped as soon as the failure is known.
    Job job;
    job.flags = {"--shutdown_timeout=300"};
    auto actions = fail_when_all_ready(m_dir, 4, c.failing_rank, c.failure);
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    const int failing_node = c.failing_rank / 2;
    for (int node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        const auto& result = r[static_cast<std::size_t>(node)];
        EXPECT_FALSE(result.timed_out) << "the sleeping workers were not stopped promptly\n"
                                       << describe_all(r);
        EXPECT_EQ(result.exit_code, c.exit_code) << describe_all(r);
        std::string box = ddprun_messages(result.err);
        EXPECT_TRUE(contains(box, "root cause: " + c.root_cause)) << describe_all(r);
        EXPECT_TRUE(contains(box, c.ending)) << describe_all(r);
        for (const auto& line : c.stderr_tail) {
            EXPECT_TRUE(contains(box, "| " + line))
                << "the root cause's stderr tail belongs in every node's summary: " << line << "\n"
                << describe_all(r);
        }
        if (node != failing_node) {
            // This node's own workers were stopped, not failed by themselves.
            for (int rank : {node * 2, node * 2 + 1}) {
                auto marked =
                    own_lines_with(result.err, {fmt::format("rank {} ", rank), "stopped"});
                EXPECT_FALSE(marked.empty()) << "rank " << rank << " should be listed as stopped\n"
                                             << describe_all(r);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(MultiNode, MultiNodeFailurePropagation,
                         ::testing::ValuesIn(on_backends<FailureCase>(
                             {{"FromNode1ToNode0",
                               3,
                               {"stderr", "3", "exit", "3"},
                               3,
                               "rank 3 (local_rank 1, node 1, host 127.0.0.2",
                               "exit code: 3",
                               {"err 0 rank 3", "err 1 rank 3", "err 2 rank 3"}},
                              {"FromNode0ToNode1",
                               0,
                               {"stderr", "2", "raise", "SIGSEGV"},
                               139,
                               "rank 0 (local_rank 0, node 0, host 127.0.0.1",
                               "SIGSEGV",
                               {"err 0 rank 0", "err 1 rank 0"}}})),
                         case_and_backend<FailureCase>);

TEST_P(MultiNodeFailures, ErrorFileMessageReachesEveryNode) {
    const std::string message = "RuntimeError: fake CUDA error on node 1 (from the error file)";
    Job job;
    job.flags = {"--shutdown_timeout=300"};
    auto actions = fail_when_all_ready(m_dir, 4, 2, {"write-error-file", message, "exit", "9"});
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{9, 9})) << describe_all(r);
    for (const auto& result : r) {
        EXPECT_TRUE(contains(ddprun_messages(result.err), message)) << describe_all(r);
    }
}

// --- signals --------------------------------------------------------------------

struct SignalCase {
    std::string name;
    int node;  // which agent gets the signal
    int signal;
    std::string signal_name;
};

class MultiNodeSignalToOneAgent : public MultiNodeCaseTest<SignalCase> {};

TEST_P(MultiNodeSignalToOneAgent, EveryNodeExitsWith128PlusTheSignal) {
    const SignalCase& c = the_case();
    Job job;
    job.flags = {"--shutdown_timeout=300"};
    auto actions = sleepers(m_dir, {"trap-exit", "SIGTERM", "trap-exit", "SIGINT"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    agents[static_cast<std::size_t>(c.node)]->send_signal(c.signal);
    auto r = wait_nodes(agents);
    for (int node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        const auto& result = r[static_cast<std::size_t>(node)];
        EXPECT_FALSE(result.timed_out) << describe_all(r);
        EXPECT_EQ(result.exit_code, 128 + c.signal) << describe_all(r);
        // The signalled node passes its signal on; the others stop with SIGTERM.
        std::string expected = node == c.node ? "got " + c.signal_name : "got SIGTERM";
        auto out = lines_by_rank(result.out);
        for (int rank : {node * 2, node * 2 + 1}) {
            EXPECT_EQ(out[rank], std::vector<std::string>{expected}) << describe_all(r);
        }
        if (node != c.node) {
            // Why it stopped: the other agent and the signal are named.
            EXPECT_FALSE(
                own_lines_with(result.err, {fmt::format("node {}", c.node), c.signal_name}).empty())
                << describe_all(r);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    MultiNode, MultiNodeSignalToOneAgent,
    ::testing::ValuesIn(on_backends<SignalCase>({{"SigtermToNode1", 1, SIGTERM, "SIGTERM"},
                                                 {"SigintToNode0", 0, SIGINT, "SIGINT"}})),
    case_and_backend<SignalCase>);

// A scheduler's stop (scancel, a time limit, preemption, a pod deletion)
// signals every node, each at its own moment, while the first node to get it
// relays the stop through the store. The relayed stop and a node's own signal
// are one stop with one grace: workers that take 2 s to save a checkpoint on
// SIGTERM save it on every node, whatever the delay between the two signals.
struct SchedulerStopCase {
    std::string name;
    int delay_ms;  // between the signal to node 1 and the one to node 0
};

class MultiNodeSchedulerStop : public MultiNodeCaseTest<SchedulerStopCase> {};

TEST_P(MultiNodeSchedulerStop, EveryNodeKeepsTheGraceWhenEveryNodeIsSignalled) {
    const auto delay = std::chrono::milliseconds(the_case().delay_ms);
    Job job;
    const std::vector<std::string> actions = {"ready", m_dir + "/ready.{rank}", "save-on-term",
                                              "2"};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    agents[1]->send_signal(SIGTERM);
    std::this_thread::sleep_for(delay);  // the delay under test, not a wait for an event
    agents[0]->send_signal(SIGTERM);
    auto r = wait_nodes(agents);
    for (int node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        const auto& result = r[static_cast<std::size_t>(node)];
        EXPECT_FALSE(result.timed_out) << describe_all(r);
        EXPECT_EQ(result.exit_code, 128 + SIGTERM) << describe_all(r);
        auto out = lines_by_rank(result.out);
        for (int rank : {node * 2, node * 2 + 1})
            EXPECT_EQ(out[rank], std::vector<std::string>{fmt::format("saved rank {}", rank)})
                << "a worker lost its checkpoint\n"
                << describe_all(r);
        EXPECT_TRUE(own_lines_with(result.err, {"killing workers"}).empty()) << describe_all(r);
    }
}

INSTANTIATE_TEST_SUITE_P(MultiNode, MultiNodeSchedulerStop,
                         ::testing::ValuesIn(on_backends<SchedulerStopCase>({{"DelayMs0", 0},
                                                                             {"DelayMs2", 2},
                                                                             {"DelayMs10", 10},
                                                                             {"DelayMs30", 30},
                                                                             {"DelayMs100", 100}})),
                         case_and_backend<SchedulerStopCase>);

// --broadcast-signals: a scheduler's preemption notice (SIGUSR1) to one agent
// reaches the workers of every node; without the flag only that node's.
TEST_P(MultiNodeSignals, BroadcastSignalsPassesSigusr1ToEveryNode) {
    Job job;
    job.conf["heartbeat_timeout"] = "1";  // signals are picked up with the heartbeats
    job.flags = {"--broadcast-signals"};
    std::vector<std::string> actions = {"ready", m_dir + "/ready.{rank}", "wait-signal", "print",
                                        "1"};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    agents[0]->send_signal(SIGUSR1);
    auto r = wait_nodes(agents);
    for (int node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        const auto& result = r[static_cast<std::size_t>(node)];
        EXPECT_EQ(result.exit_code, 0) << describe_all(r);
        auto out = lines_by_rank(result.out);
        for (int rank : {node * 2, node * 2 + 1})
            EXPECT_EQ(out[rank], (std::vector<std::string>{"got SIGUSR1",
                                                           fmt::format("line 0 rank {}", rank)}))
                << describe_all(r);
    }
}

// Node 1 is stopped (SIGTERM) while node 0, and the c10d store it hosts, is
// frozen: node 1's round cannot end until its store calls give up (about 18 s),
// but its scratch directory goes as soon as its workers saved and were reaped,
// so the SIGKILL that Slurm sends after KillWait leaves nothing in $TMPDIR.
class MultiNodeScratch : public MultiNodeTest {};

TEST_F(MultiNodeScratch, AStoppedNodesScratchDirectoryGoesWithItsWorkers) {
    Job job;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    std::vector<std::string> tmp;
    for (int node = 0; node < 2; ++node) {
        tmp.push_back(fmt::format("{}/tmp{}", m_dir, node));
        std::filesystem::create_directories(tmp.back());
        RunOptions options;
        options.env = {{"TMPDIR", tmp.back()}};
        agents.push_back(start_node(job,
                                    {.node_rank = node,
                                     .addr = fmt::format("127.0.0.{}", node + 1),
                                     .actions = {"save-marker", m_dir + "/saved.{rank}", "ready",
                                                 m_dir + "/ready.{rank}", "save-on-term", "1"}},
                                    options));
    }
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    auto entries = [](const std::string& dir) {
        std::vector<std::string> names;
        for (const auto& entry : std::filesystem::directory_iterator(dir))
            names.push_back(entry.path().filename().string());
        return names;
    };
    ASSERT_EQ(entries(tmp[1]).size(), 1u) << "one scratch directory while the job runs";
    const pid_t frozen_agent = agent_of(*agents[0]);
    ASSERT_GT(frozen_agent, 0);
    ::kill(frozen_agent, SIGSTOP);
    ::kill(agents[0]->pid(), SIGSTOP);
    agents[1]->send_signal(SIGTERM);
    EXPECT_TRUE(wait_for_file(m_dir + "/saved.2", 10s) && wait_for_file(m_dir + "/saved.3", 10s));
    EXPECT_TRUE(wait_until([&] { return entries(tmp[1]).empty(); }, 10s))
        << "node 1's scratch directory outlived its workers: "
        << fmt::format("{}", fmt::join(entries(tmp[1]), " "));
    EXPECT_TRUE(agents[1]->running()) << "node 1's round ended without its store";
    // As slurmstepd does after KillWait: node 1's agent and supervisor at once.
    if (const pid_t agent = agent_of(*agents[1]); agent > 0) ::kill(agent, SIGKILL);
    agents[1]->send_signal(SIGKILL);
    EXPECT_TRUE(agents[1]->wait_exit_for(10s));
    EXPECT_TRUE(entries(tmp[1]).empty());
    kill_node(*agents[0]);  // frozen: it would wait out node 1's heartbeat timeout
    wait_nodes(agents);
}

// --- liveness -------------------------------------------------------------------

// Which process of a node the test kills: the ddprun the user started, or the
// agent process under it (as the OOM killer would pick it).
enum class Target { Ddprun, Agent };

struct KillCase {
    std::string name;
    int node;
    Target target;
    // The survivor's messages must mention one of these (what was lost). Over
    // etcd, a killed agent's lease runs out: the survivor also says that.
    std::vector<std::string> survivor_mentions;
};

class MultiNodeKilledNode : public MultiNodeCaseTest<KillCase> {};

TEST_P(MultiNodeKilledNode, TheOtherNodeStopsWithTheRendezvousCode) {
    const KillCase& c = the_case();
    Job job;
    job.conf["heartbeat_timeout"] = "2";
    job.flags = {"--shutdown_timeout=300"};
    job.guard = 25s;  // the heartbeat timeout is 2 s: this is an order of magnitude more
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(
        start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = sleepers(m_dir)}));
    agents.push_back(
        start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = sleepers(m_dir)}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    auto& victim = *agents[static_cast<std::size_t>(c.node)];
    pid_t target = c.target == Target::Ddprun ? victim.pid() : agent_of(victim);
    ASSERT_GT(target, 0) << "no agent process under ddprun " << victim.pid();
    ::kill(target, SIGKILL);
    // A SIGKILLed process cleans up nothing itself: what its node leaves
    // behind gets the bounded orphan grace (checked below and in TearDown).
    expect_orphans_to_clean_up();
    auto r = wait_nodes(agents);
    const auto& killed = r[static_cast<std::size_t>(c.node)];
    const auto& survivor = r[static_cast<std::size_t>(1 - c.node)];
    EXPECT_FALSE(killed.timed_out) << describe_all(r);
    EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << describe_all(r);
    EXPECT_FALSE(survivor.timed_out) << "the lost node was not noticed in time\n"
                                     << describe_all(r);
    if (c.target == Target::Agent) {
        EXPECT_EQ(survivor.exit_code, k_rendezvous_exit) << describe_all(r);
    } else {
        // The agent outlives its killed supervisor for a moment: it may report
        // the kill (128+9, like any signal to an agent) or just vanish.
        EXPECT_TRUE(survivor.exit_code == k_rendezvous_exit || survivor.exit_code == 128 + SIGKILL)
            << describe_all(r);
    }
    bool named = std::any_of(c.survivor_mentions.begin(), c.survivor_mentions.end(),
                             [&](const std::string& mention) {
                                 return !own_lines_with(survivor.err, {mention}).empty();
                             });
    if (etcd() && c.target == Target::Agent) {
        // Its key went with its lease and the watch saw it.
        EXPECT_FALSE(own_lines_with(survivor.err, {fmt::format("node {}", c.node),
                                                   "stopped answering", "etcd lease"})
                         .empty())
            << describe_all(r);
    }
    EXPECT_TRUE(named) << "the survivor must say what was lost: "
                       << fmt::format("{}", fmt::join(c.survivor_mentions, " or ")) << "\n"
                       << describe_all(r);
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << "survivors of the job:\n" << describe(live);
}

// Over c10d node 0 hosts the store: the survivor may name the store instead.
INSTANTIATE_TEST_SUITE_P(MultiNode, MultiNodeKilledNode,
                         ::testing::ValuesIn(on_backends<KillCase>(
                             {{"Node1Ddprun", 1, Target::Ddprun, {"node 1"}},
                              {"Node1Agent", 1, Target::Agent, {"node 1"}},
                              {"Node0Ddprun", 0, Target::Ddprun, {"store", "node 0"}},
                              {"Node0Agent", 0, Target::Agent, {"store", "node 0"}}})),
                         case_and_backend<KillCase>);

TEST_P(MultiNodeLiveness, FrozenNodeIsDetectedAndStopsOnceThawed) {
    Job job;
    job.conf["heartbeat_timeout"] = "2";
    job.flags = {"--shutdown_timeout=300"};
    job.guard = 25s;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(
        start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = sleepers(m_dir)}));
    // The frozen node gets more time: it only starts to stop once thawed.
    Job frozen_job = job;
    frozen_job.guard = 50s;
    agents.push_back(
        start_node(frozen_job, {.node_rank = 1, .addr = "127.0.0.2", .actions = sleepers(m_dir)}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    auto& frozen = *agents[1];
    pid_t agent = agent_of(frozen);
    ASSERT_GT(agent, 0) << "no agent process under ddprun " << frozen.pid();
    // Node 1's ddprun stops answering; its workers keep running.
    ::kill(agent, SIGSTOP);
    ::kill(frozen.pid(), SIGSTOP);

    bool detected = agents[0]->wait_exit_for(k_node_guard);
    // Thawed whatever happened, so the test never leaves a stopped process.
    ::kill(frozen.pid(), SIGCONT);
    ::kill(agent, SIGCONT);
    auto r = wait_nodes(agents);
    EXPECT_TRUE(detected && !r[0].timed_out) << "node 0 did not notice the frozen node\n"
                                             << describe_all(r);
    EXPECT_EQ(r[0].exit_code, k_rendezvous_exit) << describe_all(r);
    EXPECT_FALSE(own_lines_with(r[0].err, {"node 1"}).empty()) << describe_all(r);
    EXPECT_FALSE(r[1].timed_out) << "the thawed node did not stop\n" << describe_all(r);
    EXPECT_EQ(r[1].exit_code, k_rendezvous_exit) << describe_all(r);
}

// --- restarts -------------------------------------------------------------------

TEST_P(MultiNodeRestarts, FailureRestartsEveryNodeInTheNextRound) {
    // Round 0: every worker reports ready, then rank 2 (node 1) fails and the
    // others sleep until stopped. Round 1: everyone succeeds.
    std::vector<std::string> actions = {"env", "ready", path("r{restart}.{rank}")};
    for (int rank : {0, 1, 3}) {
        actions.insert(actions.end(), {"if-restart", "0", "if-rank", "2", "wait-file",
                                       path(fmt::format("r0.{}", rank))});
    }
    actions.insert(actions.end(), {"if-restart", "0", "if-rank", "2", "exit", "1", "if-restart",
                                   "0", "sleep", "300"});
    Job job;
    job.flags = {"--max_restarts=2"};
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);

    std::map<int, std::set<std::string>> ports_by_round;
    for (int node = 0; node < 2; ++node) {
        auto by_rank = lines_by_rank(r[static_cast<std::size_t>(node)].out);
        for (int rank : {node * 2, node * 2 + 1}) {
            SCOPED_TRACE(fmt::format("node {} rank {}", node, rank));
            auto blocks = env_blocks(by_rank[rank]);
            ASSERT_EQ(blocks.size(), 2u) << "the first round and exactly one restart\n"
                                         << describe_all(r);
            for (int round = 0; round < 2; ++round) {
                auto& e = blocks[static_cast<std::size_t>(round)];
                EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], std::to_string(round));
                EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "2");
                EXPECT_EQ(e["RANK"], std::to_string(rank));
                ports_by_round[round].insert(e["MASTER_PORT"]);
            }
        }
    }
    ASSERT_EQ(ports_by_round[0].size(), 1u) << "one MASTER_PORT per round";
    ASSERT_EQ(ports_by_round[1].size(), 1u) << "one MASTER_PORT per round";
    EXPECT_NE(*ports_by_round[0].begin(), *ports_by_round[1].begin())
        << "each round gets a fresh MASTER_PORT";
}

TEST_P(MultiNodeRestarts, ExhaustedRestartsFailEveryNodeWithTheLastFailure) {
    std::vector<std::string> actions = {"env", "if-rank", "3", "exit", "5", "sleep", "300"};
    Job job;
    job.flags = {"--max_restarts=1", "--shutdown_timeout=300"};
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{5, 5})) << describe_all(r);
    for (const auto& result : r) {
        EXPECT_TRUE(contains(ddprun_messages(result.err),
                             "root cause: rank 3 (local_rank 1, node 1, host 127.0.0.2"))
            << describe_all(r);
    }
    // Node 1's failing rank ran once per round: the first run and one restart.
    EXPECT_EQ(count_occurrences(r[1].out, "[3]: TORCHELASTIC_RESTART_COUNT="), 2u)
        << describe_all(r);
}

// --- exit barrier ---------------------------------------------------------------

TEST_P(MultiNodeBarrier, FasterNodeWaitsUntilTheOthersFinish) {
    std::string go = path("go");
    Job job;
    // Node 0's workers finish at once; node 1's wait for the test.
    bool node1_done_at_node0_exit = false;
    RunOptions node0_options;
    node0_options.after_exit = [&] {
        node1_done_at_node0_exit =
            std::filesystem::exists(path("done.2")) && std::filesystem::exists(path("done.3"));
    };
    auto actions = concat({on_ranks({2, 3}, "wait-file", go), {"ready", path("done.{rank}")}});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(
        start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}, node0_options));
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    ASSERT_TRUE(wait_workers_gone({0, 1}, 30s)) << "node 0's workers did not finish\n"
                                                << stderr_of(agents);
    // Node 0 is in the exit barrier now: it must still be there a while later
    // (a node that leaves early takes the store, or MASTER_ADDR, with it).
    EXPECT_FALSE(agents[0]->wait_exit_for(2s))
        << "node 0 exited while node 1's workers were still running";
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_TRUE(node1_done_at_node0_exit) << "node 0 exited before node 1's workers finished\n"
                                          << describe_all(r);
}

TEST_P(MultiNodeBarrier, FailureDuringTheBarrierFailsEveryNode) {
    std::string go = path("go");
    Job job;
    // Node 0's workers succeed at once; node 1's wait for the test, then rank 3 fails.
    auto actions = concat({{"ready", path("ready.{rank}")},
                           on_ranks({2, 3}, "wait-file", go),
                           on_ranks({3}, "stderr", "2"),
                           on_ranks({3}, "exit", "7")});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    ASSERT_TRUE(wait_workers_gone({0, 1}, 30s)) << "node 0's workers did not finish\n"
                                                << stderr_of(agents);
    ASSERT_TRUE(wait_for_file(path("ready.2"), 30s)) << stderr_of(agents);
    ASSERT_TRUE(wait_for_file(path("ready.3"), 30s)) << stderr_of(agents);
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{7, 7})) << describe_all(r);
    for (const auto& result : r) {
        std::string box = ddprun_messages(result.err);
        EXPECT_TRUE(contains(box, "root cause: rank 3 (local_rank 1, node 1, host 127.0.0.2"))
            << describe_all(r);
        EXPECT_TRUE(contains(box, "exit code: 7")) << describe_all(r);
        EXPECT_TRUE(contains(box, "| err 1 rank 3")) << describe_all(r);
    }
}

TEST_P(MultiNodeBarrier, BarrierTimeoutStopsEveryNode) {
    Job job;
    job.conf["exit_barrier_timeout"] = "1";
    job.flags = {"--shutdown_timeout=300"};
    // Node 0's workers succeed at once; node 1's never finish by themselves.
    auto actions = on_ranks({2, 3}, "sleep", "300");
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    for (std::size_t node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        EXPECT_FALSE(r[node].timed_out) << describe_all(r);
        EXPECT_EQ(r[node].exit_code, k_rendezvous_exit) << describe_all(r);
        EXPECT_FALSE(own_lines_with(r[node].err, {"exit_barrier_timeout"}).empty())
            << describe_all(r);
    }
}

// --- Python ---------------------------------------------------------------------

TEST_P(MultiNodePython, DdpTrainAcrossTwoAgents) {
    std::string example = k_examples_dir + "/ddp_train.py";
    if (!std::filesystem::exists(example)) GTEST_SKIP() << example << " does not exist";
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    RunOptions options;
    options.env = {{"PYTHON_EXEC", k_python}};
    Job job;
    job.guard = 100s;  // four torch imports on a shared 2-core machine
    auto r = run_nodes(job,
                       {{.node_rank = 0, .addr = "127.0.0.1", .program = {example}},
                        {.node_rank = 1, .addr = "127.0.0.2", .program = {example}}},
                       options);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_TRUE(contains(r[0].out, "[0]: ddp_train: world_size=4 ")) << describe_all(r);
}

}  // namespace
}  // namespace ddprun_it
