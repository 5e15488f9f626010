// WorkerGroup against real processes (tests/fake_worker), as ninja tests its
// subprocesses: each test starts a round, reaps through a SIGCHLD signalfd on
// the loop the way the agent does, and checks outcomes, output and files.
#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/signal_reader.hpp"
#include "worker_fixture.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::Console;
using testing::fake_worker_context;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr auto k_hang_guard = 20s;

class WorkerGroupTest : public ::testing::Test {
  protected:
    TempDir dir;
    Console console{dir.path()};
    boost::asio::io_context io;
    std::optional<LaunchContext> ctx;
    std::unique_ptr<WorkerGroup> group;
    std::unique_ptr<SignalReader> reader;
    std::map<int, WorkerOutcome> exits;  // by rank, as on_exit reported them
    int given_up = 0;

    void make_group(int nproc, std::vector<std::string> args,
                    std::function<void(LaunchContext&)> adjust = {},
                    std::chrono::milliseconds kill_bound = 10s) {
        ctx = fake_worker_context(dir.path() / "scratch", nproc, std::move(args));
        if (adjust) adjust(*ctx);
        auto options = console.options();
        options.kill_bound = kill_bound;
        group = std::make_unique<WorkerGroup>(
            io, *ctx, [this] { ++given_up; }, options);
        reader = std::make_unique<SignalReader>(
            io, std::vector<int>{SIGCHLD}, [this](const ReceivedSignal&) {
                reap_exited([this](pid_t pid, int status) {
                    if (auto outcome = group->on_exit(pid, status)) exits[outcome->rank] = *outcome;
                });
            });
    }

    Status start(int round = 0) {
        RoundInfo info;
        info.nproc_per_node = {ctx->nproc};
        info.master_addr = "127.0.0.1";
        info.master_port = 29999;
        info.restart_count = round;
        return group->start(round, info);
    }

    // Runs the loop until `done` or the hang guard; false on the guard.
    bool run_until(const std::function<bool()>& done) {
        bool expired = false;
        boost::asio::steady_timer guard(io, k_hang_guard);
        guard.async_wait([&](boost::system::error_code ec) { expired = !ec; });
        io.restart();
        while (!done() && !expired) io.run_one();
        return !expired;
    }
    // Whether `n` ranks printed fake_worker's first "print" line: workers say they are
    // ready through their output, which the loop carries, so waiting for it needs no poll.
    bool printed(int n) const {
        std::string out = console.out();
        for (int rank = 0; rank < n; ++rank)
            if (out.find(fmt::format("[{0}]: line 0 rank {0}\n", rank)) == std::string::npos)
                return false;
        return true;
    }

    bool run_until_exited() {
        return run_until([this] { return group->running() == 0; });
    }
};

TEST_F(WorkerGroupTest, WorkersRunWithTheirRanksAndSucceed) {
    make_group(3, {"print", "1"});
    ASSERT_TRUE(start());
    EXPECT_EQ(group->running(), 3);
    ASSERT_TRUE(run_until_exited());
    EXPECT_TRUE(group->finish().empty());
    ASSERT_EQ(exits.size(), 3u);
    for (const auto& [rank, outcome] : exits) {
        EXPECT_FALSE(outcome.failed()) << rank;
        EXPECT_EQ(outcome.host, "testhost");
        EXPECT_FALSE(outcome.stopped_by_ddprun);
    }
    std::string out = console.out();
    for (int rank = 0; rank < 3; ++rank)
        EXPECT_THAT(out, HasSubstr(fmt::format("[{0}]: line 0 rank {0}\n", rank)));
}

TEST_F(WorkerGroupTest, AFailureComesWithItsExitCodeErrorFileAndStderrTail) {
    make_group(2, {"if-rank", "1", "stderr", "3", "if-rank", "1", "write-error-file", "boom",
                   "if-rank", "1", "exit", "7"});
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until_exited());
    group->finish();
    ASSERT_EQ(exits.count(1), 1u);
    const WorkerOutcome& failed = exits[1];
    EXPECT_EQ(failed.exit_code, 7);
    EXPECT_EQ(failed.error_message, "boom");
    EXPECT_THAT(failed.stderr_tail,
                ::testing::ElementsAre("err 0 rank 1", "err 1 rank 1", "err 2 rank 1"));
    EXPECT_FALSE(exits[0].failed());
    auto all = group->outcomes();
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].error_message, "boom");
}

TEST_F(WorkerGroupTest, StopSendsTheSignalAndMarksWorkersStopped) {
    make_group(2, {"sleep", "30"});
    ASSERT_TRUE(start());
    group->stop(SIGTERM, 10s);
    ASSERT_TRUE(run_until_exited());
    for (const auto& [rank, outcome] : exits) {
        EXPECT_EQ(outcome.signal, SIGTERM) << rank;
        EXPECT_TRUE(outcome.stopped_by_ddprun) << rank;
    }
}

