// --health-check: each agent runs a real command (a site script as /bin/sh
// runs it) before each join. A node whose check fails, hangs or is stopped
// stays out: alone, it starts no worker; in a fixed-size job every node fails
// at once naming it; in an elastic job of three agents the other two form the
// round without it, at the first join and at a restart.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

using namespace std::chrono_literals;

constexpr int k_unhealthy = 69;

// A check that fails where $SICK names a file that exists (the node's state: a test
// creates it, or a worker does, before a restart), printing what nhc would.
constexpr const char* k_sick_check =
    "echo checking; if [ -n \"$SICK\" ] && [ -e \"$SICK\" ]; then "
    "echo 'ERROR:  nhc:  Health check failed:  check_nv_healthmon: GPU 0 has 2 uncorrectable "
    "ECC errors' >&2; exit 1; fi";

// The plan variables a check got, as "NAME=VALUE" lines a check wrote to a file.
std::map<std::string, std::string> plan_in(const std::string& file) {
    std::map<std::string, std::string> vars;
    std::istringstream in(read_text_file(file));
    for (std::string line; std::getline(in, line);)
        if (auto eq = line.find('='); eq != std::string::npos)
            vars[line.substr(0, eq)] = line.substr(eq + 1);
    return vars;
}

// Writes the check's plan variables to <dir>/plan.<restart count>, or on several nodes
// <dir>/plan.<GROUP_RANK>.<restart count>.
std::string recording_check(const std::string& dir, bool by_node = false) {
    return "env | grep -E "
           "'^(CUDA_VISIBLE_DEVICES|LOCAL_WORLD_SIZE|GROUP_RANK|DDPRUN_RANKS|"
           "TORCHELASTIC_RESTART_COUNT|TORCHELASTIC_RUN_ID)=' > " +
           dir + "/plan." + (by_node ? "$GROUP_RANK." : "") + "$TORCHELASTIC_RESTART_COUNT";
}

class HealthCheck : public IntegrationTest {};

// Before each round: round 0's workers fail, and the check runs again before the
// restart, with the node's devices, its ranks and the restart count.
TEST_F(HealthCheck, TheCheckSeesTheNodesPlanBeforeEachRound) {
    RunOptions options;
    options.env = {{"CUDA_VISIBLE_DEVICES", "4,5,6"}};
    auto r = run(
        {"--nproc_per_node=2", "--max_restarts=1", "--rdzv_id=hc",
         "--health-check=" + recording_check(m_dir), k_fake_worker, "if-restart", "0", "exit", "3"},
        options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (int restart : {0, 1}) {
        SCOPED_TRACE(restart);
        EXPECT_EQ(plan_in(path(fmt::format("plan.{}", restart))),
                  (std::map<std::string, std::string>{
                      {"CUDA_VISIBLE_DEVICES", "4,5"},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"GROUP_RANK", "0"},
                      {"DDPRUN_RANKS", "0-1"},
                      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
                      {"TORCHELASTIC_RUN_ID", "hc"},
                  }));
    }
}

// A failing check: exit 69, its last five lines in the one error, and no worker.
TEST_F(HealthCheck, AFailingCheckKeepsTheNodeOutWithItsLastLines) {
    auto r = run({"--nproc_per_node=2", "--health-check",
                  "for i in 1 2 3 4 5 6; do echo line $i; done; echo 'GPU 3: fell off the bus' "
                  ">&2; exit 4",
                  k_fake_worker, "ready", path("ready.{rank}")});
    EXPECT_EQ(r.exit_code, k_unhealthy) << r.describe();
    EXPECT_FALSE(std::filesystem::exists(path("ready.0"))) << r.describe();
    const auto own = ddprun_own_lines(r.err);
    ASSERT_EQ(own.size(), 6u) << r.describe();
    EXPECT_TRUE(own[0].starts_with("ddprun: error: node 0 (")) << own[0];
    EXPECT_TRUE(own[0].ends_with(
        ") is unhealthy: its --health-check `for i in 1 2 3 4 5 6; do echo line $i; done; echo "
        "'GPU 3: fell off the bus' >&2; exit 4` exited with 4; its last lines:"))
        << own[0];
    EXPECT_EQ(std::vector<std::string>(own.begin() + 1, own.end()),
              (std::vector<std::string>{"    | line 3", "    | line 4", "    | line 5",
                                        "    | line 6", "    | GPU 3: fell off the bus"}))
        << r.describe();
}

// A mistyped command is a failing check that says so.
TEST_F(HealthCheck, ACommandThatIsNotThereIsUnhealthySayingSo) {
    auto r = run({"--health-check=/nonexistent/nhc -t 30", k_fake_worker});
    EXPECT_EQ(r.exit_code, k_unhealthy) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"`/nonexistent/nhc -t 30` exited with 127"}).size(), 1u)
        << r.describe();
    EXPECT_TRUE(contains(r.err, "    | /bin/sh: 1: /nonexistent/nhc: not found\n")) << r.describe();
}

