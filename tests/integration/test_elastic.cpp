// Black-box tests of elastic jobs (--nnodes=MIN:MAX): 3-4 agents on
// 127.0.0.x join, leave, die, freeze and wait as spares while the job runs,
// over both rendezvous backends (c10d, where the agent at 127.0.0.1 hosts the
// store and leads; etcd, a real one the suite starts, where any agent leads).
// Each worker records the round it runs in, its rank and the world size as a
// file ("r<round>.<rank>.of<world>.restart<n>"), so a test checks that every
// node of every round agrees, without parsing anyone's output; and every agent's
// exit code and its one line about each change are checked.

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/etcd_store.hpp"
#include "harness.hpp"
#include "multi_node.hpp"
#include "support/build_paths.hpp"
#include "support/etcd_server.hpp"

namespace ddprun_it {
namespace {

namespace fs = std::filesystem;

// One worker start, as its file records it.
struct Start {
    int rank = -1;
    int world = 0;
    int restart = 0;
};

class ElasticTest : public MultiNodeTest {
  protected:
    // --nnodes=MIN:MAX, one worker per node, quick failure detection and a short last
    // call; over c10d the agent at 127.0.0.1 hosts the store.
    Job elastic_job(int min, int max) const {
        Job job;
        job.min_nnodes = min;
        job.nnodes = max;
        job.nproc = 1;
        job.conf = {{"join_timeout", "20"}, {"last_call_timeout", "1"}, {"heartbeat_timeout", "2"}};
        job.flags = {"--shutdown_timeout=5"};
        return job;
    }

    // Workers that record their start, then do `then` (by default: sleep until ddprun
    // stops them).
    std::vector<std::string> recorders(std::vector<std::string> then = {"sleep", "300"}) const {
        std::vector<std::string> actions = {"ready",
                                            m_dir + "/r{round}.{rank}.of{world}.restart{restart}"};
        actions.insert(actions.end(), then.begin(), then.end());
        return actions;
    }

    // The node at 127.0.0.<n>; over c10d, n == 1 hosts the store.
    Node node(const Job& job, int n, std::vector<std::string> actions = {}) const {
        std::string conf = etcd() ? "" : fmt::format("is_host={}", n == 1 ? 1 : 0);
        for (const auto& [key, value] : job.conf)
            conf += (conf.empty() ? "" : ",") + key + "=" + value;
        return Node{.addr = fmt::format("127.0.0.{}", n),
                    .flags = {"--rdzv_conf=" + conf},
                    .actions = actions.empty() ? recorders() : actions};
    }

    std::unique_ptr<DdprunProcess> start_at(const Job& job, int n,
                                            std::vector<std::string> actions = {}) {
        return start_node(job, node(job, n, std::move(actions)));
    }

    // The agents at 127.0.0.1 to 127.0.0.<count>, all running `actions`.
    std::vector<std::unique_ptr<DdprunProcess>> start_agents(
        const Job& job, int count, const std::vector<std::string>& actions = {}) {
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        for (int n = 1; n <= count; ++n) agents.push_back(start_at(job, n, actions));
        return agents;
    }

    // Every worker start so far, by round.
    std::map<int, std::vector<Start>> rounds() const {
        std::map<int, std::vector<Start>> by_round;
        for (const auto& entry : fs::directory_iterator(m_dir)) {
            int round = 0;
            Start start;
            const std::string name = entry.path().filename().string();
            // Written under NAME.tmpPID, then renamed (fake_worker's `ready`): not yet there.
            if (name.find(".tmp") != std::string::npos) continue;
            if (std::sscanf(name.c_str(), "r%d.%d.of%d.restart%d", &round, &start.rank,
                            &start.world, &start.restart) == 4)
                by_round[round].push_back(start);
        }
        return by_round;
    }

    // Waits until round `round` runs `world` workers, ranks 0..world-1 each once, all
    // with that world size.
    ::testing::AssertionResult wait_round(int round, int world,
                                          const std::vector<std::unique_ptr<DdprunProcess>>& agents,
                                          Milliseconds timeout = 20s) {
        bool full = wait_until(
            [&] {
                auto all = rounds();
                return all.contains(round) && std::ssize(all[round]) >= world;
            },
            timeout);
        auto all = rounds();
        std::string seen;
        for (const auto& [r, starts] : all) {
            seen += fmt::format("round {}:", r);
            for (const auto& s : starts) seen += fmt::format(" {}/{}", s.rank, s.world);
            seen += "\n";
        }
        if (!full)
            return ::testing::AssertionFailure()
                   << "round " << round << " never ran " << world << " workers\n"
                   << seen << stderr_of(agents);
        std::set<int> ranks;
        for (const auto& start : all[round]) {
            if (start.world != world || !ranks.insert(start.rank).second || start.rank >= world)
                return ::testing::AssertionFailure() << "round " << round << " is inconsistent\n"
                                                     << seen << stderr_of(agents);
        }
        return ::testing::AssertionSuccess();
    }

