// The rendezvous protocol with N threads as N agents, over MemoryStore (and
// once over the real TCPStore): who gets which node rank, that every agent
// fails together and names the culprit when the nodes disagree or do not all
// come, that the first failure is the one every node reports, that whatever
// garbage sits under our keys becomes a clear error, and that an agent's store
// operations do not grow with the number of nodes.
#include "ddprun/rendezvous/rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include "ddprun/plan/rank_plan.hpp"
#include "support/free_port.hpp"
#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using JoinResult = std::expected<RoundMembership, Error>;

// See test_store.cpp: the plugin is in the build directory's root.
[[maybe_unused]] const bool k_plugin_path_set = [] {
    std::error_code error;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
    if (error) return false;
    auto plugin = exe.parent_path().parent_path() / k_store_plugin_name;
    if (!std::filesystem::exists(plugin)) return false;
    return ::setenv("DDPRUN_STORE_PLUGIN", plugin.c_str(), 0) == 0;
}();

Fingerprint job(int nnodes) {
    return Fingerprint{nnodes, "./train --lr 0.1", 0, "job", "0.1.0"};
}

NodeInfo node(int nnodes, int node_rank = -1, int nproc = 2) {
    NodeInfo info;
    info.node_rank = node_rank;
    info.host = node_rank >= 0 ? "host" + std::to_string(node_rank) : "host";
    info.addr = "10.0.0.1";
    info.nproc = nproc;
    info.pid = 1000 + std::max(node_rank, 0);
    info.fingerprint = job(nnodes);
    return info;
}

struct Agent {
    NodeInfo me;
    bool is_store_host = false;
};

struct AgentResult {
    JoinResult joined;
    int ops = 0;
    std::size_t bytes = 0;
};

// Runs every agent's join on its own thread with its own connection.
std::vector<AgentResult> join_all(Store& store, const std::vector<Agent>& agents,
                                  std::chrono::milliseconds timeout = 20s, int round = 0) {
    std::vector<AgentResult> results(agents.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < agents.size(); ++i) {
        threads.emplace_back([&, i, connection = store.clone()]() mutable {
            CountingStore counting(std::move(connection));
            Rendezvous rendezvous(counting, "job");
            results[i].joined =
                rendezvous.join(round, agents[i].me, agents[i].is_store_host, timeout);
            results[i].ops = counting.ops();
            results[i].bytes = counting.bytes();
        });
    }
    for (auto& thread : threads) thread.join();
    return results;
}

// nnodes agents without --node_rank, agent 0 hosting the store.
std::vector<Agent> unranked(int nnodes, int nproc = 2) {
    std::vector<Agent> agents;
    for (int i = 0; i < nnodes; ++i) {
        Agent agent{node(nnodes, -1, nproc), i == 0};
        agent.me.host = "host" + std::to_string(i);
        agent.me.pid = 1000 + i;
        agent.me.addr = "10.0.0." + std::to_string(i + 1);
        if (i == 0) agent.me.master_port = 29500;
        agents.push_back(agent);
    }
    return agents;
}

std::string error_of(const AgentResult& result) {
    return result.joined ? std::string("(joined)") : result.joined.error().message;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------
// Joining

TEST(RendezvousJoin, AssignsRanksWithTheStoreHostAsNodeZero) {
    auto store = make_memory_store(20s);
    auto agents = unranked(5);
    auto results = join_all(*store, agents);
    std::set<int> ranks;
    for (std::size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].joined) << error_of(results[i]);
        const RoundMembership& m = *results[i].joined;
        ranks.insert(m.node_rank);
        EXPECT_EQ(m.master_addr, "10.0.0.1");
        EXPECT_EQ(m.master_port, 29500);
        EXPECT_EQ(m.nproc_per_node, std::vector<int>(5, 2));
    }
    EXPECT_EQ(results[0].joined->node_rank, 0);
    EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4}));
}

TEST(RendezvousJoin, GivenRanksAreKept) {
    auto store = make_memory_store(20s);
    std::vector<Agent> agents;
    for (int rank : {2, 0, 3, 1}) agents.push_back({node(4, rank), rank == 2});
    auto results = join_all(*store, agents);
    for (std::size_t i = 0; i < agents.size(); ++i) {
        ASSERT_TRUE(results[i].joined) << error_of(results[i]);
        EXPECT_EQ(results[i].joined->node_rank, agents[i].me.node_rank);
        EXPECT_EQ(results[i].joined->master_addr, "10.0.0.1");
    }
}

TEST(RendezvousJoin, NodesMayRunDifferentNumbersOfWorkers) {
    auto store = make_memory_store(20s);
    std::vector<Agent> agents;
    const std::vector<int> nproc = {4, 1, 3, 2};
    for (int rank = 0; rank < 4; ++rank)
        agents.push_back({node(4, rank, nproc[static_cast<std::size_t>(rank)]), rank == 0});
    auto results = join_all(*store, agents);
    for (const auto& result : results) {
        ASSERT_TRUE(result.joined) << error_of(result);
        EXPECT_EQ(result.joined->nproc_per_node, nproc);
    }
    const auto& counts = results[0].joined->nproc_per_node;
    EXPECT_EQ(rank_offset(counts, 0), 0);
    EXPECT_EQ(rank_offset(counts, 1), 4);
    EXPECT_EQ(rank_offset(counts, 2), 5);
    EXPECT_EQ(rank_offset(counts, 3), 8);
}

// A fixed-size job's membership says how many workers each node runs as runs of
// equal counts (what a node needs for its ranks' offset and the world size).
TEST(RendezvousJoin, TheMembershipListsWorkersPerNodeAsRuns) {
    NodeInfo me = node(6, 4);
    auto parsed = parse_round_result(
        R"({"kind":"membership","round":0,"restarts":0,"change":"","master_addr":"a",)"
        R"("master_port":1,"nnodes":6,"program":"p","max_restarts":0,"run_id":"job",)"
        R"("version":"v","nproc_runs":[[2,2],[1,3],[3,1]]})",
        "result", "job", 0, me);
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(parsed->nproc_per_node, (std::vector<int>{2, 2, 1, 1, 1, 3}));
    EXPECT_EQ(parsed->node_rank, 4);
}