// A hung check fails at --health-check-timeout, and what it started is gone.
TEST_F(HealthCheck, AHungCheckIsUnhealthyAtItsTimeoutAndLeavesNothing) {
    const std::string pid_file = path("sleeper.pid");
    auto r =
        run({"--health-check-timeout=1",
             "--health-check=echo still checking; sleep 120 & echo $! > " + pid_file + "; wait",
             k_fake_worker, "ready", path("ready.0")});
    EXPECT_EQ(r.exit_code, k_unhealthy) << r.describe();
    EXPECT_LT(r.elapsed, 10s) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"did not finish within 1 s (--health-check-timeout): killed "
                                     "it; its last lines:"})
                  .size(),
              1u)
        << r.describe();
    EXPECT_TRUE(contains(r.err, "    | still checking\n")) << r.describe();
    EXPECT_FALSE(std::filesystem::exists(path("ready.0")));
    const pid_t sleeper = std::stoi(read_text_file(pid_file));
    EXPECT_TRUE(wait_until([&] { return !process_alive(sleeper); }, 10s))
        << "the check's sleep " << sleeper << " outlived ddprun";
}

// A stop signal while the check runs stops ddprun at once, the check with it.
TEST_F(HealthCheck, AStopSignalDuringTheCheckStopsItAtOnce) {
    const std::string pid_file = path("check.pid");
    auto ddprun = start({"--health-check=echo $$ > " + pid_file + ".tmp; mv " + pid_file + ".tmp " +
                             pid_file + "; exec sleep 120",
                         k_fake_worker, "ready", path("ready.0")});
    ASSERT_TRUE(wait_for_file(pid_file, 30s));
    const pid_t check = std::stoi(read_text_file(pid_file));
    ddprun->send_signal(SIGTERM);
    auto r = ddprun->wait();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"received SIGTERM during the health check; giving up"}).size(),
              1u)
        << r.describe();
    EXPECT_FALSE(std::filesystem::exists(path("ready.0")));
    EXPECT_TRUE(wait_until([&] { return !process_alive(check); }, 10s));
}

// --dry-run says what the check is and what a failure does; it runs nothing.
TEST_F(HealthCheck, TheDryRunSaysWhatTheCheckDecides) {
    auto r =
        run({"--dry-run", "--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1",
             "--health-check=touch " + path("ran"), "--health-check-timeout=20", k_fake_worker});
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "health check: each node runs `touch " + path("ran") +
                                    "` before each join (at most 20 s); a node whose check fails "
                                    "stays out: the job fails on every node with exit code 69\n"))
        << r.describe();
    EXPECT_FALSE(std::filesystem::exists(path("ran")));
}

// --- several agents ---------------------------------------------------------------

class HealthCheckTwoNodes : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(MultiNode, HealthCheckTwoNodes, ::testing::ValuesIn(k_backends),
                         backend_name);

// Node 1 is unhealthy from the start, or becomes so before the restart (its worker
// leaves the file its check looks for): both nodes fail at once, well within the join
// timeout, with exit code 69, node 0 naming node 1 and its check's last line.
TEST_P(HealthCheckTwoNodes, AnUnhealthyNodeFailsEveryNodeAtOnceNamingIt) {
    for (bool at_restart : {false, true}) {
        SCOPED_TRACE(at_restart ? "at the restart" : "at the start");
        m_run_id += at_restart ? "r" : "s";
        const std::string sick = path(fmt::format("sick.{}", at_restart));
        if (!at_restart) write_text_file(sick, "");
        Job job;
        job.conf = {{"join_timeout", "60"}};
        job.flags = {"--max_restarts=1",
                     "--health-check=" + recording_check(m_dir, true) + "; " + k_sick_check};
        // Rank 2 (node 1) leaves the file, and every rank waits for it before round 0 fails.
        const std::vector<std::string> actions = {
            "if-rank", "2", "ready", sick, "wait-file", sick, "if-restart", "0", "exit", "3"};
        RunOptions sick_node;
        sick_node.env = {{"SICK", sick}};
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        agents.push_back(
            start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
        agents.push_back(
            start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}, sick_node));
        auto r = wait_nodes(agents);
        EXPECT_EQ(exit_codes(r), (std::vector<int>{k_unhealthy, k_unhealthy})) << describe_all(r);
        for (const auto& node : r) EXPECT_LT(node.elapsed, 30s) << describe_all(r);
        EXPECT_EQ(own_lines_with(r[0].err, {"ddprun: error: node 1 (", ") is unhealthy",
                                            "exited with 1: ERROR:  nhc:  Health check failed:"})
                      .size(),
                  1u)
            << describe_all(r);
        EXPECT_EQ(own_lines_with(r[1].err, {"ddprun: error: node 1 (", ") is unhealthy",
                                            at_restart ? "the job cannot restart without it"
                                                       : "the job cannot start without it"})
                      .size(),
                  1u)
            << describe_all(r);
        // Round 0's workers ran only where the check passed everywhere.
        EXPECT_EQ(contains(r[1].err, "restarting the workers"), at_restart) << describe_all(r);
        // Node 1's plan: its rank was given; its ranks are known once a round has run.
        auto plan = plan_in(path(fmt::format("plan.1.{}", at_restart ? 1 : 0)));
        EXPECT_EQ(plan["GROUP_RANK"], "1");
        EXPECT_EQ(plan["LOCAL_WORLD_SIZE"], "2");
        EXPECT_EQ(plan.contains("DDPRUN_RANKS") ? plan["DDPRUN_RANKS"] : "unset",
                  at_restart ? "2-3" : "unset");
    }
}

