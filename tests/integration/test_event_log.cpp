// --event-log on real jobs: every line every node wrote is checked against the
// schema in docs/events.md (read from the document itself, so the two cannot
// drift apart), and the events must tell the job's story. A log that cannot be
// opened or written costs one warning and never the job's exit code.

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "multi_node.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

using json = nlohmann::json;

// docs/events.md's tables: for each `<!-- schema: event NAME -->` or
// `<!-- schema: object NAME -->` marker, the table rows after it: field -> type.
struct Schema {
    std::map<std::string, std::map<std::string, std::string>> events;
    std::map<std::string, std::map<std::string, std::string>> objects;
};

Schema read_schema() {
    Schema schema;
    std::ifstream in(ddprun_test::build_paths::events_doc);
    std::map<std::string, std::string>* table = nullptr;
    const std::regex marker(R"(<!-- schema: (event|object) (\w+) -->)");
    const std::regex row(R"(^\| `(\w+)` \| ([a-z ]+) \|)");
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_search(line, m, marker)) {
            table = m[1] == "event" ? &schema.events[m[2]] : &schema.objects[m[2]];
        } else if (table && std::regex_search(line, m, row)) {
            (*table)[m[1]] = m[2];
        } else if (table && !line.starts_with("|")) {
            table = nullptr;
        }
    }
    return schema;
}

bool has_type(const json& value, const std::string& type) {
    if (type.ends_with(" or null")) {
        return value.is_null() || has_type(value, type.substr(0, type.size() - 8));
    }
    if (type == "string") return value.is_string();
    if (type == "integer") return value.is_number_integer();
    if (type == "number") return value.is_number();
    if (type == "boolean") return value.is_boolean();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    ADD_FAILURE() << "docs/events.md names an unknown type: " << type;
    return false;
}

// `value` has exactly the fields `table` lists, each of its type; nested objects
// that have a table of their own (root_cause, config) are checked against it.
void expect_fields(const json& value, const std::map<std::string, std::string>& table,
                   const Schema& schema, const std::string& where) {
    for (const auto& [field, type] : table) {
        ASSERT_TRUE(value.contains(field)) << where << ": no field " << field << "\n" << value;
        const json& v = value[field];
        EXPECT_TRUE(has_type(v, type)) << where << ": " << field << " is not " << type << "\n"
                                       << value;
        auto nested = schema.objects.find(field);
        if (nested != schema.objects.end() && v.is_object())
            expect_fields(v, nested->second, schema, where + "." + field);
    }
    for (const auto& [field, v] : value.items()) {
        EXPECT_TRUE(table.contains(field))
            << where << ": field " << field << " is not in docs/events.md\n"
            << value;
    }
}

// One line checked against the schema: its JSON, or a discarded value.
json check_line(const std::string& line, const Schema& schema) {
    static const std::regex time(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$)");
    json event = json::parse(line, nullptr, false);
    if (event.is_discarded()) {
        ADD_FAILURE() << "not JSON: " << line;
        return event;
    }
    EXPECT_TRUE(line.starts_with("{\"time\":\"")) << "time must come first: " << line;
    json common = json::object();
    json own = json::object();
    const auto& common_table = schema.objects.at("common");
    for (const auto& [field, v] : event.items())
        (common_table.contains(field) ? common : own)[field] = v;
    expect_fields(common, common_table, schema, "every line");
    if (!event.contains("event") || !event["event"].is_string() || !event["time"].is_string() ||
        !event["host"].is_string())
        return json(json::value_t::discarded);
    const std::string name = event["event"];
    auto table = schema.events.find(name);
    if (table == schema.events.end()) {
        ADD_FAILURE() << "unknown event " << name << ": " << line;
        return json(json::value_t::discarded);
    }
    expect_fields(own, table->second, schema, name);
    EXPECT_EQ(event["schema"], 1);
    EXPECT_FALSE(event["host"].get<std::string>().empty()) << line;
    EXPECT_TRUE(std::regex_match(event["time"].get<std::string>(), time)) << line;
    return event;
}