TEST(RendezvousJoin, SingleNode) {
    auto store = make_memory_store(5s);
    auto results = join_all(*store, unranked(1));
    ASSERT_TRUE(results[0].joined) << error_of(results[0]);
    EXPECT_EQ(results[0].joined->node_rank, 0);
}

TEST(RendezvousJoin, RoundsAreIndependent) {
    auto store = make_memory_store(20s);
    ASSERT_TRUE(join_all(*store, unranked(3), 20s, 0)[1].joined);
    auto again = join_all(*store, unranked(3), 20s, 1);
    for (const auto& result : again) {
        ASSERT_TRUE(result.joined) << error_of(result);
        EXPECT_EQ(result.joined->round, 1);
    }
}

TEST(RendezvousJoin, DuplicateRankFailsBothAgentsNamingBothHosts) {
    auto store = make_memory_store(20s);
    std::vector<Agent> agents = {{node(3, 0), true}, {node(3, 1), false}, {node(3, 1), false}};
    agents[1].me.host = "alpha";
    agents[2].me.host = "beta";
    auto start = std::chrono::steady_clock::now();
    auto results = join_all(*store, agents, 60s);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "did not fail fast";
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        EXPECT_EQ(result.joined.error().exit_code, exit_code::kRendezvous);
        const std::string& message = result.joined.error().message;
        EXPECT_TRUE(contains(message, "node rank 1")) << message;
        EXPECT_TRUE(contains(message, "alpha")) << message;
        EXPECT_TRUE(contains(message, "beta")) << message;
        EXPECT_TRUE(contains(message, "--node_rank")) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
}

TEST(RendezvousJoin, RankOutOfRange) {
    auto store = make_memory_store(5s);
    auto results = join_all(*store, {{node(2, 5), false}}, 1s);
    ASSERT_FALSE(results[0].joined);
    EXPECT_TRUE(contains(results[0].joined.error().message, "--node_rank=5"))
        << error_of(results[0]);
}

TEST(RendezvousJoin, TooManyUnrankedAgents) {
    auto store = make_memory_store(5s);
    // The extra agent is told; the others, already complete, are not stopped.
    ASSERT_TRUE(join_all(*store, unranked(2))[1].joined);
    Agent extra{node(2), false};
    extra.me.host = "extra";
    auto results = join_all(*store, {extra}, 1s);
    ASSERT_FALSE(results[0].joined);
    EXPECT_TRUE(contains(error_of(results[0]), "more agents than --nnodes=2"))
        << error_of(results[0]);
}

struct MismatchCase {
    const char* field;  // as the message names it
    std::function<void(Fingerprint&)> change;
    const char* ours;
    const char* theirs;
};

TEST(RendezvousJoin, FingerprintMismatchStopsEveryAgentNamingFieldValuesAndNodes) {
    const MismatchCase cases[] = {
        {"nnodes", [](Fingerprint& f) { f.nnodes = 7; }, "4", "7"},
        {"program and arguments", [](Fingerprint& f) { f.program = "./train --lr 0.2"; },
         "'./train --lr 0.1'", "'./train --lr 0.2'"},
        {"max_restarts", [](Fingerprint& f) { f.max_restarts = 3; }, "0", "3"},
        {"run id", [](Fingerprint& f) { f.run_id = "other"; }, "'job'", "'other'"},
        {"ddprun version", [](Fingerprint& f) { f.version = "9.9.9"; }, "'0.1.0'", "'9.9.9'"},
    };
    for (const auto& c : cases) {
        auto store = make_memory_store(20s);
        std::vector<Agent> agents;
        for (int rank = 0; rank < 4; ++rank) agents.push_back({node(4, rank), rank == 0});
        c.change(agents[2].me.fingerprint);
        auto results = join_all(*store, agents);
        for (const auto& result : results) {
            ASSERT_FALSE(result.joined) << c.field;
            const std::string& message = result.joined.error().message;
            EXPECT_EQ(result.joined.error().exit_code, exit_code::kRendezvous);
            EXPECT_TRUE(contains(message, std::string(c.field) + " differ")) << message;
            // nnodes is checked by every node against node 0 too, whichever sees it first.
            std::string ours_on =
                std::string(c.field) == "nnodes" ? " on node" : " on nodes 0-1, 3";
            EXPECT_TRUE(contains(message, std::string(c.ours) + ours_on)) << message;
            EXPECT_TRUE(contains(message, std::string(c.theirs) + " on node 2")) << message;
            EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        }
    }
}

// Whoever expects more nodes would wait for ever: both fail at once instead.
TEST(RendezvousJoin, DisagreeingOnTheNumberOfNodesFailsFast) {
    for (auto [zero, one] : {std::pair{3, 2}, std::pair{2, 3}}) {
        auto store = make_memory_store(20s);
        std::vector<Agent> agents = {{node(zero, 0), true}, {node(one, 1), false}};
        auto start = std::chrono::steady_clock::now();
        auto results = join_all(*store, agents, 60s);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "did not fail fast";
        for (const auto& result : results) {
            ASSERT_FALSE(result.joined);
            EXPECT_TRUE(
                contains(error_of(result),
                         fmt::format("nnodes differ: {} on node 0, {} on node 1", zero, one)))
                << error_of(result);
        }
    }
}

TEST(RendezvousJoin, TimeoutNamesTheRanksThatNeverJoined) {
    auto store = make_memory_store(20s);
    std::vector<Agent> agents = {{node(5, 0), true}, {node(5, 2), false}, {node(5, 3), false}};
    auto results = join_all(*store, agents, 300ms);
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        const std::string& message = result.joined.error().message;
        EXPECT_EQ(result.joined.error().exit_code, exit_code::kRendezvous);
        EXPECT_TRUE(contains(message, "timed out")) << message;
        EXPECT_TRUE(contains(message, "nodes 1, 4 never joined (3 of 5 joined)")) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
}

TEST(RendezvousJoin, TimeoutWithAssignedRanks) {
    auto store = make_memory_store(20s);
    auto agents = unranked(4);
    agents.pop_back();
    auto results = join_all(*store, agents, 300ms);
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        EXPECT_TRUE(contains(error_of(result), "node 3 never joined (3 of 4 joined)"))
            << error_of(result);
    }
}