// --- an elastic job ----------------------------------------------------------------

class HealthCheckElastic : public MultiNodeBackendTest {
  protected:
    // --nnodes=2:3, one worker each; over c10d 127.0.0.1 hosts the store (and leads).
    Job elastic_job() const {
        Job job;
        job.min_nnodes = 2;
        job.nnodes = 3;
        job.nproc = 1;
        job.conf = {{"join_timeout", "20"}, {"last_call_timeout", "1"}, {"heartbeat_timeout", "2"}};
        job.flags = {"--shutdown_timeout=5", "--max_restarts=1",
                     std::string("--health-check=") + k_sick_check};
        return job;
    }
    Node node(const Job& job, int n, const std::vector<std::string>& actions) const {
        std::string conf = etcd() ? "" : fmt::format("is_host={}", n == 1 ? 1 : 0);
        for (const auto& [key, value] : job.conf)
            conf += (conf.empty() ? "" : ",") + key + "=" + value;
        return Node{.addr = fmt::format("127.0.0.{}", n),
                    .flags = {"--rdzv_conf=" + conf},
                    .actions = actions};
    }
    // Three agents; the third one's check looks at `sick`. Workers record each start
    // as "w.<restart>.<rank>.of<world>", then run `then`.
    std::vector<RunResult> run_three(const std::string& sick,
                                     const std::vector<std::string>& then) {
        Job job = elastic_job();
        std::vector<std::string> actions = {"ready", m_dir + "/w.{restart}.{rank}.of{world}"};
        actions.insert(actions.end(), then.begin(), then.end());
        RunOptions third;
        third.env = {{"SICK", sick}};
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        for (int n = 1; n <= 3; ++n)
            agents.push_back(start_node(job, node(job, n, actions), n == 3 ? third : RunOptions{}));
        return wait_nodes(agents);
    }
    std::vector<std::string> starts() const {
        std::vector<std::string> names;
        for (const auto& entry : std::filesystem::directory_iterator(m_dir)) {
            const std::string name = entry.path().filename().string();
            if (name.starts_with("w.") && name.find(".tmp") == std::string::npos)
                names.push_back(name);
        }
        std::sort(names.begin(), names.end());
        return names;
    }
};
INSTANTIATE_TEST_SUITE_P(MultiNode, HealthCheckElastic, ::testing::ValuesIn(k_backends),
                         backend_name);

// The third agent is unhealthy from the start: the other two form the round after
// the last call and finish; it exits 69 saying that it leaves.
TEST_P(HealthCheckElastic, AnUnhealthyAgentStaysOutAndTheOthersFormTheRound) {
    const std::string sick = path("sick");
    write_text_file(sick, "");
    auto r = run_three(sick, {"sleep", "0.5"});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0, k_unhealthy})) << describe_all(r);
    EXPECT_EQ(starts(), (std::vector<std::string>{"w.0.0.of2", "w.0.1.of2"})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[2].err, {"is unhealthy",
                                        "it leaves the job, which goes on without "
                                        "it; its last lines:"})
                  .size(),
              1u)
        << describe_all(r);
}

// All three run round 0, whose workers fail leaving the file the third agent's check
// looks for: before the restart it stays out, and the other two re-form and finish.
TEST_P(HealthCheckElastic, AnAgentUnhealthyBeforeARestartLeavesAndTheOthersGoOn) {
    const std::string sick = path("sick");
    auto r = run_three(
        sick, {"if-restart", "0", "ready", sick, "if-restart", "0", "exit", "3", "sleep", "0.5"});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0, k_unhealthy})) << describe_all(r);
    // Round 0 had three nodes (the first worker to fail may stop the others before they
    // record their start); the restart has the two healthy ones.
    const auto all = starts();
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const std::string& s) {
        return s.starts_with("w.0.") && s.ends_with("of3");
    })) << describe_all(r);
    std::vector<std::string> restart;
    std::copy_if(all.begin(), all.end(), std::back_inserter(restart),
                 [](const std::string& s) { return !s.starts_with("w.0."); });
    EXPECT_EQ(restart, (std::vector<std::string>{"w.1.0.of2", "w.1.1.of2"})) << describe_all(r);
    for (int n : {0, 1})
        EXPECT_EQ(own_lines_with(r[static_cast<std::size_t>(n)].err,
                                 {"left (its --health-check exited with 1: ERROR:  nhc:"})
                      .size(),
                  1u)
            << describe_all(r);
}

}  // namespace
}  // namespace ddprun_it