// Every line of one node's file, checked against the schema; the parsed lines.
std::vector<json> read_events(const std::string& file, const Schema& schema) {
    std::vector<json> events;
    std::ifstream in(file);
    EXPECT_TRUE(in.good()) << "no event log at " << file;
    std::string previous_time;
    for (std::string line; std::getline(in, line);) {
        SCOPED_TRACE(file);
        json event = check_line(line, schema);
        if (event.is_discarded()) continue;
        const std::string t = event["time"];
        EXPECT_LE(previous_time, t) << "times must not go back within a file";
        previous_time = t;
        events.push_back(std::move(event));
    }
    return events;
}

std::vector<json> named(const std::vector<json>& events, const std::string& name) {
    std::vector<json> found;
    for (const auto& e : events)
        if (e["event"] == name) found.push_back(e);
    return found;
}

std::string names_of(const std::vector<json>& events) {
    std::string text;
    for (const auto& e : events) text += e["event"].get<std::string>() + " ";
    return text;
}

std::vector<std::string> warnings_about_the_log(const std::string& err) {
    std::vector<std::string> found;
    for (const auto& line : ddprun_own_lines(err))
        if (line.starts_with("ddprun: warning:") && contains(line, "event log"))
            found.push_back(line);
    return found;
}

TEST(EventLogSchema, TheDocumentHasEveryTable) {
    Schema schema = read_schema();
    for (const char* object : {"common", "root_cause", "config"})
        EXPECT_TRUE(schema.objects.contains(object)) << object;
    for (const char* event :
         {"job_start", "round", "worker_start", "worker_end", "failure", "stop", "hang",
          "exit_barrier", "restart", "progress", "health_check", "membership_change", "job_end"})
        EXPECT_FALSE(schema.events[event].empty()) << event;
    // Every example line of the document fits its own tables; every event has one.
    std::ifstream in(ddprun_test::build_paths::events_doc);
    std::set<std::string> shown;
    for (std::string line; std::getline(in, line);) {
        if (!line.starts_with("    {\"time\"")) continue;
        json event = check_line(line.substr(4), schema);
        if (!event.is_discarded()) shown.insert(event["event"].get<std::string>());
    }
    for (const auto& [event, table] : schema.events)
        EXPECT_TRUE(shown.contains(event)) << "no example line for " << event;
}

class EventLogJob : public IntegrationTest {};