TEST(RendezvousJoin, TimeoutWithoutNodeZero) {
    auto store = make_memory_store(20s);
    auto results = join_all(*store, {{node(2, 1), false}}, 200ms);
    ASSERT_FALSE(results[0].joined);
    EXPECT_TRUE(contains(error_of(results[0]), "node 0 never joined")) << error_of(results[0]);
}

// A long join says every interval who is missing, on every agent (node 0 reads
// the records, the others read what it published), and never waits longer than
// the interval in one store call.
TEST(RendezvousJoin, WaitingAgentsSayWhoIsMissing) {
    auto store = make_memory_store(20s);
    std::vector<Agent> agents = {{node(4, 0), true}, {node(4, 2), false}};
    std::vector<std::vector<std::string>> lines(agents.size());
    std::vector<std::thread> threads;
    std::mutex mutex;
    for (std::size_t i = 0; i < agents.size(); ++i) {
        threads.emplace_back([&, i, connection = store->clone()]() mutable {
            Rendezvous rendezvous(*connection, "job");
            rendezvous.set_join_progress(100ms, [&, i](const std::string& line) {
                std::lock_guard lock(mutex);
                lines[i].push_back(line);
            });
            auto joined = rendezvous.join(0, agents[i].me, agents[i].is_store_host, 1050ms);
            EXPECT_FALSE(joined);
        });
    }
    for (auto& thread : threads) thread.join();
    for (std::size_t i = 0; i < agents.size(); ++i) {
        SCOPED_TRACE(fmt::format("agent {}", i));
        // Ten intervals fit in the timeout: at least a few lines, never a flood.
        ASSERT_GE(lines[i].size(), 3u);
        EXPECT_LE(lines[i].size(), 10u);
        const std::string& last = lines[i].back();
        EXPECT_TRUE(contains(last, "waiting for nodes 1, 3 (2 of 4 joined, ")) << last;
        EXPECT_TRUE(contains(last, " s of 1 s)")) << last;
    }
}

TEST(RendezvousJoin, WaitingForNodeZeroSaysSo) {
    auto store = make_memory_store(20s);
    std::vector<std::string> lines;
    Rendezvous rendezvous(*store, "job");
    rendezvous.set_join_progress(50ms, [&](const std::string& line) { lines.push_back(line); });
    EXPECT_FALSE(rendezvous.join(0, node(2, 1), false, 300ms));
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(
        contains(lines.front(), "waiting for node 0, the store's host, to join (0 s of 0 s)"))
        << lines.front();
}

// On etcd nobody hosts the store: the line does not say so.
TEST(RendezvousJoin, WaitingForNodeZeroOfAnUnhostedStoreSaysNoHost) {
    auto store = make_memory_store(20s);
    std::vector<std::string> lines;
    Rendezvous rendezvous(*store, "job");
    rendezvous.set_join_progress(50ms, [&](const std::string& line) { lines.push_back(line); });
    EXPECT_FALSE(rendezvous.join(0, node(2, 1), false, 300ms, false));
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(contains(lines.front(), "waiting for node 0 to join (0 s of 0 s)"))
        << lines.front();
}

TEST(RendezvousJoin, AbortStopsAgentsStillJoining) {
    auto store = make_memory_store(20s);
    std::thread aborter([connection = store->clone()] {
        std::this_thread::sleep_for(100ms);
        Rendezvous(*connection, "job").abort(0, 3, "ddprun on host9 got SIGTERM", 143);
    });
    auto results = join_all(*store, {{node(3, 0), true}, {node(3, 1), false}}, 60s);
    aborter.join();
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        EXPECT_EQ(error_of(result), "ddprun on host9 got SIGTERM");
        EXPECT_EQ(result.joined.error().exit_code, 143);
    }
}

// Another job's node 0 aborts this job's round (a run id mismatch): node 0
// never joins, and the agents waiting for it must not wait for join_timeout.
TEST(RendezvousJoin, AbortReachesAgentsWaitingForNodeZero) {
    auto store = make_memory_store(20s);
    std::thread aborter([connection = store->clone()] {
        std::this_thread::sleep_for(100ms);
        Rendezvous(*connection, "job").abort(0, 3, "the run id differs", 75);
    });
    auto start = std::chrono::steady_clock::now();
    auto results = join_all(*store, {{node(3, 1), false}, {node(3, 2), false}}, 60s);
    aborter.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "waited for the join timeout";
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        EXPECT_EQ(error_of(result), "the run id differs");
    }
}

// Node 0 reads every node's record once; every other agent's cost is the
// same for 3 nodes as for 64, in operations and in bytes: the membership it
// reads does not list the nodes (a list would make a join's bytes grow as N^2).
// The agent whose add completes the count makes one operation more (it tells
// node 0): the figures compared are the other agents'.
TEST(RendezvousJoin, StoreOperationsPerAgentDoNotGrowWithNodes) {
    std::map<int, int> others_ops;
    std::map<int, std::size_t> others_bytes;
    for (int nnodes : {3, 8, 64}) {
        auto store = make_memory_store(60s);
        auto results = join_all(*store, unranked(nnodes), 60s);
        int node0_ops = 0, max_ops = 0;
        others_ops[nnodes] = INT_MAX;
        others_bytes[nnodes] = SIZE_MAX;
        for (const auto& result : results) {
            ASSERT_TRUE(result.joined) << error_of(result);
            if (result.joined->node_rank == 0) {
                node0_ops = result.ops;
                continue;
            }
            others_ops[nnodes] = std::min(others_ops[nnodes], result.ops);
            others_bytes[nnodes] = std::min(others_bytes[nnodes], result.bytes);
            max_ops = std::max(max_ops, result.ops);
        }
        EXPECT_LE(max_ops, others_ops[nnodes] + 1) << nnodes << " nodes";
        EXPECT_LE(max_ops, 9) << nnodes << " nodes";
        EXPECT_LE(node0_ops, nnodes + 12) << nnodes << " nodes";
    }
    EXPECT_EQ(others_ops[3], others_ops[64]);
    EXPECT_EQ(others_ops[8], others_ops[64]);
    // Only numbers in keys and records get longer ("info/63", "nnodes":64).
    EXPECT_LE(others_bytes[64], others_bytes[3] + 32);
}

// ---------------------------------------------------------------------------
// Garbage under our keys

