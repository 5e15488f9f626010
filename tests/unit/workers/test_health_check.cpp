// --health-check: the plan the check sees, the lines and words its end is
// reported in, and one run of a real /bin/sh command on an io_context (the
// agent's reaper played by the test's own loop). With real agents and nodes:
// tests/integration/test_health.cpp.
#include "ddprun/workers/health_check.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "ddprun/base/process_tree.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

// Whether `pid` is gone (or a zombie: the test is no subreaper, so init reaps
// it) within 10 s.
bool gone(pid_t pid) {
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < bound) {
        reap_exited([](pid_t, int) {});
        auto ids = process_ids(pid);
        if (!ids || ids->state == 'Z' || ids->state == 'X') return true;
        ::usleep(2000);
    }
    return false;
}

TEST(HealthCheckPlan, TheNodesDevicesOnceEachInLocalRankOrder) {
    LaunchContext ctx;
    ctx.nproc = 3;
    ctx.config.rdzv_id = "job7";
    ctx.resources.devices = {"4", "GPU-8f2a", "7", "9"};
    NodePlan plan = node_plan(ctx);
    EXPECT_EQ(plan.devices, "4,GPU-8f2a,7");  // the three workers', not the node's fourth
    EXPECT_EQ(plan.nproc, 3);
    EXPECT_EQ(plan.run_id, "job7");
    ctx.config.all_devices = true;  // every worker sees them all
    EXPECT_EQ(node_plan(ctx).devices, "4,GPU-8f2a,7,9");
    ctx.resources.devices.clear();  // a CPU job: nothing to set
    EXPECT_EQ(node_plan(ctx).devices, "");
}

