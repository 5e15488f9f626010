// `ddprun status` against live jobs (docs/status.md), and stragglers named on the
// console: two agents on 127.0.0.1 and 127.0.0.2 meet over a real c10d store or a
// real etcd; the real binary reads them from outside the job through each phase,
// elastic jobs included, with and without the job's secret; a rank made ten times
// slower is named on both nodes, in their event logs, and cleared when it recovers.
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

// A status period of two seconds (a third of the heartbeat timeout), so that each look
// sees what changed within a few seconds. Not 3 s (a period of one): on two loaded
// cores an agent's heartbeat thread can go unscheduled that long, and the job these
// tests read would end 75 under them.
const std::pair<std::string, std::string> k_fast_status{"heartbeat_timeout", "6"};

class StatusTest : public MultiNodeBackendTest {
  protected:
    Job job() const {
        Job j;
        j.conf.insert(k_fast_status);
        j.flags = {"--hang-timeout=60", "--shutdown_timeout=300"};
        j.guard = 90s;
        return j;
    }

    // An elastic job of MIN:MAX nodes whose last call is a second.
    Job elastic_job(int min, int max) const {
        Job elastic = job();
        elastic.min_nnodes = min;
        elastic.nnodes = max;
        elastic.conf["last_call_timeout"] = "1";
        return elastic;
    }

    // An agent of `elastic` on `host` whose workers say they are ready, beat 20 times a
    // second, and end once `done` exists.
    std::unique_ptr<DdprunProcess> start_beating(const Job& elastic, const std::string& host,
                                                 const std::string& done) {
        return start_node(
            elastic, {-1,
                      host,
                      {},
                      {},
                      {"ready", path("ready.{rank}"), "beat-background", "20", "wait-file", done}});
    }

    // `ddprun status` of this test's job, as a user on another machine would type it.
    RunResult status(std::vector<std::string> more = {}) {
        std::vector<std::string> args{"status", "--rdzv_id=" + m_run_id};
        auto rendezvous = rendezvous_flags(etcd(), m_port);
        args.insert(args.end(), rendezvous.begin(), rendezvous.end());
        args.insert(args.end(), more.begin(), more.end());
        RunOptions options;
        options.timeout = 30s;
        return run(args, options);
    }

    // Looks until the screen says `needle`; the last screen.
    RunResult status_until(const std::string& needle, Milliseconds timeout = 30s) {
        RunResult last;
        wait_until(
            [&] {
                last = status();
                return last.exit_code == 0 && contains(last.out, needle);
            },
            timeout);
        return last;
    }

    std::string where() const {
        return etcd() ? "etcd at " + SharedEtcd::get().endpoints().substr(
                                         0, SharedEtcd::get().endpoints().find(','))
                      : fmt::format("the c10d store at 127.0.0.1:{}", m_port);
    }
};

bool matches(const std::string& line, const std::string& pattern) {
    return std::regex_match(line, std::regex(pattern));
}

// A duration as duration_text.hpp writes it: "850 ms", "1.5 s", "2 min 30 s".
const std::string k_duration = "(\\d+ (h|min) )*\\d+(\\.\\d)? (ms|s|min|h)";