struct GarbageCase {
    const char* name;
    const char* key;  // under ddprun/job/r0/
    const char* value;
    const char* says;
};

TEST(RendezvousJoin, MalformedRecordsGiveOneClearLine) {
    const GarbageCase cases[] = {
        {"result not JSON", "result", "garbage{", "not JSON"},
        {"result not ours", "result", R"({"kind":"party","run_id":"job"})", "neither a membership"},
        {"result of no run", "result", R"({"kind":"membership","nproc":[1,1]})",
         "field 'run_id' is missing"},
        {"result of another run", "result", R"({"kind":"abort","run_id":"job-b"})",
         "it is run 'job-b''s, not this run's ('job')"},
        {"result membership without fingerprint", "result",
         R"({"kind":"membership","run_id":"job","nproc_runs":[[1,2]]})",
         "field 'nnodes' is missing"},
        {"result membership of strings", "result",
         R"({"kind":"membership","nproc_runs":[["a",2]],"nnodes":2,"program":"p",)"
         R"("max_restarts":0,"run_id":"job","version":"v","master_addr":"h","master_port":1,"change":""})",
         "field 'nproc_runs' holds something other than pairs of integers"},
        {"result membership with no workers", "result",
         R"({"kind":"membership","nproc_runs":[[0,2]],"nnodes":2,"program":"p",)"
         R"("max_restarts":0,"run_id":"job","version":"v","master_addr":"h","master_port":1,"change":""})",
         "field 'nproc_runs' holds [0,2], out of range"},
        {"result membership of the old kind", "result",
         R"({"kind":"membership","nproc":[1,1],"nnodes":2,"program":"p",)"
         R"("max_restarts":0,"run_id":"job","version":"v","master_addr":"h","master_port":1,"change":""})",
         "neither a membership nor an abort"},
        {"result abort without message", "result", R"({"kind":"abort","run_id":"job"})",
         "field 'message'"},
        {"result abort with a blank message", "result",
         R"({"kind":"abort","run_id":"job","message":"\n ","exit_code":75})",
         "field 'message' is empty"},
        {"deep nesting", "result", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "nested too deeply"},
    };
    for (const auto& c : cases) {
        auto store = make_memory_store(5s);
        std::string key = std::string("ddprun/job/r0/") + c.key;
        store->set(key, c.value);
        auto results = join_all(*store, unranked(2), 2s);
        for (const auto& result : results) {
            ASSERT_FALSE(result.joined) << c.name;
            const std::string& message = result.joined.error().message;
            EXPECT_TRUE(contains(message, "malformed record under '" + key + "'")) << message;
            EXPECT_TRUE(contains(message, c.says)) << c.name << ": " << message;
            EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        }
    }
}

// The store refuses an agent's join (a counter that is not a number): every
// agent fails with that agent's line, at once, rather than node 0 waiting for it.
TEST(RendezvousJoin, AStoreThatRefusesOneAgentEndsTheJoinForAll) {
    auto store = make_memory_store(5s);
    store->set("ddprun/job/r0/joined", "garbage");
    auto results = join_all(*store, unranked(2), 60s);
    for (const auto& result : results) {
        ASSERT_FALSE(result.joined);
        EXPECT_TRUE(contains(error_of(result), "cannot add to 'ddprun/job/r0/joined'"))
            << error_of(result);
        EXPECT_EQ(result.joined.error().exit_code, exit_code::kRendezvous);
    }
}

// A stray client joins as node 1 with a record that is not one.
TEST(RendezvousJoin, MalformedNodeRecordIsReportedByEveryAgent) {
    const std::pair<const char*, const char*> cases[] = {
        {"{not json", "not JSON"},
        {R"({"node_rank":1})", "field 'host' is missing"},
        {R"({"node_rank":"one"})", "field 'node_rank' is not an integer"},
        {R"({"node_rank":0,"host":"h","addr":"a","nproc":1,"master_port":0,"pid":1,)"
         R"("agent_id":"x","nnodes":2,"program":"p","max_restarts":0,"run_id":"job",)"
         R"("version":"v"})",
         "record of node rank 0"},
        {R"({"node_rank":1,"host":"h","addr":"a","nproc":0,"master_port":0,"pid":1,)"
         R"("agent_id":"x","nnodes":2,"program":"p","max_restarts":0,"run_id":"job",)"
         R"("version":"v"})",
         "field 'nproc' is 0, out of range"},
    };
    for (const auto& [value, says] : cases) {
        auto store = make_memory_store(5s);
        store->compare_set("ddprun/job/r0/claim/1", "", "stray");
        store->set("ddprun/job/r0/info/1", value);
        store->add("ddprun/job/r0/joined", 1);
        store->set("ddprun/job/r0/joined/1", "{}");
        auto results = join_all(*store, {{node(2, 0), true}}, 2s);
        ASSERT_FALSE(results[0].joined);
        const std::string& message = results[0].joined.error().message;
        EXPECT_TRUE(contains(message, "malformed record under 'ddprun/job/r0/info/1'")) << message;
        EXPECT_TRUE(contains(message, says)) << message;
        // And so would the stray agent, had it been one: the round's result says so.
        EXPECT_TRUE(contains(store->get("ddprun/job/r0/result"), "malformed")) << value;
    }
}

TEST(RendezvousJoin, UnreadableClaimIsStillADuplicate) {
    auto store = make_memory_store(5s);
    store->compare_set("ddprun/job/r0/claim/1", "", "\x01garbage");
    auto results = join_all(*store, {{node(2, 1), false}}, 2s);
    ASSERT_FALSE(results[0].joined);
    EXPECT_TRUE(contains(error_of(results[0]), "node rank 1 is claimed by two agents"))
        << error_of(results[0]);
}