    // Freezes `node` (its supervisor and its agent) until round `round` runs `world`
    // workers without it, then thaws it: whether the others re-formed.
    ::testing::AssertionResult frozen_until_reformed(
        DdprunProcess& node, int round, int world,
        const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        const pid_t agent = agent_of(node);
        if (agent <= 0) return ::testing::AssertionFailure() << "no agent under the node";
        ::kill(agent, SIGSTOP);
        ::kill(node.pid(), SIGSTOP);
        auto reformed = wait_round(round, world, agents);
        ::kill(node.pid(), SIGCONT);
        ::kill(agent, SIGCONT);
        return reformed;
    }
    int restart_count_of(int round) const {
        auto all = rounds();
        return all.contains(round) && !all[round].empty() ? all[round].front().restart : -1;
    }

    // Over etcd: until an agent leads the job (its key is in etcd). The leader is node 0
    // of the first round, as the store's host is over c10d.
    bool wait_for_leader() const {
        ddprun::EtcdClient client({{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
        const std::string key = "/ddprun/" + m_run_id + "/e/leader";
        return wait_until(
            [&] {
                auto answer = client.call("/v3/kv/range", {{"key", ddprun::etcd_base64(key)}});
                return answer.contains("kvs");
            },
            20s);
    }

    // The job's secret in a file of mode 0600, for every agent.
    void give_secret(Job& job) const {
        const std::string file = m_dir + "/secret";
        write_text_file(file, "0123456789abcdef0123456789abcdef", 0600);
        ::chmod(file.c_str(), 0600);
        job.conf["secret_file"] = file;
    }

    // A stray client without the secret writes `value` under the job's key
    // "ddprun/<run id>/`name`", through the store's own protocol (over c10d, the
    // store the agent at 127.0.0.1 hosts).
    void stray_set(const std::string& name, const std::string& value) {
        const std::string key = fmt::format("ddprun/{}/{}", m_run_id, name);
        if (etcd()) {
            ddprun::EtcdStoreOptions options;
            options.client = {{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s};
            options.job_root = ddprun::JobKeys::k_root;
            ddprun::open_etcd_store(options)->set(key, value);
            return;
        }
        const std::string store_client = ddprun_test::build_paths::store_client;
        if (store_client.empty()) GTEST_SKIP() << "built without libtorch: no store client";
        const std::string log = m_dir + "/store_client.log";
        const std::string command = fmt::format("{} 127.0.0.1 {} set '{}' '{}' >{} 2>&1",
                                                store_client, m_port, key, value, log);
        ASSERT_EQ(std::system(command.c_str()), 0) << read_text_file(log);
    }

    // Stops every agent still running (SIGTERM to each: the job ends as a scheduler's
    // stop ends it) and returns their results.
    std::vector<RunResult> stop_all(const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        for (const auto& agent : agents)
            if (agent->running()) agent->send_signal(SIGTERM);
        return wait_nodes(agents);
    }
};

// What every backend must do alike.
class ElasticBackendTest : public ElasticTest, public ::testing::WithParamInterface<std::string> {
  protected:
    bool etcd() const override { return GetParam() == "etcd"; }
};
INSTANTIATE_TEST_SUITE_P(Backends, ElasticBackendTest, ::testing::Values("c10d", "etcd"),
                         [](const auto& backend) { return backend.param; });

// What only the etcd backend can do: lose the leader.
class ElasticEtcdTest : public ElasticTest {
  protected:
    bool etcd() const override { return true; }
};

// --- forming rounds -------------------------------------------------------------

TEST_P(ElasticBackendTest, TheFirstRoundFormsAtOnceWhenMaxNodesJoined) {
    Job job = elastic_job(1, 3);
    job.conf["last_call_timeout"] = "120";  // far beyond the guard: MAX must not wait for it
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
}

TEST_P(ElasticBackendTest, TheFirstRoundFormsAtMinAfterTheLastCall) {
    Job job = elastic_job(2, 3);
    auto agents = start_agents(job, 2);
    ASSERT_TRUE(wait_round(0, 2, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143})) << describe_all(r);
    for (const auto& result : r)
        EXPECT_FALSE(own_lines_with(result.err, {"round 0:", "of 2", "world_size 2"}).empty())
            << describe_all(r);
}

TEST_P(ElasticBackendTest, FewerThanMinNodesTimeOutNamingTheCount) {
    Job job = elastic_job(2, 3);
    job.conf["join_timeout"] = "2";
    auto agent = start_at(job, 1);
    auto r = agent->wait();
    EXPECT_EQ(r.exit_code, k_rendezvous_exit) << r.describe();
    EXPECT_EQ(own_lines_with(
                  r.err, {"timed out after 2 s", "1 of at least 2 nodes joined", "--nnodes=2:3"})
                  .size(),
              1u)
        << r.describe();
}

TEST_F(ElasticTest, DryRunShowsThePlanAtMinAndAtMax) {
    auto r =
        run({"--dry-run", "--nnodes=2:4", "--nproc_per_node=2", "--node_rank=3", k_fake_worker});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    const std::string all = r.out + r.err;
    EXPECT_TRUE(contains(all, "at MIN: ddprun plan: 2 nodes x 2 workers per node = world_size 4"))
        << r.describe();
    EXPECT_TRUE(contains(all, "at MAX: ddprun plan: 4 nodes x 2 workers per node = world_size 8"))
        << r.describe();
    EXPECT_TRUE(contains(all, "ignored: an elastic job assigns node ranks")) << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "a dry run starts nothing";
}

// --- scale-up -------------------------------------------------------------------

TEST_P(ElasticBackendTest, ANewcomerRestartsEveryWorkerWithTheLargerWorld) {
    Job job = elastic_job(1, 3);
    auto agents = start_agents(job, 2);
    ASSERT_TRUE(wait_round(0, 2, agents));
    agents.push_back(start_at(job, 3));
    ASSERT_TRUE(wait_round(1, 3, agents));
    EXPECT_EQ(restart_count_of(1), 0) << "a membership change is not a restart";
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
    // One line on every node: who joined, the node count and the world size.
    for (const auto& result : r)
        EXPECT_EQ(own_lines_with(result.err, {"round 1:", "joined", "now 3 nodes", "world size 3"})
                      .size(),
                  1u)
            << describe_all(r);
}

TEST_P(ElasticBackendTest, BeyondMaxANewcomerWaitsAsASpareAndReplacesAKilledNode) {
    Job job = elastic_job(1, 2);
    auto agents = start_agents(job, 2);
    ASSERT_TRUE(wait_round(0, 2, agents));
    agents.push_back(start_at(job, 3));
    ASSERT_TRUE(agents[2]->wait_for_output("waiting as a spare", 20s, true)) << stderr_of(agents);
    EXPECT_EQ(rounds().size(), 1u) << "a spare must not stop the full job";

    kill_node(*agents[1]);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(wait_round(1, 2, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 137, 143})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[0].err,
                             {"round 1:", "stopped answering", "joined (a spare)", "now 2 nodes"})
                  .size(),
              1u)
        << describe_all(r);
}

// --- scale-down -----------------------------------------------------------------

TEST_P(ElasticBackendTest, AKilledNodeIsReplacedByTheSurvivorsAfterTheHeartbeatTimeout) {
    Job job = elastic_job(2, 3);
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    kill_node(*agents[1]);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(wait_round(1, 2, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 137, 143})) << describe_all(r);
    for (std::size_t i : {0u, 2u})
        EXPECT_EQ(own_lines_with(r[i].err,
                                 {"round 1:", "stopped answering", "now 2 nodes", "world size 2"})
                      .size(),
                  1u)
            << describe_all(r);
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << "the killed node's workers outlived it:\n" << describe(live);
}

TEST_P(ElasticBackendTest, AFrozenNodeIsDroppedAndRefusedOnceThawed) {
    Job job = elastic_job(2, 3);
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    auto& frozen = *agents[2];
    EXPECT_TRUE(frozen_until_reformed(frozen, 1, 2, agents));
    // Thawed, it learns that the others gave it up, stops its workers and leaves.
    ASSERT_TRUE(frozen.wait_exit_for(20s)) << stderr_of(agents);
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, k_rendezvous_exit})) << describe_all(r);
    // Thawed, it reads first either the others' verdict or its own overdue heartbeat.
    EXPECT_TRUE(!own_lines_with(r[2].err, {"gave this node up"}).empty() ||
                !own_lines_with(r[2].err, {"stopped answering"}).empty())
        << describe_all(r);
}

