// The event log's formatters (pure) and its writer on real files: the line
// format docs/events.md promises, each event's fields, and that a log that
// cannot be written never stops the job.
#include "ddprun/events/event_log.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ddprun/cli/cli.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

EventTime at(std::int64_t ns_since_epoch) {
    return EventTime(
        std::chrono::duration_cast<EventTime::duration>(std::chrono::nanoseconds(ns_since_epoch)));
}

TEST(EventTime, IsRfc3339UtcWithNineFractionalDigits) {
    EXPECT_EQ(format_event_time(at(0)), "1970-01-01T00:00:00.000000000Z");
    // 2026-12-01T23:20:02 UTC
    const std::int64_t secs = 1796167202;
    EXPECT_EQ(format_event_time(at(secs * 1'000'000'000 + 123'456'789)),
              "2026-12-01T23:20:02.123456789Z");
    EXPECT_EQ(format_event_time(at(secs * 1'000'000'000 + 5)), "2026-12-01T23:20:02.000000005Z");
}

TEST(EventTime, SortsAsTheTimeDoes) {
    std::vector<std::int64_t> times = {0,
                                       1,
                                       999'999'999,
                                       1'000'000'000,
                                       1796167202'000000000,
                                       1796167202'000000001,
                                       1796167203'000000000};
    for (std::size_t i = 1; i < times.size(); ++i)
        EXPECT_LT(format_event_time(at(times[i - 1])), format_event_time(at(times[i])));
}

TEST(EventLine, TimeFirstThenSchemaEventAndNode) {
    EventFields fields;
    fields["round"] = 3;
    fields["text"] = "a \"quoted\"\nline";
    const std::string line =
        format_event_line(at(1'000'000'000), EventNode{2, "gpu07"}, "round", fields);
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
    EXPECT_TRUE(
        line.starts_with("{\"time\":\"1970-01-01T00:00:01.000000000Z\",\"schema\":1,"
                         "\"event\":\"round\",\"node_rank\":2,\"host\":\"gpu07\","))
        << line;
    auto parsed = json::parse(line);
    EXPECT_EQ(parsed["round"], 3);
    EXPECT_EQ(parsed["text"], "a \"quoted\"\nline");
}

TEST(EventLine, InvalidUtf8IsReplacedNotThrown) {
    EventFields fields;
    fields["message"] = std::string("bad \xff byte");
    std::string line;
    EXPECT_NO_THROW(line = format_event_line(at(0), EventNode{0, "h"}, "failure", fields));
    EXPECT_FALSE(json::parse(line, nullptr, false).is_discarded()) << line;
}

TEST(EventFieldsOf, JobStartCarriesConfigSchedulerAndSources) {
    LaunchContext context;
    context.config.nnodes = 2;
    context.config.node_rank = 1;
    context.config.rdzv_backend = "c10d";
    context.config.program = "./train";
    context.config.args = {"--lr", "0.1"};
    context.config.scheduler = "slurm";
    context.config.value_sources = {{"nnodes", "2 (SLURM_NNODES)"},
                                    {"node_rank", "1 (SLURM_NODEID)"}};
    context.nproc = 4;
    context.resources.devices = {"0", "1", "2", "3"};
    auto f = job_start_event(context, 1234);
    EXPECT_EQ(f["agent_pid"], 1234);
    EXPECT_EQ(f["scheduler"], "slurm");
    EXPECT_EQ(f["value_sources"]["nnodes"], "2 (SLURM_NNODES)");
    EXPECT_EQ(f["config"]["nnodes"], 2);
    EXPECT_EQ(f["config"]["nproc_per_node"], 4);
    EXPECT_EQ(f["config"]["node_rank"], 1);
    EXPECT_TRUE(f["config"]["master_port"].is_null());
    EXPECT_EQ(f["config"]["args"], json::array({"--lr", "0.1"}));
    EXPECT_EQ(f["devices"].size(), 4u);
    EXPECT_TRUE(f["ddprun_version"].is_string());

    LaunchContext plain;
    auto g = job_start_event(plain, 1);
    EXPECT_TRUE(g["value_sources"].is_object()) << "an empty object, not null";
    EXPECT_TRUE(g["config"]["node_rank"].is_null());
}

TEST(EventFieldsOf, RoundHasMembersWorldSizeAndMaster) {
    RoundInfo info;
    info.round = 2;
    info.restart_count = 1;
    info.node_rank = 1;
    info.nproc_per_node = {2, 3};
    info.master_addr = "10.0.0.1";
    info.master_port = 29500;
    info.change = "node 2 left";
    auto f = round_event(info);
    EXPECT_EQ(f["round"], 2);
    EXPECT_EQ(f["restart_count"], 1);
    EXPECT_EQ(f["nnodes"], 2);
    EXPECT_EQ(f["nproc_per_node"], json::array({2, 3}));
    EXPECT_EQ(f["world_size"], 5);
    EXPECT_EQ(f["master_addr"], "10.0.0.1");
    EXPECT_EQ(f["master_port"], 29500);
    EXPECT_EQ(f["change"], "node 2 left");
}

TEST(EventFieldsOf, WorkerStartAndEnd) {
    auto start = worker_start_event(1, WorkerGroup::Running{5, 1, 4321, "GPU-abc"});
    EXPECT_EQ(start["round"], 1);
    EXPECT_EQ(start["rank"], 5);
    EXPECT_EQ(start["local_rank"], 1);
    EXPECT_EQ(start["pid"], 4321);
    EXPECT_EQ(start["devices"], "GPU-abc");

    WorkerOutcome exited;
    exited.rank = 5;
    exited.local_rank = 1;
    exited.pid = 4321;
    exited.exit_code = 3;
    exited.error_message = "ValueError: x";
    auto end = worker_end_event(1, exited, 1500ms);
    EXPECT_EQ(end["exit_code"], 3);
    EXPECT_TRUE(end["signal"].is_null());
    EXPECT_EQ(end["failed"], true);
    EXPECT_EQ(end["stopped_by_ddprun"], false);
    EXPECT_DOUBLE_EQ(end["duration_s"].get<double>(), 1.5);
    EXPECT_EQ(end["error_message"], "ValueError: x");

    WorkerOutcome killed = exited;
    killed.exit_code = 0;
    killed.signal = SIGKILL;
    killed.stopped_by_ddprun = true;
    auto k = worker_end_event(1, killed, 0ns);
    EXPECT_EQ(k["exit_code"], 128 + SIGKILL);
    EXPECT_EQ(k["signal"], "SIGKILL");
    EXPECT_EQ(k["stopped_by_ddprun"], true);

    WorkerOutcome ok;
    EXPECT_EQ(worker_end_event(0, ok, 0ns)["failed"], false);
}

FailureRecord worker_failure() {
    FailureRecord r;
    r.kind = FailureKind::Worker;
    r.node_rank = 1;
    r.host = "gpu02";
    r.rank = 3;
    r.local_rank = 1;
    r.pid = 99;
    r.exit_code = 7;
    r.time_ms = 1796167202123;
    r.message = "rank 3 exited with 7";
    return r;
}

TEST(EventFieldsOf, FailureNamesTheRootCause) {
    auto f = failure_event(0, worker_failure());
    EXPECT_EQ(f["round"], 0);
    const auto& c = f["root_cause"];
    EXPECT_EQ(c["kind"], "worker");
    EXPECT_EQ(c["node_rank"], 1);
    EXPECT_EQ(c["host"], "gpu02");
    EXPECT_EQ(c["rank"], 3);
    EXPECT_EQ(c["local_rank"], 1);
    EXPECT_EQ(c["pid"], 99);
    EXPECT_EQ(c["exit_code"], 7);
    EXPECT_TRUE(c["signal"].is_null());
    EXPECT_EQ(c["time"], "2026-12-01T23:20:02.123000000Z");
    EXPECT_EQ(c["message"], "rank 3 exited with 7");
}

TEST(EventFieldsOf, StopSaysWhetherItCameFromAnotherNode) {
    StopEvent failure{StopEvent::Kind::Failure, worker_failure(), "", 7};
    auto here = round_stop_event(0, failure, 1);
    EXPECT_EQ(here["kind"], "failure");
    EXPECT_EQ(here["exit_code"], 7);
    EXPECT_EQ(here["from_other_node"], false);
    EXPECT_EQ(here["root_cause"]["rank"], 3);
    EXPECT_EQ(round_stop_event(0, failure, 0)["from_other_node"], true);

    StopEvent done{StopEvent::Kind::Done, {}, "", 0};
    auto d = round_stop_event(2, done, 0);
    EXPECT_EQ(d["kind"], "done");
    EXPECT_TRUE(d["root_cause"].is_null());
    EXPECT_EQ(d["from_other_node"], false);

    auto lost = round_stop_event(0, store_lost("the store at x:1 stopped answering"), 0);
    EXPECT_EQ(lost["kind"], "store_lost");
    EXPECT_EQ(lost["message"], "the store at x:1 stopped answering");
}

TEST(EventFieldsOf, RestartMembershipHangBarrier) {
    auto r = restart_event(0, 1, 3, "rank 3 failed");
    EXPECT_EQ(r["restart"], 1);
    EXPECT_EQ(r["max_restarts"], 3);
    EXPECT_EQ(r["reason"], "rank 3 failed");

    EXPECT_EQ(membership_change_event(4, "node 1 joined")["change"], "node 1 joined");

    FailureRecord hung = worker_failure();
    hung.kind = FailureKind::Hang;
    EXPECT_EQ(hang_event(1, hung)["root_cause"]["kind"], "hang");

    auto entered = exit_barrier_event(0, std::nullopt);
    EXPECT_EQ(entered["state"], "entered");
    EXPECT_TRUE(entered["waited_s"].is_null());
    auto left = exit_barrier_event(0, 250ms);
    EXPECT_EQ(left["state"], "left");
    EXPECT_DOUBLE_EQ(left["waited_s"].get<double>(), 0.25);
}

TEST(EventFieldsOf, JobEnd) {
    auto ok = job_end_event(0, 1, 0, StopEvent{StopEvent::Kind::Done, {}, "", 0});
    EXPECT_EQ(ok["exit_code"], 0);
    EXPECT_EQ(ok["rounds"], 1);
    EXPECT_EQ(ok["restarts"], 0);
    EXPECT_TRUE(ok["root_cause"].is_null());

    auto failed =
        job_end_event(7, 2, 1, StopEvent{StopEvent::Kind::Failure, worker_failure(), "", 7});
    EXPECT_EQ(failed["exit_code"], 7);
    EXPECT_EQ(failed["root_cause"]["rank"], 3);
    EXPECT_EQ(failed["message"], "rank 3 exited with 7");

    auto early = job_end_event(130, 0, 0, std::nullopt);
    EXPECT_TRUE(early["root_cause"].is_null());
    EXPECT_EQ(early["message"], "");
}

class EventLogFile : public ::testing::Test {
  protected:
    void SetUp() override {
        char tmpl[] = "/tmp/ddprun_event_log_XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        m_dir = tmpl;
    }
    void TearDown() override { std::filesystem::remove_all(m_dir); }
    std::vector<std::string> lines(const std::string& path) {
        std::ifstream in(path);
        std::vector<std::string> out;
        for (std::string line; std::getline(in, line);) out.push_back(line);
        return out;
    }
    std::string m_dir;
};

TEST_F(EventLogFile, AppendsOneLinePerEvent) {
    const std::string path = m_dir + "/events.jsonl";
    { std::ofstream(path) << "an earlier job's line\n"; }
    EventLog log;
    log.open(path, "node-a");
    ASSERT_TRUE(log.enabled());
    log.write("job_start", [] { return EventFields::object(); });
    log.set_node_rank(3);
    log.write("round", [] { return EventFields{{"round", 0}}; });
    auto got = lines(path);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], "an earlier job's line");
    auto first = json::parse(got[1]);
    EXPECT_EQ(first["event"], "job_start");
    EXPECT_EQ(first["node_rank"], -1);
    EXPECT_EQ(first["host"], "node-a");
    auto second = json::parse(got[2]);
    EXPECT_EQ(second["node_rank"], 3);
    EXPECT_LE(first["time"].get<std::string>(), second["time"].get<std::string>());
}

TEST_F(EventLogFile, OffWithoutOpenAndBuildersAreNotCalled) {
    EventLog log;
    bool called = false;
    log.write("round", [&] {
        called = true;
        return EventFields::object();
    });
    EXPECT_FALSE(log.enabled());
    EXPECT_FALSE(called);
}

TEST_F(EventLogFile, AnUnopenablePathIsOffNotAnError) {
    EventLog log;
    log.open(m_dir + "/no/such/dir/events.jsonl", "h");
    EXPECT_FALSE(log.enabled());
    log.write("round", [] { return EventFields::object(); });  // no crash, no throw
}

TEST_F(EventLogFile, AFailedWriteTurnsTheLogOff) {
    // /dev/full: every write fails with ENOSPC, as a full disk does.
    if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
    EventLog log;
    log.open("/dev/full", "h");
    ASSERT_TRUE(log.enabled());
    log.write("job_start", [] { return EventFields::object(); });
    EXPECT_FALSE(log.enabled());
    bool called = false;
    log.write("round", [&] {
        called = true;
        return EventFields::object();
    });
    EXPECT_FALSE(called) << "after the warning, no more attempts";
}

TEST(EventLogFlag, FromTheFlagOrDdprunEventLog) {
    auto flag = parse_command_line({"--event-log", "/tmp/e.jsonl", "./train"}, {});
    ASSERT_TRUE(flag.has_value());
    EXPECT_EQ(flag->config.event_log, "/tmp/e.jsonl");
    auto underscore = parse_command_line({"--event_log=/tmp/u.jsonl", "./train"}, {});
    ASSERT_TRUE(underscore.has_value());
    EXPECT_EQ(underscore->config.event_log, "/tmp/u.jsonl");
    auto env = parse_command_line({"./train"}, {{"DDPRUN_EVENT_LOG", "/tmp/v.jsonl"}});
    ASSERT_TRUE(env.has_value());
    EXPECT_EQ(env->config.event_log, "/tmp/v.jsonl");
    auto none = parse_command_line({"./train"}, {});
    ASSERT_TRUE(none.has_value());
    EXPECT_EQ(none->config.event_log, "");
    auto empty = parse_command_line({"--event-log=", "./train"}, {});
    ASSERT_FALSE(empty.has_value());
    EXPECT_NE(empty.error().message.find("--event-log"), std::string::npos)
        << empty.error().message;
}

TEST(EventLogFlag, EveryAgentOfHostsGetsIt) {
    // Each host writes PATH on its own disk.
    auto parsed = parse_command_line({"--hosts", "a,b", "--event-log=/var/log/e.jsonl", "./t"}, {});
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
    const auto& options = parsed->config.fan_out.agent_options;
    EXPECT_NE(std::find(options.begin(), options.end(), "--event-log=/var/log/e.jsonl"),
              options.end());
}

}  // namespace
}  // namespace ddprun