// A second job under the run id of one that ended (over etcd a run's keys outlive
// it): every agent says so in one line, with ranks assigned or given, and leaves
// the old records alone.
TEST(RendezvousJoin, ARoundThatAlreadyEndedIsNotJoined) {
    auto store = make_memory_store(5s);
    auto first = join_all(*store, unranked(2), 5s);
    for (const auto& result : first) ASSERT_TRUE(result.joined) << error_of(result);
    Rendezvous(*store, "job").publish_finished(0, 1);  // the stop of a 1-of-1 count: Done
    const std::string result_before = store->get("ddprun/job/r0/result");
    for (const auto& agents :
         {unranked(2), std::vector<Agent>{{node(2, 0), false}, {node(2, 1), false}}}) {
        auto again = join_all(*store, agents, 5s);
        for (const auto& result : again) {
            ASSERT_FALSE(result.joined);
            EXPECT_EQ(error_of(result),
                      "rendezvous: round 0 of run 'job' already ran and ended (its records are "
                      "still in the store, e.g. an earlier job's with the same --rdzv_id): give "
                      "this job its own --rdzv_id");
        }
    }
    EXPECT_EQ(store->get("ddprun/job/r0/result"), result_before);
}

// ---------------------------------------------------------------------------
// Progress at a hang: every node's ranks, shared through the store

TEST(RendezvousProgress, EveryNodeReadsTheOthersRanks) {
    auto store = make_memory_store(5s);
    Rendezvous node0(*store, "job"), node1(*store, "job");
    node0.publish_progress(0, 0, {{0, 0, 100, 9000, "step 5", false}});
    node1.publish_progress(0, 1, {{2, 1, 3100, 9000, "step 4", true}, {3, 1, 90, 9000, "", false}});
    auto seen = node0.read_progress(0, 2, 0, 1s);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], (RankProgress{2, 1, 3100, 9000, "step 4", true}));
    EXPECT_EQ(seen[1], (RankProgress{3, 1, 90, 9000, "", false}));
    EXPECT_EQ(node1.read_progress(0, 2, 1, 1s).size(), 1u);
}

// A node that never shares (dead, or slower than the bound) is left out; so is a
// record another program wrote, with one warning: never an exception.
TEST(RendezvousProgress, MissingOrMalformedRecordsAreLeftOut) {
    auto store = make_memory_store(5s);
    Rendezvous node0(*store, "job");
    store->set("ddprun/job/r0/progress/1", "{not json");
    store->set("ddprun/job/r0/progress/2", R"({"run_id":"other","ranks":[]})");
    store->set("ddprun/job/r0/progress/3",
               R"({"run_id":"job","ranks":[{"rank":-4,"node_rank":3,"silent_ms":1,)"
               R"("running_ms":1,"label":"x","hung":false}]})");
    Rendezvous(*store, "job").publish_progress(0, 4, {{9, 4, 1, 1, "ok", false}});
    const auto start = std::chrono::steady_clock::now();
    auto seen = node0.read_progress(0, 6, 0, 200ms);  // node 5 never shares
    EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].rank, 9);
}

// ---------------------------------------------------------------------------
// Records

TEST(RendezvousRecords, NodeInfoRoundTrips) {
    NodeInfo info = node(3, 2, 5);
    info.agent_id = "a-1";
    info.master_port = 1234;
    auto parsed = parse_node_info(to_json(info));
    ASSERT_TRUE(parsed) << parsed.error();
    EXPECT_EQ(parsed->node_rank, 2);
    EXPECT_EQ(parsed->host, info.host);
    EXPECT_EQ(parsed->addr, info.addr);
    EXPECT_EQ(parsed->nproc, 5);
    EXPECT_EQ(parsed->master_port, 1234);
    EXPECT_EQ(parsed->pid, info.pid);
    EXPECT_EQ(parsed->agent_id, "a-1");
    EXPECT_EQ(parsed->fingerprint, info.fingerprint);
}

TEST(RendezvousRecords, FailureRecordRoundTripsAndIsCapped) {
    FailureRecord record;
    record.kind = FailureKind::Signal;
    record.node_rank = 1;
    record.host = "b";
    record.rank = 3;
    record.local_rank = 1;
    record.pid = 4242;
    record.exit_code = 139;
    record.signal = 11;
    record.time_ms = 1'790'000'000'000;
    record.message = "Segmentation fault";
    record.stopped_by_ddprun = true;
    for (int i = 0; i < 30; ++i) record.stderr_tail.push_back("line " + std::to_string(i));
    record.stderr_tail.back() = std::string(2000, 'x');
    auto parsed = parse_failure_record(to_json(record));
    ASSERT_TRUE(parsed) << parsed.error();
    EXPECT_EQ(parsed->kind, FailureKind::Signal);
    EXPECT_TRUE(parsed->stopped_by_ddprun);
    EXPECT_EQ(parsed->node_rank, 1);
    EXPECT_EQ(parsed->host, "b");
    EXPECT_EQ(parsed->rank, 3);
    EXPECT_EQ(parsed->local_rank, 1);
    EXPECT_EQ(parsed->pid, 4242);
    EXPECT_EQ(parsed->exit_code, 139);
    EXPECT_EQ(parsed->signal, 11);
    EXPECT_EQ(parsed->time_ms, record.time_ms);
    EXPECT_EQ(parsed->message, "Segmentation fault");
    ASSERT_EQ(parsed->stderr_tail.size(), 20u);
    EXPECT_EQ(parsed->stderr_tail.front(), "line 10");
    EXPECT_LE(parsed->stderr_tail.back().size(), 510u);
}

TEST(RendezvousRecords, EveryFailureKindRoundTrips) {
    for (auto kind : {FailureKind::Worker, FailureKind::NodeLost, FailureKind::Signal,
                      FailureKind::Mismatch, FailureKind::StoreLost}) {
        FailureRecord record;
        record.kind = kind;
        auto parsed = parse_failure_record(to_json(record));
        ASSERT_TRUE(parsed) << parsed.error();
        EXPECT_EQ(parsed->kind, kind) << to_string(kind);
    }
}

TEST(RendezvousRecords, StoreLostIsARendezvousFailure) {
    StopEvent lost = store_lost("rendezvous store at node0:29400: Connection reset by peer");
    EXPECT_EQ(lost.kind, StopEvent::Kind::StoreLost);
    EXPECT_EQ(lost.exit_code, exit_code::kRendezvous);
    EXPECT_EQ(lost.message, "rendezvous store at node0:29400: Connection reset by peer");
}