TEST_F(EventLogJob, SingleNodeFailureRestartAndFailureAgain) {
    // Round 0: rank 1 exits 3 once rank 0 is up; round 1 (the one restart): exits 5.
    const std::string log = path("events.jsonl");
    auto r = run({"--nproc_per_node=2",
                  "--max_restarts=1",
                  "--event-log",
                  log,
                  k_fake_worker,
                  "ready",
                  path("r{restart}.{rank}"),
                  "if-rank",
                  "1",
                  "wait-file",
                  path("r{restart}.0"),
                  "if-restart",
                  "0",
                  "if-rank",
                  "1",
                  "exit",
                  "3",
                  "if-restart",
                  "1",
                  "if-rank",
                  "1",
                  "exit",
                  "5",
                  "sleep",
                  "300"});
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 5) << r.describe();
    EXPECT_TRUE(warnings_about_the_log(r.err).empty()) << r.describe();

    const Schema schema = read_schema();
    auto events = read_events(log, schema);
    const std::string story = names_of(events);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.front()["event"], "job_start") << story;
    EXPECT_EQ(events.back()["event"], "job_end") << story;
    for (const auto& e : events) EXPECT_EQ(e["node_rank"], 0) << e;

    const auto start = events.front();
    EXPECT_EQ(start["config"]["nproc_per_node"], 2);
    EXPECT_EQ(start["config"]["max_restarts"], 1);
    EXPECT_EQ(start["config"]["program"], k_fake_worker);

    auto rounds = named(events, "round");
    ASSERT_EQ(rounds.size(), 2u) << story;
    EXPECT_EQ(rounds[0]["restart_count"], 0);
    EXPECT_EQ(rounds[1]["restart_count"], 1);
    EXPECT_EQ(rounds[0]["world_size"], 2);
    EXPECT_EQ(rounds[0]["nproc_per_node"], json::array({2}));

    auto starts = named(events, "worker_start");
    auto ends = named(events, "worker_end");
    EXPECT_EQ(starts.size(), 4u) << story;
    EXPECT_EQ(ends.size(), 4u) << story;
    std::set<int> started_pids;
    for (const auto& s : starts) started_pids.insert(s["pid"].get<int>());
    for (const auto& e : ends)
        EXPECT_TRUE(started_pids.contains(e["pid"].get<int>())) << "ended, never started: " << e;

    auto failures = named(events, "failure");
    ASSERT_EQ(failures.size(), 2u) << story;
    EXPECT_EQ(failures[0]["root_cause"]["rank"], 1);
    EXPECT_EQ(failures[0]["root_cause"]["exit_code"], 3);
    EXPECT_EQ(failures[0]["root_cause"]["kind"], "worker");
    EXPECT_EQ(failures[1]["root_cause"]["exit_code"], 5);
    // The failed worker's own end, and rank 0 stopped by ddprun.
    for (const auto& e : ends) {
        if (e["rank"] == 1) {
            EXPECT_TRUE(e["failed"].get<bool>()) << e;
            EXPECT_FALSE(e["stopped_by_ddprun"].get<bool>()) << e;
        } else {
            EXPECT_TRUE(e["stopped_by_ddprun"].get<bool>()) << e;
        }
    }

    auto stops = named(events, "stop");
    ASSERT_EQ(stops.size(), 2u) << story;
    EXPECT_EQ(stops[0]["kind"], "failure");
    EXPECT_EQ(stops[0]["from_other_node"], false);

    auto restarts = named(events, "restart");
    ASSERT_EQ(restarts.size(), 1u) << story;
    EXPECT_EQ(restarts[0]["restart"], 1);
    EXPECT_EQ(restarts[0]["max_restarts"], 1);

    const auto end = events.back();
    EXPECT_EQ(end["exit_code"], 5);
    EXPECT_EQ(end["rounds"], 2);
    EXPECT_EQ(end["restarts"], 1);
    ASSERT_TRUE(end["root_cause"].is_object()) << end;
    EXPECT_EQ(end["root_cause"]["rank"], 1);

    // The story's order: the restart comes after round 0's failure and before round 1.
    auto index_of = [&](const json& wanted) {
        return std::find(events.begin(), events.end(), wanted) - events.begin();
    };
    EXPECT_LT(index_of(failures[0]), index_of(restarts[0]));
    EXPECT_LT(index_of(restarts[0]), index_of(rounds[1]));
}

TEST_F(EventLogJob, ASuccessfulJobPassesTheExitBarrier) {
    const std::string log = path("events.jsonl");
    auto r = run({"--nproc_per_node=2", "--event-log", log, k_fake_worker, "print", "1"});
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    auto events = read_events(log, read_schema());
    auto barrier = named(events, "exit_barrier");
    ASSERT_EQ(barrier.size(), 2u) << names_of(events);
    EXPECT_EQ(barrier[0]["state"], "entered");
    EXPECT_EQ(barrier[1]["state"], "left");
    auto stops = named(events, "stop");
    ASSERT_EQ(stops.size(), 1u);
    EXPECT_EQ(stops[0]["kind"], "done");
    EXPECT_EQ(events.back()["event"], "job_end");
    EXPECT_EQ(events.back()["exit_code"], 0);
    EXPECT_TRUE(events.back()["root_cause"].is_null());
}

