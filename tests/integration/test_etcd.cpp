// What only the etcd backend (--rdzv_backend=etcd) has: a real etcd that the
// test starts (tests/support/etcd_server.hpp), agents on 127.0.0.x that meet
// through it. What a job does alike on both backends (ranks, failures, signals,
// lost and frozen nodes, restarts, the exit barrier, the example DDP job) is
// checked over etcd by the "_etcd" and "/etcd" variants of the multi-node and
// reliability suites; here: node ranks in join order, no libtorch in the agent,
// several members, a lost member or cluster, bad endpoints, a stray writer and
// the C++ example trainer.

#include <signal.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddprun/store/etcd_client.hpp"
#include "harness.hpp"
#include "multi_node.hpp"
#include "support/build_paths.hpp"
#include "support/etcd_server.hpp"

namespace ddprun_it {
namespace {

using json = nlohmann::json;

class EtcdTest : public MultiNodeTest {
  protected:
    bool etcd() const override { return true; }

    static bool maps_libtorch(pid_t pid) {
        std::ifstream maps(fmt::format("/proc/{}/maps", pid));
        std::string line;
        while (std::getline(maps, line))
            if (line.find("libtorch") != std::string::npos) return true;
        return false;
    }
};

TEST_F(EtcdTest, TwoNodesGetTheJobWideVariables) {
    Job job;
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"env"}},
                             {.addr = "127.0.0.2", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    std::map<int, std::map<std::string, std::string>> all;
    for (const auto& result : r)
        for (auto& [rank, env] : env_by_rank(result.out)) all[rank] = env;
    ASSERT_EQ(all.size(), 4u) << describe_all(r);
    for (auto& [rank, env] : all) {
        EXPECT_EQ(env["WORLD_SIZE"], "4");
        EXPECT_EQ(env["RANK"], std::to_string(rank));
        EXPECT_EQ(env["MASTER_ADDR"], all[0]["MASTER_ADDR"]) << "one MASTER_ADDR for the job";
        EXPECT_EQ(env["MASTER_PORT"], all[0]["MASTER_PORT"]);
    }
}

// Node ranks omitted: assigned in join order, from 0 (over c10d the store's host is
// node 0: MultiNodeRendezvous.OmittedNodeRanksAreAssignedWithTheStoreHostAsNodeZero).
// The agent on 127.0.0.3 joins alone first, so it is node 0 and MASTER_ADDR is its
// address on every node.
TEST_F(EtcdTest, OmittedNodeRanksAreAssignedInJoinOrder) {
    Job job;
    job.nnodes = 3;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.addr = "127.0.0.3", .actions = {"env"}}));
    ddprun::EtcdClient client({{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
    const std::string first_record = "/ddprun/" + m_run_id + "/r0/info/0";
    bool joined = wait_until(
        [&] {
            return client.call("/v3/kv/range", {{"key", ddprun::etcd_base64(first_record)}})
                .contains("kvs");
        },
        30s);
    ASSERT_TRUE(joined) << "the first agent never joined\n" << stderr_of(agents);
    agents.push_back(start_node(job, {.addr = "127.0.0.1", .actions = {"env"}}));
    agents.push_back(start_node(job, {.addr = "127.0.0.2", .actions = {"env"}}));
    auto r = wait_nodes(agents);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0, 0})) << describe_all(r);
    std::set<std::string> node_ranks;
    std::set<int> ranks;
    for (std::size_t agent = 0; agent < 3; ++agent) {
        auto env = env_by_rank(r[agent].out);
        ASSERT_EQ(env.size(), 2u) << describe_all(r);
        for (auto& [rank, e] : env) {
            ranks.insert(rank);
            node_ranks.insert(e["NODE_RANK"]);
            EXPECT_EQ(e["RANK"], std::to_string(std::atoi(e["NODE_RANK"].c_str()) * 2 +
                                                std::atoi(e["LOCAL_RANK"].c_str())))
                << describe_all(r);
            EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.3") << "node 0 is the first to join";
            if (agent == 0) {
                EXPECT_EQ(e["NODE_RANK"], "0") << describe_all(r);
            }
        }
    }
    EXPECT_EQ(node_ranks, (std::set<std::string>{"0", "1", "2"})) << describe_all(r);
    EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5})) << describe_all(r);
}