TEST_P(ElasticBackendTest, AStopSignalToOneNodeMakesItLeaveAndTheOthersGoOnAtOnce) {
    Job job = elastic_job(2, 3);
    // A leave needs no heartbeat: one this long would fail the test if it were waited for.
    job.conf["heartbeat_timeout"] = "60";
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    agents[1]->send_signal(SIGTERM);
    ASSERT_TRUE(agents[1]->wait_exit_for(20s)) << stderr_of(agents);
    ASSERT_TRUE(wait_round(1, 2, agents, 10s));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
    EXPECT_FALSE(own_lines_with(r[1].err, {"leaving the job"}).empty()) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[0].err, {"round 1:", "left (SIGTERM)", "now 2 nodes"}).size(), 1u)
        << describe_all(r);
}

TEST_P(ElasticBackendTest, ASecondSignalKillsTheLeavingNodesWorkersAtOnceAndOnlyThose) {
    Job job = elastic_job(2, 3);
    job.flags.push_back("--shutdown_timeout=300");  // a grace the test would notice
    // The workers ignore SIGTERM, saying so: the test knows when a node's stop began.
    auto agents = start_agents(job, 3, recorders({"trap", "SIGTERM", "sleep", "300"}));
    ASSERT_TRUE(wait_round(0, 3, agents));
    agents[2]->send_signal(SIGTERM);
    ASSERT_TRUE(agents[2]->wait_for_output("leaving the job", 10s, true)) << stderr_of(agents);
    agents[2]->send_signal(SIGTERM);
    ASSERT_TRUE(agents[2]->wait_exit_for(10s)) << "the second signal did not kill at once\n"
                                               << stderr_of(agents);
    // The others' workers ignore SIGTERM too: their grace still runs (a kill would have
    // ended it), so no new round yet; they are stopped by the test.
    EXPECT_EQ(rounds().size(), 1u);
    for (std::size_t i : {0u, 1u}) {
        // Once the re-forming stop reached it (its worker got SIGTERM): a signal before
        // would make this node leave too.
        ASSERT_TRUE(agents[i]->wait_for_output("got SIGTERM", 10s)) << stderr_of(agents);
        // One at a time: two signals pending at once are one.
        agents[i]->send_signal(SIGTERM);
        ASSERT_TRUE(agents[i]->wait_for_output("already stopping", 10s, true)) << stderr_of(agents);
        agents[i]->send_signal(SIGTERM);
    }
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
}