TEST_F(EventLogJob, AHangIsLoggedWithTheRankThatStopped) {
    // Rank 1 beats three times, then stops; rank 0 beats on (as test_hang.cpp's case).
    const std::string log = path("events.jsonl");
    auto r = run({"--nproc_per_node=2", "--hang-timeout=1", "--event-log", log, k_fake_worker,
                  "if-rank", "1", "beat", "3:100:step", "if-rank", "1", "sleep", "120", "beat",
                  "600:100:step", "sleep", "120"});
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 124) << r.describe();
    auto events = read_events(log, read_schema());
    const std::string story = names_of(events);
    auto failures = named(events, "failure");
    ASSERT_EQ(failures.size(), 1u) << story;
    EXPECT_EQ(failures[0]["root_cause"]["kind"], "hang");
    EXPECT_EQ(failures[0]["root_cause"]["rank"], 1);
    auto hangs = named(events, "hang");
    ASSERT_EQ(hangs.size(), 1u) << story;
    EXPECT_EQ(hangs[0]["root_cause"]["rank"], 1);
    EXPECT_EQ(events.back()["event"], "job_end") << story;
    EXPECT_EQ(events.back()["exit_code"], 124);
    EXPECT_EQ(events.back()["root_cause"]["kind"], "hang");
}

// --health-check: a passing check before each round, then a failing one that ends the job.
TEST_F(EventLogJob, EveryHealthCheckIsLoggedBeforeItsRound) {
    const std::string log = path("events.jsonl");
    const std::string sick = path("sick");
    auto r = run({"--nproc_per_node=1", "--max_restarts=2", "--event-log", log,
                  "--health-check=echo checked; test ! -e " + sick + " || exit 5", k_fake_worker,
                  "if-restart", "1", "ready", sick, "exit", "3"});
    EXPECT_EQ(r.exit_code, 69) << r.describe();
    auto events = read_events(log, read_schema());
    const std::string story = names_of(events);
    EXPECT_EQ(story,
              "job_start health_check round worker_start worker_end failure stop restart "
              "health_check round worker_start worker_end failure stop restart health_check "
              "job_end ")
        << story;
    auto checks = named(events, "health_check");
    ASSERT_EQ(checks.size(), 3u) << story;
    EXPECT_EQ(checks[0]["healthy"], true);
    EXPECT_EQ(checks[0]["outcome"], "passed");
    EXPECT_EQ(checks[0]["exit_code"], 0);
    EXPECT_EQ(checks[0]["lines"], json::array({"checked"}));
    EXPECT_EQ(checks[2]["healthy"], false);
    EXPECT_EQ(checks[2]["round"], 2);
    EXPECT_EQ(checks[2]["outcome"], "exited with 5");
    EXPECT_EQ(checks[2]["exit_code"], 5);
    EXPECT_EQ(events.back()["exit_code"], 69);
}

TEST_F(EventLogJob, TheEnvironmentVariableNamesTheLog) {
    const std::string log = path("from_env.jsonl");
    RunOptions options;
    options.env = {{"DDPRUN_EVENT_LOG", log}};
    auto r = run({"--nproc_per_node=1", k_fake_worker, "exit", "0"}, options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    auto events = read_events(log, read_schema());
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back()["event"], "job_end");
}

TEST_F(EventLogJob, AnUnwritablePathIsOneWarningAndTheJobRunsOn) {
    // A directory cannot be opened for writing, not even by root.
    auto r = run(
        {"--nproc_per_node=2", "--event-log", m_dir, k_fake_worker, "if-rank", "1", "exit", "3"});
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 3) << "the worker's exit code, as without the log\n" << r.describe();
    auto warnings = warnings_about_the_log(r.err);
    ASSERT_EQ(warnings.size(), 1u) << r.describe();
    EXPECT_TRUE(contains(warnings[0], m_dir)) << warnings[0];
    EXPECT_TRUE(contains(warnings[0], "the job goes on without it")) << warnings[0];
}