TEST(HealthCheckPlan, TheEnvironmentSaysWhatIsKnown) {
    NodePlan plan;
    plan.nproc = 8;
    plan.devices = "0,1,2,3,4,5,6,7";
    plan.run_id = "j";
    using Env = std::vector<std::pair<std::string, std::string>>;
    EXPECT_EQ(health_check_env(plan), (Env{{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                           {"LOCAL_WORLD_SIZE", "8"},
                                           {"TORCHELASTIC_RESTART_COUNT", "0"},
                                           {"TORCHELASTIC_RUN_ID", "j"}}));
    plan.devices.clear();
    plan.node_rank = 1;
    plan.ranks = {{8, 15}};
    plan.restart_count = 2;
    EXPECT_EQ(health_check_env(plan), (Env{{"LOCAL_WORLD_SIZE", "8"},
                                           {"GROUP_RANK", "1"},
                                           {"DDPRUN_RANKS", "8-15"},
                                           {"TORCHELASTIC_RESTART_COUNT", "2"},
                                           {"TORCHELASTIC_RUN_ID", "j"}}));
    plan.ranks = {{3, 3}};
    EXPECT_EQ(health_check_env(plan)[2],
              (std::pair<std::string, std::string>{"DDPRUN_RANKS", "3"}));
}

TEST(HealthCheckReport, TheLastNonBlankLinesTrimmedAndCut) {
    EXPECT_EQ(last_lines("", 5), std::vector<std::string>{});
    EXPECT_EQ(last_lines("a\nb\n\n  \nc  \n\n", 2), (std::vector<std::string>{"b", "c"}));
    EXPECT_EQ(last_lines("no newline", 5), std::vector<std::string>{"no newline"});
    // A progress bar's segments are lines of their own.
    EXPECT_EQ(last_lines("checking 10%\rchecking 100%\r\nERROR: bad\n", 2),
              (std::vector<std::string>{"checking 100%", "ERROR: bad"}));
    auto cut = last_lines(std::string(1000, 'x') + "\n", 1);
    ASSERT_EQ(cut.size(), 1u);
    EXPECT_EQ(cut[0], std::string(300, 'x') + "...");
}

TEST(HealthCheckReport, HowItEnded) {
    HealthCheckResult r;
    EXPECT_EQ(describe_check_end(r, 60s), "passed");
    r.kind = HealthCheckResult::Kind::Failed;
    r.status = 3 << 8;  // exited with 3
    EXPECT_EQ(describe_check_end(r, 60s), "exited with 3");
    r.status = SIGSEGV;
    EXPECT_EQ(describe_check_end(r, 60s), "was killed by SIGSEGV");
    r.kind = HealthCheckResult::Kind::TimedOut;
    EXPECT_EQ(describe_check_end(r, 2500ms),
              "did not finish within 2.5 s (--health-check-timeout): killed it");
    r.kind = HealthCheckResult::Kind::NotStarted;
    r.error = "/bin/sh: No such file or directory";
    EXPECT_EQ(describe_check_end(r, 60s), "could not start: /bin/sh: No such file or directory");
}

// One real run: the test's loop reaps as the agent's does on SIGCHLD.
class HealthCheckRun : public ::testing::Test {
  protected:
    HealthCheckResult run(const std::string& command, std::chrono::milliseconds timeout,
                          Environment env = {}) {
        HealthCheck check(m_io, command, timeout);
        std::optional<HealthCheckResult> result;
        check.start(env, [&](HealthCheckResult r) { result = std::move(r); });
        boost::asio::steady_timer reaper(m_io);
        std::function<void()> reap = [&] {
            reap_exited([](pid_t, int) {});
            check.reaped();
            reaper.expires_after(2ms);
            reaper.async_wait([&](auto ec) {
                if (!ec && !result) reap();
            });
        };
        reap();
        const auto bound = std::chrono::steady_clock::now() + 30s;
        while (!result && std::chrono::steady_clock::now() < bound) m_io.run_one_for(100ms);
        reaper.cancel();
        m_io.poll();
        EXPECT_TRUE(result) << command << " never ended";
        return result.value_or(HealthCheckResult{});
    }
    boost::asio::io_context m_io;
};

TEST_F(HealthCheckRun, ExitZeroIsHealthyAndTheEnvironmentIsTheChecks) {
    auto r = run("echo \"$LOCAL_WORLD_SIZE on $CUDA_VISIBLE_DEVICES\"; test -t 0 || echo no-tty",
                 10s, {{"LOCAL_WORLD_SIZE", "4"}, {"CUDA_VISIBLE_DEVICES", "0,1"}});
    EXPECT_TRUE(r.healthy());
    EXPECT_EQ(r.last_lines, (std::vector<std::string>{"4 on 0,1", "no-tty"}));
}

TEST_F(HealthCheckRun, AFailureKeepsStdoutAndStderrInOrder) {
    auto r =
        run("for i in 1 2 3 4 5 6 7; do echo out $i; done; echo 'ERROR: GPU 3 ECC' >&2; "
            "exit 3",
            10s);
    EXPECT_EQ(r.kind, HealthCheckResult::Kind::Failed);
    ASSERT_TRUE(WIFEXITED(r.status));
    EXPECT_EQ(WEXITSTATUS(r.status), 3);
    EXPECT_EQ(r.last_lines,
              (std::vector<std::string>{"out 4", "out 5", "out 6", "out 7", "ERROR: GPU 3 ECC"}));
}

TEST_F(HealthCheckRun, AHungCheckIsKilledWithItsGroupAtTheTimeout) {
    const std::string pid_file = testing::TempDir() + "/health_check_hung.pid";
    const auto start = std::chrono::steady_clock::now();
    auto r = run("echo started; sleep 30 & echo $! > " + pid_file + "; wait", 300ms);
    EXPECT_EQ(r.kind, HealthCheckResult::Kind::TimedOut);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    EXPECT_EQ(r.last_lines, std::vector<std::string>{"started"});
    pid_t sleeper = 0;
    std::ifstream(pid_file) >> sleeper;
    ASSERT_GT(sleeper, 0);
    EXPECT_TRUE(gone(sleeper));  // killed with the group
}

TEST_F(HealthCheckRun, WhatItLeavesRunningInItsGroupIsKilledAsItEnds) {
    const std::string pid_file = testing::TempDir() + "/health_check_daemon.pid";
    // The leftover holds the pipe open: the check still ends with its own exit.
    auto r = run("sleep 30 & echo $! > " + pid_file + "; echo fine", 20s);
    EXPECT_TRUE(r.healthy());
    EXPECT_EQ(r.last_lines, std::vector<std::string>{"fine"});
    pid_t sleeper = 0;
    std::ifstream(pid_file) >> sleeper;
    ASSERT_GT(sleeper, 0);
    EXPECT_TRUE(gone(sleeper));
}

}  // namespace
}  // namespace ddprun