TEST_F(WorkerGroupTest, AWorkerThatIgnoresTheStopIsKilledAfterTheGrace) {
    make_group(2, {"if-rank", "1", "ignore-term", "print", "1", "sleep", "30"});
    ASSERT_TRUE(start());
    // Both workers have set up their signal dispositions before they are stopped.
    ASSERT_TRUE(run_until([this] { return printed(2); }));
    group->stop(SIGTERM, 200ms);
    ASSERT_TRUE(run_until_exited());
    EXPECT_EQ(exits[0].signal, SIGTERM);
    EXPECT_EQ(exits[1].signal, SIGKILL);
    EXPECT_THAT(console.err(), ::testing::IsEmpty());  // ddprun's own warning goes to spdlog
}

TEST_F(WorkerGroupTest, KillEndsEveryWorkerAtOnce) {
    make_group(3, {"ignore-term", "sleep", "30"});
    ASSERT_TRUE(start());
    group->kill();
    ASSERT_TRUE(run_until_exited());
    for (const auto& [rank, outcome] : exits) EXPECT_EQ(outcome.signal, SIGKILL) << rank;
    EXPECT_EQ(given_up, 0);
}

TEST_F(WorkerGroupTest, ForwardedSignalsReachEveryWorker) {
    make_group(2, {"print", "1", "wait-signal"});
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until([this] { return printed(2); }));
    group->forward(SIGUSR1);
    ASSERT_TRUE(run_until_exited());
    group->finish();
    for (const auto& [rank, outcome] : exits) EXPECT_FALSE(outcome.failed()) << rank;
    std::string out = console.out();
    EXPECT_THAT(out, HasSubstr("[0]: got SIGUSR1"));
    EXPECT_THAT(out, HasSubstr("[1]: got SIGUSR1"));
}

TEST_F(WorkerGroupTest, FinishKillsWhatTheWorkersLeftBehind) {
    ASSERT_TRUE(become_subreaper());
    make_group(1, {"spawn-grandchild", "setsid"});
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until_exited());
    EXPECT_FALSE(exits[0].failed());
    // The grandchild was reparented to this process (a subreaper, like the agent).
    EXPECT_FALSE(children_of(::getpid()).value().empty());
    EXPECT_TRUE(group->finish().empty());
    EXPECT_TRUE(children_of(::getpid()).value().empty());
}

TEST_F(WorkerGroupTest, LogFilesFollowTorchrunsLayoutAndStaleErrorFilesAreRemoved) {
    const auto logs = dir.path() / "logs";
    make_group(2, {"print", "2", "stderr", "1"}, [&](LaunchContext& c) {
        c.log_dir = logs.string();
        c.config.rdzv_id = "job7";
    });
    // A stale error file from an earlier run must not be taken for this round's.
    std::filesystem::create_directories(logs / "job7/attempt_0/1");
    { std::ofstream(logs / "job7/attempt_0/1/error.json") << R"({"message": "stale"})"; }
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until_exited());
    EXPECT_TRUE(group->finish().empty());
    EXPECT_FALSE(std::filesystem::exists(logs / "job7/attempt_0/1/error.json"));
    for (int lr = 0; lr < 2; ++lr) {
        auto attempt = logs / "job7/attempt_0" / std::to_string(lr);
        EXPECT_EQ(testing::read_file(attempt / "stdout.log"),
                  fmt::format("line 0 rank {0}\nline 1 rank {0}\n", lr));
        EXPECT_EQ(testing::read_file(attempt / "stderr.log"), fmt::format("err 0 rank {}\n", lr));
    }
}

// The lines of a file, by the "[rank]: " prefix they start with, in the file's order.
std::map<std::string, std::vector<std::string>> lines_by_prefix(const std::string& text) {
    std::map<std::string, std::vector<std::string>> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        lines[line.substr(0, line.find(' ') + 1)].push_back(line);
    return lines;
}