TEST_P(ElasticBackendTest, BelowMinTheSurvivorsGiveUpAfterTheJoinTimeoutNamingTheLostNode) {
    Job job = elastic_job(2, 3);
    job.conf["join_timeout"] = "3";
    auto agents = start_agents(job, 2);
    ASSERT_TRUE(wait_round(0, 2, agents));
    agents[1]->send_signal(SIGTERM);
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, 143})) << describe_all(r);
    EXPECT_EQ(
        own_lines_with(r[0].err, {"1 node(s) left of at least 2", "join_timeout", "left (SIGTERM)"})
            .size(),
        1u)
        << describe_all(r);
}

TEST_F(ElasticTest, LosingTheStoresHostEndsTheJobEverywhereSayingWhy) {
    Job job = elastic_job(1, 3);
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    kill_node(*agents[0]);
    if (HasFatalFailure()) return;
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{137, k_rendezvous_exit, k_rendezvous_exit}))
        << describe_all(r);
    for (std::size_t i : {1u, 2u})
        EXPECT_FALSE(own_lines_with(r[i].err, {"store"}).empty()) << describe_all(r);
}

// --- etcd: no agent is special --------------------------------------------------------

// Agent 1 leads (it came alone) and is node 0: killed, the others elect a successor,
// which re-forms the job with node 0 the first survivor, and MASTER_ADDR its address.
// Each worker records "m<round>.<rank>.<MASTER_ADDR>" right after its round's record,
// so the test waits for those too (the round's record alone does not say they exist).
TEST_F(ElasticEtcdTest, LosingTheLeaderAndNode0IsSurvivedAndMasterAddrMoves) {
    auto masters = [&](int round, std::size_t workers) {
        const std::string prefix = fmt::format("m{}.", round);
        std::set<std::string> names;
        wait_until(
            [&] {
                names.clear();
                for (const auto& entry : fs::directory_iterator(m_dir)) {
                    std::string name = entry.path().filename().string();
                    // A worker's `ready` file is written under NAME.tmpPID, then renamed:
                    // only the finished name counts.
                    if (name.starts_with(prefix) && name.find(".tmp") == std::string::npos)
                        names.insert(name);
                }
                return names.size() >= workers;
            },
            10s);
        return names;
    };
    Job job = elastic_job(1, 3);
    const auto actions = recorders({"ready", m_dir + "/m{round}.{rank}.{master}", "sleep", "300"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1, actions));
    ASSERT_TRUE(wait_round(0, 1, agents));
    agents.push_back(start_at(job, 2, actions));
    ASSERT_TRUE(wait_round(1, 2, agents));
    agents.push_back(start_at(job, 3, actions));
    ASSERT_TRUE(wait_round(2, 3, agents));
    EXPECT_TRUE(masters(2, 3).contains("m2.0.127.0.0.1")) << "node 0 was the first agent";
    kill_node(*agents[0]);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(wait_round(3, 2, agents));
    EXPECT_EQ(masters(3, 2), (std::set<std::string>{"m3.0.127.0.0.2", "m3.1.127.0.0.2"}))
        << "MASTER_ADDR must move to the new node 0\n"
        << stderr_of(agents);
    EXPECT_EQ(restart_count_of(3), 0) << "losing a node is not a restart";
    // One successor (counted before the end: when the job is stopped the successor may
    // exit first, and the other, leaving too, does not lead).
    EXPECT_NE(agents[1]->wait_for_output("leads it now", 1ms, true),
              agents[2]->wait_for_output("leads it now", 1ms, true))
        << stderr_of(agents);
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{137, 143, 143})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[1].err, {"leads it now"}).size() +
                  own_lines_with(r[2].err, {"leads it now"}).size(),
              1u)
        << "a leaving agent must not take the lead\n"
        << describe_all(r);
    for (std::size_t i : {1u, 2u})
        EXPECT_EQ(own_lines_with(r[i].err, {"round 3:", "etcd lease", "now 2 nodes"}).size(), 1u)
            << describe_all(r);
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << describe(live);
}