// A store whose every call fails as a dropped connection does.
class LostStore final : public Store {
  public:
    explicit LostStore(StoreError::Kind kind) : m_kind(kind) {}
    void set(const std::string&, const std::string&) override { fail(); }
    std::string get(const std::string&) override { fail(); }
    std::int64_t add(const std::string&, std::int64_t) override { fail(); }
    std::string compare_set(const std::string&, const std::string&, const std::string&) override {
        fail();
    }
    bool check(const std::vector<std::string>&) override { fail(); }
    void wait(const std::vector<std::string>&, std::chrono::milliseconds) override { fail(); }
    std::unique_ptr<Store> clone() override { return std::make_unique<LostStore>(m_kind); }

  private:
    [[noreturn]] void fail() { throw StoreError(m_kind, "store gone"); }
    StoreError::Kind m_kind;
};

TEST(RendezvousStop, AStoreErrorOtherThanATimeoutIsAStoreLost) {
    for (auto kind : {StoreError::Kind::Connection, StoreError::Kind::Other}) {
        LostStore store(kind);
        StopEvent seen = Rendezvous(store, "job").wait_stop(0, 1s);
        EXPECT_EQ(seen.kind, StopEvent::Kind::StoreLost);
        EXPECT_EQ(seen.exit_code, exit_code::kRendezvous);
        EXPECT_EQ(seen.message, "store gone");
    }
    LostStore timing_out(StoreError::Kind::Timeout);
    StopEvent seen = Rendezvous(timing_out, "job").wait_stop(0, 1s);
    EXPECT_EQ(seen.kind, StopEvent::Kind::Timeout);
    EXPECT_EQ(seen.exit_code, 0);
}

TEST(RendezvousRecords, GarbageNeverThrows) {
    const std::pair<const char*, const char*> cases[] = {
        {"", "empty"},
        {"{", "not JSON"},
        {"[]", "not a JSON object"},
        {"null", "not a JSON object"},
        {"{}", "is missing"},
        {R"({"kind":"worker","node_rank":1e400})", "not JSON"},
        {R"({"kind":"worker","node_rank":99999999999999999999})", "node_rank"},
        {R"({"kind":"worker","node_rank":-5})", "out of range"},
        {R"({"kind":"worker","node_rank":1.5})", "not an integer"},
        {R"({"kind":"nope","node_rank":0,"host":"","rank":0,"local_rank":0,"pid":0,)"
         R"("exit_code":1,"signal":0,"time_ms":0,"message":"","stderr_tail":[],"stopped":false})",
         "not a known failure kind"},
        {R"({"kind":"worker","node_rank":0,"host":"","rank":0,"local_rank":0,"pid":0,)"
         R"("exit_code":1,"signal":0,"time_ms":0,"message":"","stderr_tail":[],"stopped":1})",
         "field 'stopped' is not true or false"},
        {R"({"kind":"worker","node_rank":0,"host":"","rank":0,"local_rank":0,"pid":0,)"
         R"("exit_code":1,"signal":0,"time_ms":0,"message":"","stderr_tail":[1]})",
         "stderr_tail"},
        {R"({"kind":"worker","node_rank":0,"host":"","rank":0,"local_rank":0,"pid":0,)"
         R"("exit_code":300,"signal":0,"time_ms":0,"message":"","stderr_tail":[]})",
         "exit_code"},
    };
    for (const auto& [text, says] : cases) {
        std::expected<FailureRecord, std::string> failure;
        std::expected<NodeInfo, std::string> info;
        ASSERT_NO_THROW(failure = parse_failure_record(text)) << text;
        ASSERT_NO_THROW(info = parse_node_info(text)) << text;
        ASSERT_FALSE(failure) << text;
        EXPECT_FALSE(info) << text;
        EXPECT_TRUE(contains(failure.error(), says)) << text << ": " << failure.error();
    }
    std::string deep(100000, '[');
    EXPECT_FALSE(parse_failure_record(deep));
    EXPECT_FALSE(parse_node_info(deep));
}

// ---------------------------------------------------------------------------
// The end of a round

// `n` connections to one store, as n agents after a successful join.
struct Round {
    explicit Round(int n) : store(make_memory_store(20s)) {
        for (int i = 0; i < n; ++i) connections.push_back(store->clone());
        for (auto& connection : connections) agents.emplace_back(*connection, "job");
    }
    std::unique_ptr<Store> store;
    std::vector<std::unique_ptr<Store>> connections;
    std::vector<Rendezvous> agents;
};

FailureRecord worker_failure(int node_rank, int exit_code) {
    FailureRecord record;
    record.node_rank = node_rank;
    record.host = "host" + std::to_string(node_rank);
    record.rank = node_rank * 2;
    record.local_rank = 0;
    record.exit_code = exit_code;
    record.message = "exit " + std::to_string(exit_code);
    record.stderr_tail = {"Traceback", "RuntimeError: boom"};
    return record;
}

TEST(RendezvousStop, FirstFailureWinsEverywhere) {
    Round round(4);
    std::vector<StopEvent> published(4);
    std::vector<std::thread> threads;
    for (int i = 1; i < 4; ++i) {
        threads.emplace_back([&, i] {
            published[static_cast<std::size_t>(i)] =
                round.agents[static_cast<std::size_t>(i)].publish_failure(
                    0, worker_failure(i, 10 + i));
        });
    }
    for (auto& thread : threads) thread.join();
    StopEvent seen = round.agents[0].wait_stop(0, 5s);
    ASSERT_EQ(seen.kind, StopEvent::Kind::Failure) << seen.message;
    EXPECT_EQ(seen.exit_code, seen.failure.exit_code);
    EXPECT_EQ(seen.failure.stderr_tail,
              (std::vector<std::string>{"Traceback", "RuntimeError: boom"}));
    for (int i = 1; i < 4; ++i) {
        const StopEvent& mine = published[static_cast<std::size_t>(i)];
        ASSERT_EQ(mine.kind, StopEvent::Kind::Failure);
        EXPECT_EQ(mine.failure.node_rank, seen.failure.node_rank);
        EXPECT_EQ(mine.exit_code, seen.exit_code);
    }
    // A later failure does not replace the root cause.
    StopEvent late = round.agents[0].publish_failure(0, worker_failure(0, 99));
    EXPECT_EQ(late.failure.node_rank, seen.failure.node_rank);
}