// Every phase of a fixed-size job, each screen checked line by line: node 0 alone
// (joining), both running with their ranks' rates, stopping after rank 3 failed
// (rank 0 traps SIGTERM and holds the stop open), and gone once the job ended.
TEST_P(StatusTest, TheScreenThroughAJobsPhases) {
    const std::string go = path("go");
    const std::string release = path("release");
    const std::vector<std::string> actions = {"trap",
                                              "SIGTERM",
                                              "ready",
                                              path("ready.{rank}"),
                                              "beat-background",
                                              "20",
                                              "wait-file",
                                              go,
                                              "if-rank",
                                              "3",
                                              "exit",
                                              "3",
                                              "wait-file",
                                              release};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job(), {0, "127.0.0.1", {}, {}, actions}));

    auto joining = status_until("joining round 0");
    auto lines = split_lines(joining.out);
    ASSERT_EQ(lines.size(), 5u) << joining.describe();
    EXPECT_TRUE(matches(
        lines[0], fmt::format("job '{}' \\({}\\), at \\d\\d:\\d\\d:\\d\\d UTC", m_run_id, where())))
        << lines[0];
    EXPECT_EQ(lines[1], "state:      joining round 0: 1 of 2 nodes");
    EXPECT_EQ(lines[3], "node  host                      agent pid  nproc");
    EXPECT_TRUE(
        matches(lines[4], fmt::format("0     127\\.0\\.0\\.1 +{}  2", agent_of(*agents[0]))))
        << lines[4];

    agents.push_back(start_node(job(), {1, "127.0.0.2", {}, {}, actions}));
    wait_ready(4, agents);
    // Every rank's rate is known a second after its first beat, and its node's next record.
    auto rank_row = [](int rank) {
        return fmt::format("{}      {} +\\d+ +{} +\\d+\\.\\d", rank, rank / 2, k_duration);
    };
    auto every_rate_known = [&](const std::string& out) {
        auto rows = split_lines(out);
        if (rows.size() != 15) return false;
        for (int rank = 0; rank < 4; ++rank)
            if (!matches(rows[11 + static_cast<std::size_t>(rank)], rank_row(rank))) return false;
        return true;
    };
    RunResult running;
    ASSERT_TRUE(wait_until(
        [&] {
            running = status();
            return every_rate_known(running.out);
        },
        30s))
        << running.describe() << stderr_of(agents);
    lines = split_lines(running.out);
    ASSERT_EQ(lines.size(), 15u) << running.out;
    EXPECT_EQ(lines[1], "state:      running round 0");
    EXPECT_EQ(lines[2], "restarts:   0 of 0");
    EXPECT_EQ(lines[3], "nodes:      2 (world size 4)");
    EXPECT_EQ(lines[4], "stragglers: none");
    EXPECT_EQ(lines[6],
              "node  host                      agent pid  ranks     workers  state           "
              "heartbeat");
    for (int node = 0; node < 2; ++node)
        EXPECT_TRUE(
            matches(lines[7 + static_cast<std::size_t>(node)],
                    fmt::format("{}     127\\.0\\.0\\.{} +{}  {}-{} +2/2 +running +{} ago", node,
                                node + 1, agent_of(*agents[static_cast<std::size_t>(node)]),
                                2 * node, 2 * node + 1, k_duration)))
            << lines[7 + static_cast<std::size_t>(node)];
    EXPECT_TRUE(
        matches(lines[10], "rank   node     steps   last step   steps/s  \\(median \\d+\\.\\d\\)"))
        << lines[10];

    write_text_file(go, "");
    auto stopping = status_until("stopping round 0");
    EXPECT_TRUE(contains(stopping.out,
                         "state:      stopping round 0: rank 3 (node 1) failed (exit code 3)\n"))
        << stopping.out;

    write_text_file(release, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{3, 3})) << describe_all(results);
    auto gone = status();
    EXPECT_EQ(gone.exit_code, 1) << gone.describe();
    EXPECT_TRUE(gone.out.empty());
    auto said = ddprun_own_lines(gone.err);
    ASSERT_EQ(said.size(), 1u) << gone.err;
    EXPECT_TRUE(contains(said[0], etcd() ? "no job '" + m_run_id + "'" : "no job answers there"))
        << said[0];
}

// An elastic job (--nnodes=1:2): its round and both nodes, in --json.
TEST_P(StatusTest, AnElasticJobInJson) {
    const Job elastic = elastic_job(1, 2);
    const std::string done = path("done");
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_beating(elastic, "127.0.0.1", done));
    agents.push_back(start_beating(elastic, "127.0.0.2", done));
    nlohmann::json json;
    ASSERT_TRUE(wait_until(
        [&] {
            auto r = status({"--json"});
            if (r.exit_code != 0) return false;
            json = nlohmann::json::parse(r.out, nullptr, false);
            return json.is_object() && json["state"] == "running" && json["nnodes"] == 2 &&
                   json["ranks"].size() == 4;
        },
        45s))
        << json.dump() << stderr_of(agents);
    EXPECT_EQ(json["world_size"], 4);
    EXPECT_EQ(json["run_id"], m_run_id);
    ASSERT_EQ(json["nodes"].size(), 2u);
    std::set<std::string> hosts;
    for (const auto& node : json["nodes"]) {
        EXPECT_EQ(node["workers_alive"], 2) << node.dump();
        EXPECT_EQ(node["round"], json["round"]) << node.dump();
        hosts.insert(node["host"].get<std::string>());
    }
    EXPECT_EQ(hosts, (std::set<std::string>{"127.0.0.1", "127.0.0.2"}));
    write_text_file(done, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{0, 0})) << describe_all(results);
}