// The leader leaves on a stop signal: its lease is revoked as it exits, so the others
// elect a successor and go on at once, not after the heartbeat timeout.
TEST_F(ElasticEtcdTest, TheLeaderLeavingHandsOverAtOnce) {
    Job job = elastic_job(2, 3);
    job.conf["heartbeat_timeout"] = "60";  // a wait for the lease would fail the test
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    ASSERT_TRUE(wait_for_leader()) << stderr_of(agents);
    agents.push_back(start_at(job, 2));
    agents.push_back(start_at(job, 3));
    ASSERT_TRUE(wait_round(0, 3, agents));
    agents[0]->send_signal(SIGTERM);
    ASSERT_TRUE(agents[0]->wait_exit_for(20s)) << stderr_of(agents);
    ASSERT_TRUE(wait_round(1, 2, agents, 10s));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
}

// Found by scripts/chaos.sh: the leader frozen past the heartbeat timeout is replaced;
// thawed, it learns that and leaves (75), and must not publish the end of the job on
// its way out: the others go on, and an agent arriving later joins them (it was told
// "run ... already ended (exit code 75)" and exited 75).
TEST_F(ElasticEtcdTest, AFrozenLeaderLeavesTheJobToItsSuccessorOnceThawed) {
    Job job = elastic_job(2, 3);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    ASSERT_TRUE(wait_for_leader()) << stderr_of(agents);
    agents.push_back(start_at(job, 2));
    agents.push_back(start_at(job, 3));
    ASSERT_TRUE(wait_round(0, 3, agents));
    auto& leader = *agents[0];
    ASSERT_TRUE(frozen_until_reformed(leader, 1, 2, agents));
    ASSERT_TRUE(leader.wait_exit_for(20s)) << stderr_of(agents);
    agents.push_back(start_at(job, 4));
    EXPECT_TRUE(wait_round(2, 3, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, 143, 143, 143}))
        << describe_all(r);
    EXPECT_TRUE(own_lines_with(r[3].err, {"already ended"}).empty()) << describe_all(r);
}

// Found by scripts/chaos.sh: etcd out of reach for less than the heartbeat timeout (a
// node's link down for a second, every member out of reach; here the one member
// killed and started again 1.5 s later) loses no node. A watch that could not reach
// etcd ended its agent at once (75: "lost the rendezvous store: no etcd answers"),
// though its lease held.
TEST_F(ElasticEtcdTest, AnEtcdOutOfReachForLessThanTheHeartbeatTimeoutLosesNoNode) {
    Job job = elastic_job(2, 3);
    job.conf["heartbeat_timeout"] = "10";  // room for etcd's own start on a loaded machine
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    auto& etcd = SharedEtcd::get();
    etcd.kill(0);
    std::this_thread::sleep_for(1500ms);  // the fault itself: etcd gone this long
    ASSERT_TRUE(etcd.restart(0)) << "etcd did not start again";
    add_service(etcd.pid(0));
    // Nothing to wait for but the absence of a change: a heartbeat timeout past the thaw,
    // no agent has left and no new round has formed.
    const bool changed = wait_until(
        [&] {
            return rounds().size() > 1 ||
                   std::any_of(agents.begin(), agents.end(),
                               [](const auto& a) { return a->reap_if_exited(); });
        },
        5s);
    EXPECT_FALSE(changed) << stderr_of(agents);
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
}