TEST(RendezvousStop, WaitStopWakesWhenAFailureIsPublished) {
    Round round(2);
    StopEvent seen;
    std::thread waiter([&] { seen = round.agents[0].wait_stop(0, 20s); });
    std::this_thread::sleep_for(50ms);
    round.agents[1].publish_failure(0, worker_failure(1, 3));
    waiter.join();
    ASSERT_EQ(seen.kind, StopEvent::Kind::Failure) << seen.message;
    EXPECT_EQ(seen.exit_code, 3);
    EXPECT_EQ(seen.failure.host, "host1");
}

TEST(RendezvousStop, WaitStopTimesOut) {
    Round round(1);
    StopEvent seen = round.agents[0].wait_stop(0, 50ms);
    EXPECT_EQ(seen.kind, StopEvent::Kind::Timeout);
}

TEST(RendezvousStop, ExitBarrierEndsTheRoundOnce) {
    Round round(3);
    EXPECT_FALSE(round.agents[0].publish_finished(0, 3));
    EXPECT_EQ(round.agents[0].wait_stop(0, 10ms).kind, StopEvent::Kind::Timeout);
    EXPECT_FALSE(round.agents[2].publish_finished(0, 3));
    EXPECT_TRUE(round.agents[1].publish_finished(0, 3));
    for (auto& agent : round.agents) {
        StopEvent seen = agent.wait_stop(0, 1s);
        EXPECT_EQ(seen.kind, StopEvent::Kind::Done);
        EXPECT_EQ(seen.exit_code, 0);
    }
    // Too late to fail the round.
    EXPECT_EQ(round.agents[0].publish_failure(0, worker_failure(0, 1)).kind, StopEvent::Kind::Done);
}

TEST(RendezvousStop, FailureDuringTheBarrierFailsEveryNode) {
    Round round(3);
    EXPECT_FALSE(round.agents[0].publish_finished(0, 3));
    EXPECT_FALSE(round.agents[1].publish_finished(0, 3));
    round.agents[2].publish_failure(0, worker_failure(2, 7));
    for (auto& agent : round.agents) {
        StopEvent seen = agent.wait_stop(0, 1s);
        ASSERT_EQ(seen.kind, StopEvent::Kind::Failure);
        EXPECT_EQ(seen.exit_code, 7);
    }
}

TEST(RendezvousStop, AbortAfterJoinStopsTheRound) {
    Round round(2);
    round.agents[1].abort(0, 2, "ddprun on host1 was interrupted", 130);
    StopEvent seen = round.agents[0].wait_stop(0, 1s);
    EXPECT_EQ(seen.kind, StopEvent::Kind::Abort);
    EXPECT_EQ(seen.message, "ddprun on host1 was interrupted");
    EXPECT_EQ(seen.exit_code, 130);
}

TEST(RendezvousStop, MalformedStopRecordIsAnAbortNamingTheKey) {
    for (const char* garbage : {"}", R"({"kind":"failure","failure":{"kind":"worker"}})",
                                R"({"kind":"failure"})", R"({"kind":7})"}) {
        Round round(1);
        round.store->set("ddprun/job/r0/stop", garbage);
        StopEvent seen = round.agents[0].wait_stop(0, 1s);
        EXPECT_EQ(seen.kind, StopEvent::Kind::Abort) << garbage;
        EXPECT_EQ(seen.exit_code, exit_code::kRendezvous);
        EXPECT_TRUE(contains(seen.message, "malformed record under 'ddprun/job/r0/stop'"))
            << seen.message;
    }
}

// Two jobs that reach one store never act on each other's records, even under
// the same keys: every result and stop names its run.
TEST(RendezvousStop, ARecordOfAnotherRunIsNeverTaken) {
    Round round(1);
    round.store->set("ddprun/job/r0/stop", R"({"kind":"done","run_id":"other"})");
    StopEvent seen = round.agents[0].wait_stop(0, 1s);
    EXPECT_EQ(seen.kind, StopEvent::Kind::Abort);
    EXPECT_TRUE(contains(seen.message, "it is run 'other''s, not this run's ('job')"))
        << seen.message;

    auto store = make_memory_store(20s);
    std::string membership = R"({"kind":"membership","run_id":"other","nproc":[1]})";
    store->set("ddprun/job/r0/result", membership);
    store->set("ddprun/job/r0/joined/1", R"({"node_rank":-1,"nnodes":1})");
    Rendezvous rendezvous(*store, "job");
    auto joined = rendezvous.join(0, node(1, 0), true, 1s);
    ASSERT_FALSE(joined);
    EXPECT_TRUE(contains(joined.error().message, "run 'other''s")) << joined.error().message;
}

TEST(RendezvousStop, StoreHostWaitsForEveryAcknowledgement) {
    Round round(3);
    round.agents[1].acknowledge(0, 1, 3);
    EXPECT_EQ(round.agents[0].wait_acknowledged(0, 3, 20ms), (std::vector<int>{0, 2}));
    std::thread late([&] {
        std::this_thread::sleep_for(50ms);
        round.agents[2].acknowledge(0, 2, 3);
    });
    round.agents[0].acknowledge(0, 0, 3);
    EXPECT_EQ(round.agents[0].wait_acknowledged(0, 3, 20s), std::vector<int>{});
    late.join();
}

// ---------------------------------------------------------------------------
// Heartbeats

TEST(Heartbeat, BeatsAreReadBack) {
    Round round(3);
    EXPECT_EQ(round.agents[0].read_heartbeat(0, 1), std::nullopt);
    round.agents[1].beat(0, 1, 5);
    round.agents[2].beat(0, 2, 1);
    round.store->set("ddprun/job/r0/hb/0", "junk");
    EXPECT_EQ(round.agents[0].read_heartbeat(0, 1), 5);
    auto all = round.agents[0].read_heartbeats(0, 3);
    EXPECT_EQ(all, (std::vector<std::optional<std::int64_t>>{std::nullopt, 5, 1}));
    round.agents[0].beat(0, 0, 9);
    EXPECT_EQ(round.agents[1].read_heartbeats(0, 3),
              (std::vector<std::optional<std::int64_t>>{9, 5, 1}));
}