// A tmpfs of 64 KiB, filled up, stands for a full disk (as test_reliability.cpp's
// --log_dir case does). Needs root (mount); skipped with the reason otherwise.
TEST_F(EventLogJob, AFullDiskIsOneWarningAndTheJobRunsOn) {
    const std::string dir = path("disk");
    std::filesystem::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0)
        GTEST_SKIP() << "cannot mount a small tmpfs here (needs root): " << std::strerror(errno);
    struct Unmount {
        std::string dir;
        ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
    } unmount{dir};
    {
        std::ofstream filler(dir + "/filler", std::ios::binary);
        std::string block(4096, 'x');
        for (int i = 0; i < 64 && filler.good(); ++i) filler.write(block.data(), block.size());
    }
    const std::string log = dir + "/events.jsonl";
    auto r =
        run({"--nproc_per_node=2", "--event-log", log, k_fake_worker, "if-rank", "1", "exit", "3"});
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    auto warnings = warnings_about_the_log(r.err);
    ASSERT_EQ(warnings.size(), 1u) << r.describe();
    EXPECT_TRUE(contains(warnings[0], log) && contains(warnings[0], "No space left"))
        << warnings[0];
}

// Agents on 127.0.0.1, .2 (.3) over c10d, each with its own log.
class EventLogMultiNode : public MultiNodeTest {};