// --- restarts, the end of the job ---------------------------------------------------

TEST_P(ElasticBackendTest, MembershipChangesUseNoRestartButAWorkerFailureDoes) {
    Job job = elastic_job(1, 3);
    job.flags.push_back("--max_restarts=1");
    // After the restart the workers finish at once; before it they run until killed.
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    const auto actions = recorders({"if-restart", "1", "exit", "0", "sleep", "300"});
    agents.push_back(start_at(job, 1, actions));
    agents.push_back(start_at(job, 2, actions));
    ASSERT_TRUE(wait_round(0, 2, agents));
    agents.push_back(start_at(job, 3, actions));
    ASSERT_TRUE(wait_round(1, 3, agents));
    EXPECT_EQ(restart_count_of(1), 0);
    // A worker failure: rank 1's worker dies of SIGKILL.
    auto workers = recorded_workers();
    ASSERT_FALSE(workers[1].empty());
    ::kill(workers[1].back(), SIGKILL);
    ASSERT_TRUE(wait_round(2, 3, agents));
    EXPECT_EQ(restart_count_of(2), 1) << "a failure is a restart";
    // Restart 1's workers exit 0 at once: the job finishes on every node.
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0, 0})) << describe_all(r);
}

// A node that joins after two restarts counts them as every node does: its
// workers' TORCHELASTIC_RESTART_COUNT, its /metrics, its status record (ddprun
// status --json, every node's) and its event log all say 2, though it restarted
// nothing itself.
TEST_P(ElasticBackendTest, ANodeThatJoinsLateCountsTheRestartsBeforeIt) {
    if (!fs::exists(k_curl)) GTEST_SKIP() << k_curl << " is not installed: /metrics cannot be read";
    Job job = elastic_job(1, 3);
    job.flags.push_back("--max_restarts=3");
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    agents.push_back(start_at(job, 2));
    ASSERT_TRUE(wait_round(0, 2, agents));
    for (int round = 1; round <= 2; ++round) {  // rank 1's worker dies twice
        auto workers = recorded_workers();
        ASSERT_FALSE(workers[1].empty());
        ::kill(workers[1].back(), SIGKILL);
        ASSERT_TRUE(wait_round(round, 2, agents));
    }
    const std::string log = m_dir + "/late.jsonl";
    Node late = node(job, 3);
    late.flags.push_back("--metrics-port=0");
    late.flags.push_back("--event-log=" + log);
    agents.push_back(start_node(job, late));
    ASSERT_TRUE(wait_round(3, 3, agents));
    auto started = rounds();
    for (const Start& start : started[3])
        EXPECT_EQ(start.restart, 2) << "rank " << start.rank << "'s TORCHELASTIC_RESTART_COUNT";

    const int port = announced_metrics_port(*agents[2]);
    ASSERT_GT(port, 0) << agents[2]->err_so_far();
    HttpAnswer metrics;
    EXPECT_TRUE(wait_for_metrics(
        "127.0.0.3", port,
        [](const std::string& body) { return has_sample(body, "ddprun_round 3"); }, metrics, 20s))
        << metrics.body;
    EXPECT_TRUE(has_sample(metrics.body, "ddprun_restarts_total 2")) << metrics.body;

    std::vector<std::string> args{"status", "--rdzv_id=" + m_run_id, "--json"};
    for (const auto& flag : rendezvous_flags(etcd(), m_port)) args.push_back(flag);
    RunOptions quick;
    quick.timeout = 30s;
    nlohmann::json status;
    EXPECT_TRUE(wait_until(
        [&] {
            auto look = run(args, quick);
            status = nlohmann::json::parse(look.out, nullptr, false);
            if (look.exit_code != 0 || !status.is_object() || !status.contains("nodes") ||
                status["nodes"].size() != 3)
                return false;
            for (const auto& node : status["nodes"])
                if (node.value("round", -1) != 3) return false;
            return true;
        },
        30s))
        << status.dump();
    EXPECT_EQ(status.value("restarts", -1), 2) << status.dump();
    for (const auto& node : status["nodes"])
        EXPECT_EQ(node.value("restarts", -1), 2) << node.dump();

    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
    const std::string events = read_text_file(log);
    EXPECT_TRUE(contains(events, R"("event":"round")") &&
                contains(events, R"("round":3,"restart_count":2)"))
        << events;
    EXPECT_TRUE(contains(events, R"("event":"job_end")") && contains(events, R"("restarts":2)"))
        << events;
}