// torchrun's --duplicate-*-filters: a tee'd stream's lines that hold a filter, prefixed
// as on the console, in one file per attempt; a stream not tee'd contributes nothing.
TEST_F(WorkerGroupTest, DuplicateFiltersCopyTeedLinesToTheAttemptsFiles) {
    const auto logs = dir.path() / "logs";
    make_group(2,
               {"partial", "apple {rank}\npear {rank}\n", "partial", "orange and apple {rank}\n",
                "partial-stderr", "boom {rank}\nquiet {rank}\n", "partial", "orange {rank}"},
               [&](LaunchContext& c) {
                   c.log_dir = logs.string();
                   c.config.rdzv_id = "dup";
                   c.config.tee.per_rank = {{0, kBoth}, {1, kStdout}};
                   c.config.duplicate_stdout_filters = {"apple", "orange"};
                   c.config.duplicate_stderr_filters = {"boom"};
               });
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round);
        exits.clear();
        ASSERT_TRUE(start(round));
        ASSERT_TRUE(run_until_exited());
        EXPECT_TRUE(group->finish().empty());
        const auto attempt = logs / fmt::format("dup/attempt_{}", round);
        using Lines = std::vector<std::string>;
        const auto out = lines_by_prefix(testing::read_file(attempt / "filtered_stdout.log"));
        EXPECT_EQ(out.size(), 2u) << testing::read_file(attempt / "filtered_stdout.log");
        for (int rank = 0; rank < 2; ++rank) {
            const std::string prefix = fmt::format("[{}]: ", rank);
            auto it = out.find(prefix);
            ASSERT_NE(it, out.end()) << rank;
            // The last line came without newline: it gets one, the file holds whole lines.
            EXPECT_EQ(it->second, (Lines{prefix + fmt::format("apple {}", rank),
                                         prefix + fmt::format("orange and apple {}", rank),
                                         prefix + fmt::format("orange {}", rank)}));
        }
        EXPECT_EQ(testing::read_file(attempt / "filtered_stderr.log"), "[0]: boom 0\n")
            << "rank 1's stderr is not tee'd";
        EXPECT_THAT(console.err(), HasSubstr("[1]: boom 1\n")) << "the console shows it as ever";
    }
}

TEST_F(WorkerGroupTest, WithoutFiltersThereAreNoFilteredFiles) {
    const auto logs = dir.path() / "logs";
    make_group(1, {"partial", "apple\n", "partial-stderr", "boom\n"}, [&](LaunchContext& c) {
        c.log_dir = logs.string();
        c.config.rdzv_id = "dup";
        c.config.tee.all = kBoth;
        c.config.duplicate_stdout_filters = {"apple"};  // stderr's: none
    });
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until_exited());
    EXPECT_TRUE(group->finish().empty());
    EXPECT_EQ(testing::read_file(logs / "dup/attempt_0/filtered_stdout.log"), "[0]: apple\n");
    EXPECT_FALSE(std::filesystem::exists(logs / "dup/attempt_0/filtered_stderr.log"));
}

// The failure report takes a failed rank's stderr lines that a filter picks, as
// --report-lines' matches; the filter is a plain string, whatever regex characters it holds.
TEST_F(WorkerGroupTest, AFailedRanksFilteredStderrLinesAreItsReportLines) {
    make_group(2,
               {"if-rank", "1", "partial-stderr", "a boom (x)\nboom\nbom (x)\nkaboom (x) again\n",
                "if-rank", "1", "stderr", "100", "if-rank", "1", "exit", "3"},
               [&](LaunchContext& c) {
                   c.config.duplicate_stderr_filters = {"boom (x)", "NCCL"};
                   c.config.report_lines = {"^bo+m$"};
               });
    ASSERT_TRUE(start());
    ASSERT_TRUE(run_until_exited());
    group->finish();
    ASSERT_EQ(exits.count(1), 1u);
    EXPECT_EQ(exits[1].report_lines,
              (std::vector<std::string>{"a boom (x)", "boom", "kaboom (x) again"}));
    EXPECT_EQ(exits[1].report_lines_total, 3u);
    EXPECT_FALSE(exits[0].failed());
}

TEST_F(WorkerGroupTest, ADirectoryThatCannotBeMadeIsAUsageErrorNamingIt) {
    make_group(1, {"exit", "0"}, [&](LaunchContext& c) {
        // A file where the scratch directory should be.
        std::ofstream(dir.path() / "file") << "x";
        c.scratch_dir = (dir.path() / "file").string();
    });
    auto started = start();
    ASSERT_FALSE(started);
    EXPECT_EQ(started.error().exit_code, exit_code::kUsage);
    EXPECT_THAT(started.error().message, HasSubstr((dir.path() / "file").string()));
    EXPECT_EQ(group->running(), 0);
}

TEST_F(WorkerGroupTest, AProgramThatCannotBeExecutedIsNamedWithItsExitCode) {
    make_group(1, {}, [&](LaunchContext& c) {
        std::ofstream(dir.path() / "not-exec") << "no shebang";
        c.executable = (dir.path() / "not-exec").string();
        c.config.program = c.executable;
    });
    auto started = start();
    ASSERT_FALSE(started);
    EXPECT_EQ(started.error().exit_code, exit_code::kNotExecutable);
    EXPECT_THAT(started.error().message, HasSubstr("not-exec"));
}

TEST_F(WorkerGroupTest, ARoundAfterTheFirstStartsFreshWorkers) {
    make_group(1, {"if-restart", "0", "exit", "3"});
    ASSERT_TRUE(start(0));
    ASSERT_TRUE(run_until_exited());
    group->finish();
    EXPECT_EQ(exits[0].exit_code, 3);
    exits.clear();
    ASSERT_TRUE(start(1));
    ASSERT_TRUE(run_until_exited());
    group->finish();
    EXPECT_EQ(exits[0].exit_code, 0);
    EXPECT_EQ(group->outcomes().size(), 1u);
}

}  // namespace
}  // namespace ddprun