TEST_F(EventLogMultiNode, EveryNodeTellsTheSameStory) {
    // Round 0: rank 2 (node 1) exits 4 once everyone is up; round 1: all succeed.
    std::vector<std::string> actions = {"ready", path("r{restart}.{rank}")};
    for (int rank : {0, 1, 3}) {
        actions.insert(actions.end(), {"if-restart", "0", "if-rank", "2", "wait-file",
                                       path(fmt::format("r0.{}", rank))});
    }
    actions.insert(actions.end(), {"if-restart", "0", "if-rank", "2", "exit", "4", "if-restart",
                                   "0", "sleep", "300"});
    Job job;
    job.flags = {"--max_restarts=1"};
    const std::vector<std::string> logs = {path("node0.jsonl"), path("node1.jsonl")};
    auto r = run_nodes(job, {{.node_rank = 0,
                              .addr = "127.0.0.1",
                              .flags = {"--event-log=" + logs[0]},
                              .actions = actions},
                             {.node_rank = 1,
                              .addr = "127.0.0.2",
                              .flags = {"--event-log=" + logs[1]},
                              .actions = actions}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);

    const Schema schema = read_schema();
    for (int node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        auto events = read_events(logs[static_cast<std::size_t>(node)], schema);
        const std::string story = names_of(events);
        ASSERT_FALSE(events.empty());
        for (const auto& e : events) EXPECT_EQ(e["node_rank"], node) << e;
        EXPECT_EQ(events.front()["event"], "job_start") << story;
        // The default backend: the nodes meet over node 0's c10d TCPStore.
        EXPECT_EQ(events.front()["config"]["rdzv_endpoint"], fmt::format("127.0.0.1:{}", m_port));

        auto rounds = named(events, "round");
        ASSERT_EQ(rounds.size(), 2u) << story;
        for (const auto& round : rounds) {
            EXPECT_EQ(round["world_size"], 4);
            EXPECT_EQ(round["nproc_per_node"], json::array({2, 2}));
            EXPECT_EQ(round["master_addr"], "127.0.0.1");
            EXPECT_GT(round["master_port"].get<int>(), 0);
        }

        auto starts = named(events, "worker_start");
        ASSERT_EQ(starts.size(), 4u) << story;
        std::set<int> ranks;
        for (const auto& s : starts) ranks.insert(s["rank"].get<int>());
        EXPECT_EQ(ranks, (node == 0 ? std::set<int>{0, 1} : std::set<int>{2, 3}));
        EXPECT_EQ(named(events, "worker_end").size(), 4u) << story;

        // The failure is node 1's; node 0 learns of it through the round's stop.
        auto failures = named(events, "failure");
        if (node == 1) {
            ASSERT_EQ(failures.size(), 1u) << story;
            EXPECT_EQ(failures[0]["root_cause"]["rank"], 2);
            EXPECT_EQ(failures[0]["root_cause"]["exit_code"], 4);
        } else {
            EXPECT_TRUE(failures.empty()) << story;
        }
        auto stops = named(events, "stop");
        ASSERT_EQ(stops.size(), 2u) << story;
        EXPECT_EQ(stops[0]["kind"], "failure");
        EXPECT_EQ(stops[0]["root_cause"]["rank"], 2);
        EXPECT_EQ(stops[0]["root_cause"]["node_rank"], 1);
        EXPECT_EQ(stops[0]["from_other_node"], node == 0);
        EXPECT_EQ(stops[1]["kind"], "done");

        ASSERT_EQ(named(events, "restart").size(), 1u) << story;
        auto barrier = named(events, "exit_barrier");
        ASSERT_EQ(barrier.size(), 2u) << story;
        EXPECT_EQ(barrier[0]["state"], "entered");
        EXPECT_EQ(barrier[1]["state"], "left");

        EXPECT_EQ(events.back()["event"], "job_end") << story;
        EXPECT_EQ(events.back()["exit_code"], 0);
        EXPECT_EQ(events.back()["rounds"], 2);
        EXPECT_EQ(events.back()["restarts"], 1);
    }
}

// An elastic job (--nnodes=1:3, over c10d, node ranks assigned at the join): a
// third node joins; the two first nodes log the membership change, no restart.
TEST_F(EventLogMultiNode, AnElasticJobLogsTheMembershipChange) {
    Job job;
    job.min_nnodes = 1;
    job.nnodes = 3;
    job.nproc = 1;
    job.flags = {"--shutdown_timeout=5"};
    const std::vector<std::string> actions = {"ready", path("r{round}.{rank}"), "sleep", "300"};
    auto node = [&](int n) {
        return Node{.addr = fmt::format("127.0.0.{}", n),
                    .flags = {fmt::format("--rdzv_conf=is_host={},join_timeout=20,"
                                          "last_call_timeout=1,heartbeat_timeout=2",
                                          n == 1 ? 1 : 0),
                              fmt::format("--event-log={}", path(fmt::format("n{}.jsonl", n)))},
                    .actions = actions};
    };
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    for (int n : {1, 2}) agents.push_back(start_node(job, node(n)));
    for (int rank : {0, 1})
        ASSERT_TRUE(wait_for_file(path(fmt::format("r0.{}", rank)), 20s)) << stderr_of(agents);
    agents.push_back(start_node(job, node(3)));
    for (int rank : {0, 1, 2})
        ASSERT_TRUE(wait_for_file(path(fmt::format("r1.{}", rank)), 20s)) << stderr_of(agents);
    for (const auto& agent : agents) agent->send_signal(SIGTERM);
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{143, 143, 143})) << describe_all(r);

    const Schema schema = read_schema();
    for (int n : {1, 2}) {
        SCOPED_TRACE(fmt::format("node at 127.0.0.{}", n));
        auto events = read_events(path(fmt::format("n{}.jsonl", n)), schema);
        const std::string story = names_of(events);
        ASSERT_FALSE(events.empty());
        EXPECT_EQ(events.front()["node_rank"], -1) << "not assigned before the first round";
        EXPECT_TRUE(events.front()["config"]["node_rank"].is_null());
        // The SIGTERMs at the end may make a node leave first: another change then.
        auto changes = named(events, "membership_change");
        ASSERT_GE(changes.size(), 1u) << story;
        EXPECT_EQ(changes[0]["round"], 0);
        EXPECT_FALSE(changes[0]["change"].get<std::string>().empty());
        auto rounds = named(events, "round");
        ASSERT_GE(rounds.size(), 2u) << story;
        // Every round after the first follows a change; the last change may be one the
        // SIGTERMs caused, with no round after it (the node's own signal came first).
        EXPECT_GE(rounds.size(), changes.size()) << story;
        EXPECT_LE(rounds.size(), changes.size() + 1) << story;
        EXPECT_EQ(rounds[0]["world_size"], 2);
        EXPECT_EQ(rounds[1]["world_size"], 3);
        EXPECT_EQ(rounds[1]["restart_count"], 0) << "a membership change is not a restart";
        EXPECT_FALSE(rounds[1]["change"].get<std::string>().empty()) << rounds[1];
        EXPECT_TRUE(named(events, "restart").empty()) << story;
        EXPECT_EQ(events.back()["event"], "job_end") << story;
        EXPECT_EQ(events.back()["exit_code"], 143);
    }
}

}  // namespace
}  // namespace ddprun_it