// An elastic job (--nnodes=2:3) through its phases: one agent waits for a second
// (forming its first round), then both run round 0 of 2 nodes, then the job ends.
TEST_P(StatusTest, AnElasticJobFormingThenRunning) {
    const Job elastic = elastic_job(2, 3);
    const std::string done = path("done");
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_beating(elastic, "127.0.0.1", done));
    auto forming = status_until("forming its first round (elastic)");
    auto lines = split_lines(forming.out);
    ASSERT_EQ(lines.size(), 2u) << forming.describe();
    EXPECT_EQ(lines[1], "state:      forming its first round (elastic)");
    agents.push_back(start_beating(elastic, "127.0.0.2", done));
    auto running = status_until("nodes:      2 (world size 4)", 45s);
    EXPECT_TRUE(std::regex_search(running.out, std::regex("\nstate:      running round \\d+\n")))
        << running.describe() << stderr_of(agents);
    write_text_file(done, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{0, 0})) << describe_all(results);
}

// Nothing at the endpoint, or no such job there: one line, exit 1.
TEST_P(StatusTest, NoSuchJobIsOneLineAndExit1) {
    auto r = status();
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_TRUE(r.out.empty()) << r.out;
    auto said = ddprun_own_lines(r.err);
    ASSERT_EQ(said.size(), 1u) << r.err;
    EXPECT_TRUE(
        contains(said[0], etcd() ? "no job '" + m_run_id + "' at etcd at" : "no job answers there"))
        << said[0];
}

INSTANTIATE_TEST_SUITE_P(MultiNode, StatusTest, ::testing::ValuesIn(k_backends), backend_name);

class StatusC10d : public MultiNodeTest {
  protected:
    std::vector<std::string> status_args(std::vector<std::string> more = {}) const {
        std::vector<std::string> args{"status", "--rdzv_id=" + m_run_id,
                                      fmt::format("--rdzv_endpoint=127.0.0.1:{}", m_port)};
        args.insert(args.end(), more.begin(), more.end());
        return args;
    }
    RunResult status(std::vector<std::string> more = {}) {
        return run(status_args(std::move(more)));
    }
};

// A job with a secret: a reader without it, or with another, is refused with one line
// and exit 2; with it, the job is shown. The job is untouched either way.
TEST_F(StatusC10d, AJobWithASecretRefusesAReaderWithoutIt) {
    const std::string secret = path("secret");
    const std::string other = path("other");
    write_text_file(secret, "0123456789abcdef0123456789abcdef", 0600);
    write_text_file(other, "fedcba9876543210fedcba9876543210", 0600);
    Job j;
    j.conf.insert(k_fast_status);
    j.conf["secret_file"] = secret;
    const std::string done = path("done");
    const std::vector<std::string> actions = {"ready", path("ready.{rank}"), "wait-file", done};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(j, {0, "127.0.0.1", {}, {}, actions}));
    agents.push_back(start_node(j, {1, "127.0.0.2", {}, {}, actions}));
    wait_ready(4, agents);
    RunResult with;
    ASSERT_TRUE(wait_until(
        [&] {
            with = status({"--rdzv_conf=secret_file=" + secret});
            return contains(with.out, "state:      running round 0");
        },
        30s))
        << with.describe();
    for (const auto& more : {std::vector<std::string>{},
                             std::vector<std::string>{"--rdzv_conf=secret_file=" + other}}) {
        auto refused = status(more);
        EXPECT_EQ(refused.exit_code, 2) << refused.describe();
        auto said = ddprun_own_lines(refused.err);
        ASSERT_EQ(said.size(), 1u) << refused.err;
        EXPECT_TRUE(contains(said[0], "give ddprun status the job's secret")) << said[0];
        EXPECT_TRUE(refused.out.empty());
    }
    write_text_file(done, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{0, 0})) << describe_all(results);
}