TEST_F(EtcdTest, AnAgentOnEtcdNeverLoadsLibtorch) {
    Job job;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.addr = "127.0.0.1", .actions = sleepers(m_dir)}));
    agents.push_back(start_node(job, {.addr = "127.0.0.2", .actions = sleepers(m_dir)}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    for (const auto& agent : agents) {
        pid_t pid = agent_of(*agent);
        ASSERT_GT(pid, 0);
        EXPECT_FALSE(maps_libtorch(pid)) << "the agent " << pid << " loaded libtorch";
    }
    for (const auto& agent : agents) agent->send_signal(SIGTERM);
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143})) << describe_all(r);
}

TEST_F(EtcdTest, SeveralEndpointsSkipAMemberThatIsDown) {
    // The first endpoint has nothing behind it: the agents go on to the next.
    Job job;
    job.flags = {"--rdzv_backend=etcd", fmt::format("--rdzv_endpoint=127.0.0.1:{},{}", free_port(),
                                                    SharedEtcd::get().endpoints())};
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"exit", "0"}},
                             {.addr = "127.0.0.2", .actions = {"exit", "0"}}});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
}

TEST_F(EtcdTest, BadEndpointsAndBackendsAreOneLine) {
    struct Case {
        std::string name;
        std::vector<std::string> flags;
        int exit_code;
        std::string says;
    };
    const int nothing = free_port();
    // An HTTP server that is not etcd.
    const int http_port = free_port();
    pid_t http = ::fork();
    if (http == 0) {
        ::execl(k_python.c_str(), k_python.c_str(), "-m", "http.server", "--bind", "127.0.0.1",
                std::to_string(http_port).c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    add_service(http);
    ASSERT_TRUE(wait_until([&] { return port_accepts("127.0.0.1", http_port); }, 20s))
        << "python3 -m http.server did not start";
    const std::vector<Case> cases = {
        {"not etcd",
         {"--rdzv_backend=etcd", fmt::format("--rdzv_endpoint=127.0.0.1:{}", http_port)},
         k_rendezvous_exit,
         "is not etcd's v3 API"},
        {"etcd-v2", {"--rdzv_backend=etcd-v2"}, 2, "ddprun speaks etcd's v3 API"},
        {"no etcd",
         {"--rdzv_backend=etcd", fmt::format("--rdzv_endpoint=127.0.0.1:{}", nothing),
          "--rdzv_conf=read_timeout=2"},
         k_rendezvous_exit,
         "no etcd"},
        // Over c10d, MultiNodeRendezvous.AnUnresolvableMasterHostFailsEveryNodeAtOnce.
        {"a host that does not resolve",
         {"--rdzv_backend=etcd", "--rdzv_endpoint=etcd.invalid:2379", "--rdzv_conf=read_timeout=2"},
         k_rendezvous_exit,
         "etcd.invalid:2379"},
        {"a list without etcd",
         {"--rdzv_endpoint=127.0.0.1:1,127.0.0.1:2"},
         2,
         "several endpoints are the members of an etcd cluster"},
    };
    for (const auto& c : cases) {
        std::vector<std::string> args = {"--nnodes=2", "--nproc_per_node=1"};
        args.insert(args.end(), c.flags.begin(), c.flags.end());
        args.insert(args.end(), {k_fake_worker, "exit", "0"});
        auto r = run(args);
        EXPECT_EQ(r.exit_code, c.exit_code) << c.name << "\n" << r.describe();
        auto lines = own_lines_with(r.err, {c.says});
        EXPECT_EQ(lines.size(), 1u) << c.name << "\n" << r.describe();
        EXPECT_TRUE(recorded_pids().empty()) << c.name << ": a worker started";
    }
    ::kill(http, SIGKILL);
    ::waitpid(http, nullptr, 0);
}

// The real example jobs over etcd: the C++ libtorch trainer (the PyTorch DDP one,
// examples/ddp_train.py, is MultiNodePython.DdpTrainAcrossTwoAgents/etcd).
TEST_F(EtcdTest, TheExampleDdpJobsRunOverEtcd) {
    const std::string cpp_example =
        std::string(ddprun_test::build_paths::examples_bin_dir) + "/train";
    struct Example {
        std::string name;
        std::vector<std::string> program;
        bool available;
        std::string says;
    };
    const std::vector<Example> examples = {
        {"train (C++)",
         {cpp_example, "--steps", "5"},
         ::access(cpp_example.c_str(), X_OK) == 0,
         "[0]: "},
    };
    for (const auto& example : examples) {
        SCOPED_TRACE(example.name);
        if (!example.available) {
            std::cout << "[ SKIPPED  ] " << example.name << ": not built or no torch here\n";
            continue;
        }
        m_run_id += "e";
        RunOptions options;
        options.env = {{"PYTHON_EXEC", k_python}};
        Job job;
        job.guard = 100s;  // four torch imports on a shared 2-core machine
        auto r = run_nodes(job,
                           {{.addr = "127.0.0.1", .program = example.program},
                            {.addr = "127.0.0.2", .program = example.program}},
                           options);
        EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
        EXPECT_TRUE(contains(r[0].out + r[1].out, example.says)) << describe_all(r);
    }
}

// A stray writer under the job's prefix (another program, a typo in someone's
// etcdctl): garbage where the round's stop and the exit barrier's counter live.
TEST_F(EtcdTest, AStrayWriterUnderThePrefixGivesOneLineNeverACrash) {
    struct Case {
        std::string key;  // under the prefix and run id
        std::string says;
    };
    for (const Case& c : std::vector<Case>{{"r0/stop", "malformed record under"},
                                           {"r0/finished", "not a number"}}) {
        SCOPED_TRACE(c.key);
        m_run_id += "x";
        Job job;
        // Node 1's workers finish (so the barrier counts) once node 0's run; those wait.
        const std::vector<std::string> actions = {"ready",     m_dir + "/ready.{rank}",
                                                  "wait-file", m_dir + "/ready.0",
                                                  "wait-file", m_dir + "/ready.1",
                                                  "if-rank",   "2",
                                                  "exit",      "0",
                                                  "if-rank",   "3",
                                                  "exit",      "0",
                                                  "sleep",     "300"};
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        agents.push_back(
            start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
        if (c.key == "r0/finished") {
            // Written before anyone counts: the first add fails.
            ddprun::EtcdClient writer(
                {{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
            writer.call("/v3/kv/put",
                        {{"key", ddprun::etcd_base64("/ddprun/" + m_run_id + "/" + c.key)},
                         {"value", ddprun::etcd_base64("garbage")}});
        }
        agents.push_back(
            start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
        wait_ready(4, agents);
        if (HasFatalFailure()) return;
        if (c.key == "r0/stop") {
            ddprun::EtcdClient writer(
                {{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
            writer.call("/v3/kv/put",
                        {{"key", ddprun::etcd_base64("/ddprun/" + m_run_id + "/" + c.key)},
                         {"value", ddprun::etcd_base64("{not json")}});
        }
        auto r = wait_nodes(agents);
        EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, k_rendezvous_exit}))
            << describe_all(r);
        for (const auto& result : r)
            EXPECT_EQ(own_lines_with(result.err, {c.says}).size(), 1u) << describe_all(r);
        for (int rank = 0; rank < 4; ++rank)
            std::remove(path(fmt::format("ready.{}", rank)).c_str());
    }
}

// The keys under this test's run id, now (on the shared etcd, or the one at `port`).
std::int64_t run_keys(const std::string& run_id, int port = 0) {
    ddprun::EtcdClient client(
        {{{"127.0.0.1", port != 0 ? port : SharedEtcd::get().client_ports().front()}}, 5s});
    const std::string prefix = run_id.empty() ? "/ddprun/" : "/ddprun/" + run_id + "/";
    std::string end = prefix;
    end.back() = static_cast<char>(end.back() + 1);
    auto answer = client.call("/v3/kv/range", {{"key", ddprun::etcd_base64(prefix)},
                                               {"range_end", ddprun::etcd_base64(end)},
                                               {"count_only", true}});
    return ddprun::etcd_int64(answer, "count");
}

// A fixed-size job's keys go when it ends, however it ends, and its run id can be
// used again at once: runs in a row under one id, ranks given and assigned, one failing.
TEST_F(EtcdTest, AFixedSizeJobLeavesNoKeyAndItsRunIdRunsAgain) {
    Job job;
    struct Run {
        bool assigned;
        int expected;  // rank 3's exit code, and so the job's
    };
    for (const Run& run :
         {Run{false, 0}, Run{true, 0}, Run{false, 3}, Run{true, 0}, Run{false, 0}}) {
        SCOPED_TRACE(fmt::format("ranks {}, rank 3 exits {}", run.assigned ? "assigned" : "given",
                                 run.expected));
        const std::vector<std::string> actions = {
            "if-rank", "3", "exit", std::to_string(run.expected), "exit", "0"};
        auto r = run_nodes(
            job, {{.node_rank = run.assigned ? -1 : 0, .addr = "127.0.0.1", .actions = actions},
                  {.node_rank = run.assigned ? -1 : 1, .addr = "127.0.0.2", .actions = actions}});
        if (run.expected == 0) {
            ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
        } else {
            // A worker's failure: every node stops with the failing worker's code.
            ASSERT_EQ(exit_codes(r), (std::vector<int>{run.expected, run.expected}))
                << describe_all(r);
        }
        EXPECT_EQ(run_keys(m_run_id), 0) << describe_all(r);
    }
}

// The keys of a job whose agents were all SIGKILLed (no agent counts out) go with
// their leases: 2 x heartbeat_timeout + exit_barrier_timeout after the last renewal.
// An elastic job's agents share one lease, renewed by each.
TEST_F(EtcdTest, TheKeysOfAJobWhoseAgentsAllDiedGoWithTheirLeases) {
    for (const bool elastic : {false, true}) {
        SCOPED_TRACE(elastic ? "elastic" : "fixed size");
        m_run_id += elastic ? "-elastic" : "";
        Job job;
        if (elastic) job.min_nnodes = 1;
        job.conf["heartbeat_timeout"] = "2";
        job.conf["exit_barrier_timeout"] = "2";
        const auto bound = 2 * 2s + 2s;
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        for (const char* addr : {"127.0.0.1", "127.0.0.2"})
            agents.push_back(start_node(
                job, {.addr = addr, .actions = {"ready", path("ready.{rank}"), "sleep", "120"}}));
        wait_ready(4, agents);
        if (HasFatalFailure()) return;
        EXPECT_GT(run_keys(m_run_id), 0);
        for (auto& agent : agents) kill_node(*agent);
        const auto killed = std::chrono::steady_clock::now();
        auto r = wait_nodes(agents);
        EXPECT_TRUE(wait_until([&] { return run_keys(m_run_id) == 0; }, bound + 10s))
            << run_keys(m_run_id) << " keys left " << (bound + 10s).count() << " s after the kill\n"
            << describe_all(r);
        std::cerr << "the dead job's keys went "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - killed)
                         .count()
                  << " ms after the kill (the leases' TTL: "
                  << std::chrono::duration_cast<std::chrono::seconds>(bound).count() << " s)\n";
        for (int rank = 0; rank < 4; ++rank)
            std::filesystem::remove(path(fmt::format("ready.{}", rank)));
    }
}

// An elastic job's keys go with its last agent, and its run id can be used again at
// once. An agent still arriving (its e/arriving key) keeps them: a job run then under
// the id of the one that ended is one line, exit 75, no worker; the keys then go with
// the job's lease.
TEST_F(EtcdTest, AnElasticJobLeavesNoKeyAndItsRunIdRunsAgain) {
    m_run_id += "-elastic";
    Job elastic;
    elastic.min_nnodes = 1;
    elastic.conf["last_call_timeout"] = "1";  // the first round without a second agent
    elastic.conf["heartbeat_timeout"] = "2";
    elastic.conf["exit_barrier_timeout"] = "2";
    for (int run = 0; run < 3; ++run) {
        auto once = run_nodes(elastic, {{.addr = "127.0.0.1", .actions = {"exit", "0"}}});
        ASSERT_EQ(exit_codes(once), (std::vector<int>{0})) << describe_all(once);
        EXPECT_EQ(run_keys(m_run_id), 0) << describe_all(once);
    }
    // Two agents that end together: whichever leaves last removes the keys.
    auto pair = run_nodes(elastic, {{.addr = "127.0.0.1", .actions = {"exit", "0"}},
                                    {.addr = "127.0.0.2", .actions = {"exit", "0"}}});
    ASSERT_EQ(exit_codes(pair), (std::vector<int>{0, 0})) << describe_all(pair);
    EXPECT_EQ(run_keys(m_run_id), 0) << describe_all(pair);

    ddprun::EtcdClient client({{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
    const std::int64_t lease =
        ddprun::etcd_int64(client.call("/v3/lease/grant", {{"TTL", "60"}}), "ID");
    client.call("/v3/kv/put",
                {{"key", ddprun::etcd_base64("/ddprun/" + m_run_id + "/e/arriving/test")},
                 {"value", ddprun::etcd_base64("1")},
                 {"lease", std::to_string(lease)}});
    auto kept = run_nodes(elastic, {{.addr = "127.0.0.1", .actions = {"exit", "0"}}});
    ASSERT_EQ(exit_codes(kept), (std::vector<int>{0})) << describe_all(kept);
    EXPECT_GT(run_keys(m_run_id), 1) << "an arriving agent's job is removed under it";
    const auto elastic_workers = recorded_pids().size();
    auto twice = run_nodes(elastic, {{.addr = "127.0.0.1", .actions = {"exit", "0"}}});
    EXPECT_EQ(exit_codes(twice), (std::vector<int>{k_rendezvous_exit})) << describe_all(twice);
    EXPECT_EQ(own_lines_with(twice[0].err, {"already ended (the job has finished",
                                            "give this job its own --rdzv_id"})
                  .size(),
              1u)
        << describe_all(twice);
    EXPECT_EQ(recorded_pids().size(), elastic_workers) << "no worker may start";
    client.call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    EXPECT_TRUE(wait_until([&] { return run_keys(m_run_id) == 0; }, 2 * 2s + 2s + 10s))
        << run_keys(m_run_id) << " keys left after the job's lease";
}

// 200 short jobs in a row under one run id, on an etcd that compacts its own
// history as a site runs it (periodic, every second here): no key is left, and
// the space in use in etcd's database after the last is what it was after the
// first 20, within etcd's own slack (its freelist and bbolt's pages).
TEST_F(EtcdTest, TwoHundredJobsLeaveEtcdsDatabaseAsTheyFoundIt) {
    ddprun::EtcdCluster own(1, {},
                            {"--auto-compaction-mode=periodic", "--auto-compaction-retention=1s"});
    if (!own.ready()) GTEST_SKIP() << own.error();
    add_service(own.pid(0));
    const int port = own.client_ports().front();
    ddprun::EtcdClient client({{{"127.0.0.1", port}}, 5s});
    // Once etcd compacted past everything written so far: a read at the revision
    // before the last is refused.
    auto in_use_once_compacted = [&] {
        const std::int64_t last =
            ddprun::header_revision(client.call("/v3/kv/range", {{"key", "AA=="}}));
        const bool compacted = wait_until(
            [&] {
                try {
                    client.call("/v3/kv/range", {{"key", "AA=="}, {"revision", last - 1}});
                    return false;
                } catch (const ddprun::StoreError& e) {
                    return std::string(e.what()).find("compacted") != std::string::npos;
                }
            },
            30s);
        EXPECT_TRUE(compacted) << "etcd did not compact within 30 s";
        json status = client.call("/v3/maintenance/status", json::object());
        return std::pair{ddprun::etcd_int64(status, "dbSizeInUse"),
                         ddprun::etcd_int64(status, "dbSize")};
    };
    Job job;
    job.flags = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + own.endpoints()};
    Job elastic = job;
    elastic.min_nnodes = 1;
    std::pair<std::int64_t, std::int64_t> after_20{};
    for (int run = 1; run <= 200; ++run) {
        // Every tenth an elastic job (its shared lease and its own records).
        auto r = run_nodes(run % 10 == 0 ? elastic : job,
                           {{.addr = "127.0.0.1", .actions = {"exit", "0"}},
                            {.addr = "127.0.0.2", .actions = {"exit", "0"}}});
        ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << "run " << run << describe_all(r);
        ASSERT_EQ(run_keys(m_run_id, port), 0) << "run " << run << describe_all(r);
        if (run == 20) after_20 = in_use_once_compacted();
    }
    const auto after_200 = in_use_once_compacted();
    EXPECT_EQ(run_keys("", port), 0) << "keys left under /ddprun/";
    std::cerr << fmt::format(
        "etcd's database after 20 jobs: {} B in use of {} B; after 200: {} B in use of {} B\n",
        after_20.first, after_20.second, after_200.first, after_200.second);
    // The slack: the pages bbolt keeps for its freelist and the last compaction's
    // leftovers, 64 KiB in use (above the 36-57 KiB they take); the file, which
    // bbolt never shrinks without a defragmentation, grows by free pages it could
    // not reuse at once, 128 KiB (above the +53 to +62 KiB it grows). Leases left
    // to their TTL, one per agent, would add 0.2 KiB in use per job, 36 KiB over
    // these 180 jobs: more than the slack leaves room for.
    EXPECT_LE(after_200.first, after_20.first + 64 * 1024);
    EXPECT_LE(after_200.second, after_20.second + 128 * 1024);
}

// An elastic job's leader record (who leads) holding garbage: one line, no worker.
TEST_F(EtcdTest, AStrayLeaderRecordOfAnElasticJobIsOneLine) {
    ddprun::EtcdClient writer({{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s});
    writer.call("/v3/kv/put", {{"key", ddprun::etcd_base64("/ddprun/" + m_run_id + "/e/leader")},
                               {"value", ddprun::etcd_base64("garbage")}});
    Job job;
    job.min_nnodes = 1;
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"exit", "0"}}});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[0].err, {"malformed record under", "e/leader", "'garbage'"}).size(),
              1u)
        << describe_all(r);
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

// A three-member etcd: its raft leader, which is also the member every agent talks
// to (first in the list), is killed mid-job.
TEST_F(EtcdTest, TheEtcdLeaderKilledMidJobTheJobGoesOn) {
    ddprun::EtcdCluster three(3);
    if (!three.ready()) GTEST_SKIP() << three.error();
    for (int member = 0; member < three.size(); ++member) add_service(three.pid(member));
    const int leader = three.leader();
    ASSERT_GE(leader, 0) << "no member says it leads";
    Job job;
    job.flags = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + three.endpoints_from(leader)};
    job.conf["heartbeat_timeout"] = "5";
    const std::string go = m_dir + "/go";
    const std::vector<std::string> actions = {"ready", m_dir + "/ready.{rank}", "wait-file", go};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.addr = "127.0.0.1", .actions = actions}));
    agents.push_back(start_node(job, {.addr = "127.0.0.2", .actions = actions}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    three.kill(leader);
    // A few heartbeats through the survivors, then the job ends normally.
    std::this_thread::sleep_for(3s);
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
}

TEST_F(EtcdTest, TheWholeEtcdClusterGoneEveryAgentExits75) {
    auto own = std::make_unique<ddprun::EtcdCluster>(1);
    if (!own->ready()) GTEST_SKIP() << own->error();
    add_service(own->pid(0));
    Job job;
    job.flags = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + own->endpoints()};
    job.conf["heartbeat_timeout"] = "2";
    job.conf["read_timeout"] = "2";
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.addr = "127.0.0.1", .actions = sleepers(m_dir)}));
    agents.push_back(start_node(job, {.addr = "127.0.0.2", .actions = sleepers(m_dir)}));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    own->kill(0);
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, k_rendezvous_exit}))
        << describe_all(r);
    for (const auto& result : r)
        EXPECT_FALSE(own_lines_with(result.err, {"etcd"}).empty()) << describe_all(r);
}

}  // namespace
}  // namespace ddprun_it