TEST(Heartbeat, MonitorReportsNodesWhoseBeatStopped) {
    using Clock = HeartbeatMonitor::Clock;
    const Clock::time_point t0{};
    struct Step {
        int at_ms;
        int node;
        std::optional<std::int64_t> seq;  // a reading at at_ms (node < 0: none)
        std::vector<int> stale;           // expected at at_ms, after the reading
    };
    const std::vector<Step> steps = {
        {0, -1, {}, {}},        {500, 0, 1, {}},
        {999, -1, {}, {}},      {1000, -1, {}, {1, 2}},  // 1 and 2 never beat within the timeout
        {1100, 1, 1, {2}},      {1200, 2, std::nullopt, {2}},  // still nothing
        {1499, 0, 1, {2}},                                     // the same seq is no sign of life
        {1500, -1, {}, {0, 2}}, {1600, 0, 2, {2}},
        {2099, 1, 1, {2}},      {2100, -1, {}, {1, 2}},
        {2200, 1, 0, {2}},  // a different seq (restarted agent) is life
    };
    HeartbeatMonitor monitor({0, 1, 2}, 1000ms, t0);
    for (const auto& step : steps) {
        Clock::time_point now = t0 + std::chrono::milliseconds(step.at_ms);
        if (step.node >= 0) monitor.observe(step.node, step.seq, now);
        EXPECT_EQ(monitor.stale(now), step.stale) << "at " << step.at_ms << " ms";
    }
}

// ---------------------------------------------------------------------------
// Over the real TCPStore

int free_port() {
    return free_test_port();
}

TEST(RendezvousTcp, FourAgentsJoinFailAndAcknowledge) {
    if (!tcp_store_available()) GTEST_SKIP() << "built without libtorch";
    int port = free_port();
    auto host = open_tcp_store({"127.0.0.1", port, true, 10s});
    auto agents = unranked(4);
    std::vector<AgentResult> results(4);
    std::vector<StopEvent> stops(4);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < 4; ++i) {
        std::unique_ptr<Store> connection =
            i == 0 ? host->clone() : open_tcp_store({"127.0.0.1", port, false, 10s});
        threads.emplace_back([&, i, connection = std::move(connection)]() mutable {
            Rendezvous rendezvous(*connection, "job");
            results[i].joined = rendezvous.join(0, agents[i].me, agents[i].is_store_host, 20s);
            if (!results[i].joined) return;
            int rank = results[i].joined->node_rank;
            // Each agent watches for the stop on its own connection.
            std::unique_ptr<Store> watch = connection->clone();
            std::thread watcher([&, i, watch = std::move(watch)] {
                stops[i] = Rendezvous(*watch, "job").wait_stop(0, 20s);
            });
            if (rank == 2) rendezvous.publish_failure(0, worker_failure(2, 42));
            watcher.join();
            rendezvous.acknowledge(0, rank, 4);
        });
    }
    for (auto& thread : threads) thread.join();
    for (std::size_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(results[i].joined) << error_of(results[i]);
        ASSERT_EQ(stops[i].kind, StopEvent::Kind::Failure) << stops[i].message;
        EXPECT_EQ(stops[i].exit_code, 42);
        EXPECT_EQ(stops[i].failure.host, "host2");
    }
    EXPECT_EQ(results[0].joined->node_rank, 0);
    EXPECT_EQ(Rendezvous(*host, "job").wait_acknowledged(0, 4, 10s), std::vector<int>{});
}

TEST(RendezvousTcp, LosingTheStoreIsAStopEvent) {
    if (!tcp_store_available()) GTEST_SKIP() << "built without libtorch";
    int port = free_port();
    auto host = open_tcp_store({"127.0.0.1", port, true, 5s});
    auto client = open_tcp_store({"127.0.0.1", port, false, 5s});
    std::thread killer([&] {
        std::this_thread::sleep_for(100ms);
        host.reset();
    });
    StopEvent seen = Rendezvous(*client, "job").wait_stop(0, 20s);
    killer.join();
    EXPECT_EQ(seen.kind, StopEvent::Kind::StoreLost) << seen.message;
    EXPECT_EQ(seen.exit_code, exit_code::kRendezvous);
}

// How long 1024 agents (threads, each with its own TCPStore connection) take
// to join. A measurement, not a test: run it with
// --gtest_also_run_disabled_tests --gtest_filter='*Simulated1024*'.
// DDPRUN_BENCH_AGENTS=N measures N agents instead.
TEST(RendezvousTcp, DISABLED_Simulated1024AgentsJoin) {
    if (!tcp_store_available()) GTEST_SKIP() << "built without libtorch";
    const char* agents_env = std::getenv("DDPRUN_BENCH_AGENTS");
    const std::size_t agent_count = agents_env != nullptr ? std::stoul(agents_env) : 1024;
    // Each agent's connection is two sockets on each side.
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
    int port = free_port();
    auto host = open_tcp_store({"127.0.0.1", port, true, 120s});
    std::vector<std::unique_ptr<Store>> connections;
    auto connect_start = std::chrono::steady_clock::now();
    connections.push_back(host->clone());
    for (std::size_t i = 1; i < agent_count; ++i)
        connections.push_back(open_tcp_store({"127.0.0.1", port, false, 120s}));
    auto join_start = std::chrono::steady_clock::now();
    auto agents = unranked(static_cast<int>(agent_count), 8);
    std::vector<AgentResult> results(agent_count);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < agent_count; ++i) {
        threads.emplace_back([&, i] {
            CountingStore counting(std::move(connections[i]));
            Rendezvous rendezvous(counting, "job");
            results[i].joined = rendezvous.join(0, agents[i].me, agents[i].is_store_host, 120s);
            results[i].ops = counting.ops();
        });
    }
    for (auto& thread : threads) thread.join();
    auto end = std::chrono::steady_clock::now();
    int max_ops = 0;
    for (const auto& result : results) {
        ASSERT_TRUE(result.joined) << error_of(result);
        if (result.joined->node_rank != 0) max_ops = std::max(max_ops, result.ops);
    }
    using ms = std::chrono::milliseconds;
    std::printf(
        "connect %zu agents: %lld ms; join: %lld ms; ops per agent (not node 0): %d\n", agent_count,
        static_cast<long long>(std::chrono::duration_cast<ms>(join_start - connect_start).count()),
        static_cast<long long>(std::chrono::duration_cast<ms>(end - join_start).count()), max_ops);
}

}  // namespace
}  // namespace ddprun