// --watch off a terminal: a screen every 2 s, separated by a blank line, until the job
// ends; then one line saying so, exit 0.
TEST_F(StatusC10d, WatchFollowsTheJobToItsEnd) {
    Job j;
    j.conf.insert(k_fast_status);
    const std::string done = path("done");
    const std::vector<std::string> actions = {"ready", path("ready.{rank}"), "wait-file", done};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(j, {0, "127.0.0.1", {}, {}, actions}));
    agents.push_back(start_node(j, {1, "127.0.0.2", {}, {}, actions}));
    wait_ready(4, agents);
    RunOptions options;
    options.timeout = 60s;
    auto watch = start(status_args({"--watch"}), options);
    ASSERT_TRUE(wait_until(
        [&] { return count_occurrences(watch->out_so_far(), "running round 0") >= 2; }, 30s))
        << watch->out_so_far() << watch->err_so_far();
    write_text_file(done, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{0, 0})) << describe_all(results);
    auto watched = watch->wait();
    EXPECT_EQ(watched.exit_code, 0) << watched.describe();
    EXPECT_TRUE(contains(watched.out, "\n\njob '" + m_run_id + "' (")) << watched.out;
    auto lines = non_empty_lines(watched.out);
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(contains(lines.back(), "job '" + m_run_id + "' ended: ")) << watched.out;
    EXPECT_EQ(watched.out.find("\x1b["), std::string::npos) << "no terminal, no escapes";
}

// One rank made ten times slower than the others (its fake_worker beats 2/s instead of
// 20/s while a file exists): node 0 names it on both nodes' consoles and event logs,
// once, and again when the file is gone and it keeps up; `ddprun status` marks it.
TEST_F(StatusC10d, AStragglerIsNamedOnEveryNodeAndCleared) {
    Job j;
    j.conf.insert(k_fast_status);
    j.flags = {"--hang-timeout=60", "--straggler-window=3"};
    j.guard = 90s;
    const std::string done = path("done");
    const std::vector<std::string> actions = {
        "slow-while", path("slow.{rank}"), "ready", path("ready.{rank}"), "beat-background",
        "20",         "wait-file",         done};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    for (int node = 0; node < 2; ++node)
        agents.push_back(
            start_node(j, {node,
                           fmt::format("127.0.0.{}", node + 1),
                           {"--event-log=" + path(fmt::format("events.{}.jsonl", node))},
                           {},
                           actions}));
    wait_ready(4, agents);
    const std::string named = "rank 3 (node 1) is a straggler: ";
    const std::string cleared = "rank 3 (node 1) is no longer a straggler: ";
    write_text_file(path("slow.3"), "");
    ASSERT_TRUE(wait_until(
        [&] {
            return contains(agents[0]->err_so_far(), named) &&
                   contains(agents[1]->err_so_far(), named);
        },
        30s))
        << stderr_of(agents);
    // Node 0's record named it before either console did; a look the loaded machine
    // times out is taken again.
    RunResult marked;
    wait_until(
        [&] {
            marked = status();
            return contains(marked.out, "  straggler\n");
        },
        30s);
    EXPECT_TRUE(std::regex_search(
        marked.out,
        std::regex(
            "\n  rank 3 \\(node 1\\): \\d+\\.\\d steps/s against a median of \\d+\\.\\d, since")))
        << marked.describe();
    EXPECT_TRUE(std::regex_search(marked.out, std::regex("\n3      1 .*  straggler\n")))
        << marked.describe();
    std::filesystem::remove(path("slow.3"));
    ASSERT_TRUE(wait_until(
        [&] {
            return contains(agents[0]->err_so_far(), cleared) &&
                   contains(agents[1]->err_so_far(), cleared);
        },
        30s))
        << stderr_of(agents);
    write_text_file(done, "");
    auto results = wait_nodes(agents);
    EXPECT_EQ(exit_codes(results), (std::vector<int>{0, 0})) << describe_all(results);
    for (std::size_t node = 0; node < 2; ++node) {
        EXPECT_EQ(own_lines_with(results[node].err, {named}).size(), 1u) << results[node].err;
        EXPECT_EQ(own_lines_with(results[node].err, {cleared}).size(), 1u) << results[node].err;
        // Nobody else was ever named.
        EXPECT_EQ(own_lines_with(results[node].err, {"straggler"}).size(), 2u) << results[node].err;
        std::vector<std::string> events;
        for (const auto& line :
             split_lines(read_text_file(path(fmt::format("events.{}.jsonl", node))))) {
            auto event = nlohmann::json::parse(line, nullptr, false);
            if (!event.is_object() || !contains(event.value("event", ""), "straggler")) continue;
            EXPECT_EQ(event["rank"], 3) << line;
            EXPECT_EQ(event["straggler_node_rank"], 1) << line;
            EXPECT_EQ(event["node_rank"], node) << line;
            events.push_back(event["event"]);
        }
        EXPECT_EQ(events, (std::vector<std::string>{"straggler", "straggler_recovered"}));
    }
}

}  // namespace
}  // namespace ddprun_it