TEST_P(ElasticBackendTest, ANewcomerToAFinishingJobExitsZeroSayingSo) {
    Job job = elastic_job(1, 3);
    job.conf["exit_barrier_timeout"] = "30";
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    // Node 1's workers finish at once; node 2's run until the test lets them go.
    const std::string go = m_dir + "/go";
    const auto actions = recorders({"if-rank", "0", "exit", "0", "wait-file", go, "exit", "0"});
    agents.push_back(start_at(job, 1, actions));
    agents.push_back(start_at(job, 2, actions));
    ASSERT_TRUE(wait_round(0, 2, agents));
    auto late = start_at(job, 3);
    auto r_late = late->wait();
    EXPECT_EQ(r_late.exit_code, 0) << r_late.describe();
    EXPECT_FALSE(own_lines_with(r_late.err, {"finishing"}).empty()) << r_late.describe();
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(rounds().size(), 1u) << "the newcomer must not have re-formed the job";
}

TEST_P(ElasticBackendTest, ANewcomerOfAnotherShapeIsRefusedAndTheJobGoesOn) {
    Job job = elastic_job(1, 3);
    auto agents = start_agents(job, 2);
    ASSERT_TRUE(wait_round(0, 2, agents));
    Job other = job;
    other.min_nnodes = 2;
    auto stranger = start_at(other, 3);
    auto rs = stranger->wait();
    EXPECT_EQ(rs.exit_code, k_rendezvous_exit) << rs.describe();
    EXPECT_EQ(own_lines_with(rs.err, {"nnodes differ: 1:3 on node 0, 2:3 on this node"}).size(), 1u)
        << rs.describe();
    EXPECT_EQ(rounds().size(), 1u) << "the refused node must not have re-formed the job";
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143})) << describe_all(r);
}

TEST_P(ElasticBackendTest, ASchedulersStopToEveryNodeEndsTheJobAsToday) {
    Job job = elastic_job(2, 3);
    auto agents = start_agents(job, 3);
    ASSERT_TRUE(wait_round(0, 3, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);
    // The test signals the agents one after another. Usually the host's stop ends the job
    // before anything re-forms; under heavy load (stress.sh) a member's SIGTERM can be
    // handled before the host's and the leader re-forms once, with the members left, until
    // their own SIGTERMs end it. Never more than once, and every node ends 143.
    EXPECT_LE(rounds().size(), 2u) << "the job re-formed more than once while being stopped";
}

// --- a real PyTorch job ---------------------------------------------------------------

// examples/elastic_train.py under an elastic job: two nodes train, a third joins, one
// leaves; the checkpoint carries the steps across every round and the job finishes.
TEST_P(ElasticBackendTest, PytorchTrainingGoesOnAcrossAScaleUpAndAScaleDown) {
    Job job = elastic_job(1, 3);
    job.guard = 90s;
    job.flags.push_back("--shutdown_timeout=10");
    const std::vector<std::string> program = {k_python,
                                              k_examples_dir + "/elastic_train.py",
                                              m_dir + "/checkpoint",
                                              "--steps",
                                              "120",
                                              "--save-every",
                                              "5",
                                              "--step-time",
                                              "0.1"};
    auto node_at = [&](int n) {
        Node nd = node(job, n);
        nd.program = program;
        return nd;
    };
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, node_at(1)));
    // Agent 0 must be node 0 (rank 0 prints the progress read below): over etcd, where
    // node ranks follow the arrivals, it arrives alone first.
    if (etcd()) {
        ASSERT_TRUE(wait_for_leader()) << stderr_of(agents);
    }
    agents.push_back(start_node(job, node_at(2)));
    ASSERT_TRUE(agents[0]->wait_for_output("world 2", 60s)) << stderr_of(agents);
    agents.push_back(start_node(job, node_at(3)));
    ASSERT_TRUE(agents[0]->wait_for_output("world 3", 60s)) << stderr_of(agents);
    agents[1]->send_signal(SIGTERM);  // node 1 leaves; nodes 0 and 2 go on
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 143, 0})) << describe_all(r);
    const std::string& out = r[0].out;
    EXPECT_TRUE(contains(out, "resuming at step")) << describe_all(r);
    EXPECT_TRUE(contains(out, "done: step 120/120")) << describe_all(r);
    // The last rounds ran with 3 and then 2 workers, and nothing started over from 0.
    EXPECT_EQ(count_occurrences(out, "starting at step 0"), 1u) << describe_all(r);
    EXPECT_TRUE(contains(out, "world 3")) << describe_all(r);
    // Over etcd the leaver may have led the job; the line then says so too.
    EXPECT_EQ(own_lines_with(r[0].err, {"left (SIGTERM);", "now 2 nodes"}).size(), 1u)
        << describe_all(r);
}

// --- a job secret: records a stray client forges ------------------------------

// A forged "the job has ended" would send a newcomer home with 0: with a secret it is
// one line naming the key, 75, and the job goes on.
TEST_P(ElasticBackendTest, AForgedEndOfTheJobIsRefusedAndTheJobGoesOn) {
    Job job = elastic_job(1, 3);
    give_secret(job);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    ASSERT_TRUE(wait_round(0, 1, agents));
    stray_set("e/closed", R"({"kind":"finished","round":0,"message":"","exit_code":0})");
    if (HasFatalFailure()) return;
    auto late = start_at(job, 2);
    auto r_late = late->wait();
    EXPECT_EQ(r_late.exit_code, k_rendezvous_exit) << r_late.describe();
    EXPECT_EQ(
        own_lines_with(r_late.err, {"error", "e/closed'", "not signed with this job's secret"})
            .size(),
        1u)
        << r_late.describe();
    ASSERT_TRUE(agents[0]->running()) << stderr_of(agents);
    EXPECT_EQ(rounds().size(), 1u) << "the refused newcomer must not have re-formed the job";
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143})) << describe_all(r);
}

// A forged membership of the next round (another master) where the leader's own would
// go: the leader cannot form the round; it says why and its agent ends with 75. No
// worker starts from it. Over c10d the leader's agent hosts the store: the job ends
// with 75 on every node. Over etcd the others elect a successor, which goes on in a
// round of its own numbering (the forged one is never read again).
TEST_P(ElasticBackendTest, AForgedNextRoundStopsItsLeaderAndStartsNoWorker) {
    Job job = elastic_job(1, 3);
    give_secret(job);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    ASSERT_TRUE(wait_round(0, 1, agents));
    stray_set("r1/result",
              R"({"kind":"membership","round":1,"restarts":0,"change":"","master_addr":)"
              R"("6.6.6.6","master_port":1,"nnodes":2,"nproc":[[1,1]]})");
    if (HasFatalFailure()) return;
    agents.push_back(start_at(job, 2));
    if (etcd()) {
        ASSERT_TRUE(agents[0]->wait_exit_for(20s)) << stderr_of(agents);
        ASSERT_TRUE(wait_round(2, 1, agents));
    }
    auto r = etcd() ? stop_all(agents) : wait_nodes(agents);
    const std::string all = describe_all(r);
    EXPECT_EQ(exit_codes(r),
              (std::vector<int>{k_rendezvous_exit, etcd() ? 143 : k_rendezvous_exit}))
        << all;
    EXPECT_EQ(own_lines_with(r[0].err, {"error", "r1/result'", "not signed with this job's secret"})
                  .size(),
              1u)
        << all;
    EXPECT_FALSE(rounds().contains(1)) << "a worker started from a forged round\n" << all;
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << describe(live);
}

// The leader key decides who leads: one another program put fails the join in one line.
TEST_F(ElasticEtcdTest, AForgedLeaderKeyFailsTheJoinInOneLine) {
    Job job = elastic_job(1, 3);
    give_secret(job);
    stray_set("e/leader", "5");
    auto agent = start_at(job, 1);
    auto r = agent->wait();
    EXPECT_EQ(r.exit_code, k_rendezvous_exit) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"e/leader'", "not signed with this job's secret"}).size(), 1u)
        << r.describe();
    EXPECT_TRUE(rounds().empty()) << r.describe();
}

// An alive key another program put is no agent: a successor that takes over from a lost
// leader warns about it and forms the next round from the agents that are there.
TEST_F(ElasticEtcdTest, AForgedAliveKeyIsNoAgentForASuccessor) {
    Job job = elastic_job(1, 3);
    give_secret(job);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_at(job, 1));
    ASSERT_TRUE(wait_round(0, 1, agents));
    agents.push_back(start_at(job, 2));
    ASSERT_TRUE(wait_round(1, 2, agents));
    stray_set("e/alive/77", "1");
    kill_node(*agents[0]);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(wait_round(2, 1, agents));
    auto r = stop_all(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{137, 143})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[1].err, {"e/alive/77'", "not signed", "ignored"}).size(), 1u)
        << describe_all(r);
    EXPECT_EQ(own_lines_with(r[1].err, {"leads it now"}).size(), 1u) << describe_all(r);
}

}  // namespace
}  // namespace ddprun_it
