// Hangs (--hang-timeout): the real binary, real workers that beat on
// DDPRUN_PROGRESS_FD or stop beating, real stacks (eu-stack or gdb, and Python's
// faulthandler), one node and two agents over both backends, and a real PyTorch
// job whose rank 3 never reaches its all_reduce.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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

std::vector<std::string> job(std::vector<std::string> flags,
                             const std::vector<std::string>& actions) {
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), actions.begin(), actions.end());
    return flags;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

bool has_stack_tool() {
    return std::system("command -v eu-stack >/dev/null 2>&1 || command -v gdb >/dev/null 2>&1") ==
           0;
}

class Hang : public IntegrationTest {};

// Rank 1 beats three times, then stops; rank 0 beats on. Within the timeout plus
// a little, the job stops as a hang (exit 124): one line names rank 1 and its last
// label, the box shows every rank's top frames, and --log_dir keeps their stacks.
TEST_F(Hang, ARankThatStopsBeatingStopsTheJobWithItsStacks) {
    const std::string logs = path("logs");
    auto r =
        run(job({"--nproc_per_node=2", "--hang-timeout=1", "--log_dir=" + logs, "--rdzv_id=hung"},
                {"if-rank", "1", "beat", "3:100:step", "if-rank", "1", "sleep", "120", "beat",
                 "600:100:step", "sleep", "120"}));
    EXPECT_EQ(r.exit_code, 124) << r.describe();
    EXPECT_LT(r.elapsed, 8s) << "the job must stop within the timeout plus a little\n"
                             << r.describe();
    auto lines = own_lines_with(r.err, {"hang: rank 1 (node 0) stopped making progress first",
                                        "last beat 'step 3'", "every rank:"});
    EXPECT_EQ(lines.size(), 1u) << r.describe();
    EXPECT_TRUE(contains(r.err, "ddprun: job hung (exit code 124)")) << r.describe();
    EXPECT_TRUE(contains(r.err, "rank 0 last beat")) << "rank 0 was still beating\n"
                                                     << r.describe();
    for (int local = 0; local < 2; ++local) {
        const std::string stacks = fmt::format("{}/hung/attempt_0/{}/stacks.txt", logs, local);
        ASSERT_TRUE(std::filesystem::exists(stacks)) << stacks << "\n" << r.describe();
        if (has_stack_tool()) {
            EXPECT_TRUE(contains(read_file(stacks), "nanosleep")) << read_file(stacks);
            EXPECT_TRUE(contains(r.err, fmt::format("rank {} (pid", local))) << r.describe();
        }
    }
}

// A Python worker's tracebacks are its main thread's, caught where it waits, even
// with eight other threads to take the SIGABRT: sent to the process, the signal
// would go to whichever thread woke first from the hang's SIGSTOP (two in three
// times for a torch process), and the main thread would run on while another
// dumped, so that a gloo rank's stack would show it out of its all_reduce.
TEST_F(Hang, APythonWorkersStackIsItsMainThreadsWhateverThreadsItHas) {
    const std::string script = path("threads.py");
    std::ofstream(script) << "import os, threading, time\n"
                             "def helper_loop():\n"
                             "    while True:\n"
                             "        time.sleep(60)\n"
                             "for _ in range(8):\n"
                             "    threading.Thread(target=helper_loop, daemon=True).start()\n"
                             "os.write(int(os.environ['DDPRUN_PROGRESS_FD']), b'started\\n')\n"
                             "def wait_here():\n"
                             "    time.sleep(600)\n"
                             "wait_here()\n";
    RunOptions options;
    options.env = {{"PYTHON_EXEC", k_python}};
    for (int attempt = 0; attempt < 3; ++attempt) {
        auto r = run({"--nproc_per_node=4", "--hang-timeout=1", script}, options);
        ASSERT_EQ(r.exit_code, 124) << r.describe();
        for (int rank = 0; rank < 4; ++rank)
            EXPECT_EQ(
                own_lines_with(r.err, {fmt::format("rank {} (pid", rank),
                                       "wait_here (threads.py:9) <- <module> (threads.py:10)"})
                    .size(),
                1u)
                << "attempt " << attempt << "\n"
                << r.describe();
    }
}

// A worker that never writes to the fd is not watched: it runs to its end.
// A shell worker beats the way docs/hangs.md shows, under Debian's /bin/sh
// (dash, which names only fds 0-9 in >&N): rank 1 beats three times and stops,
// rank 0 beats on, and the hang names rank 1 by the label its shell wrote last.
TEST_F(Hang, AShellWorkerBeatsWithEcho) {
    const std::string beat = R"(echo "step $i" >&"$DDPRUN_PROGRESS_FD")";
    const std::string script =
        "case $DDPRUN_PROGRESS_FD in [3-9]) ;; *) echo \"not one digit: $DDPRUN_PROGRESS_FD\"; "
        "exit 9;; esac\n"
        "i=0\nwhile [ $i -lt 600 ]; do i=$((i + 1)); " +
        beat +
        " || exit 8; sleep 0.1\n"
        "  if [ $RANK = 1 ] && [ $i = 3 ]; then exec sleep 120; fi\ndone\n";
    auto r =
        run({"--nproc_per_node=2", "--hang-timeout=1", "--no_python", "/bin/sh", "-c", script});
    EXPECT_EQ(r.exit_code, 124) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"hang: rank 1 (node 0) stopped making progress first",
                                     "last beat 'step 3'"})
                  .size(),
              1u)
        << r.describe();
}

TEST_F(Hang, AWorkerThatNeverBeatsIsNotWatched) {
    auto r = run(job({"--nproc_per_node=2", "--hang-timeout=0.3"}, {"sleep", "1.5"}));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_FALSE(contains(r.err, "hang")) << r.describe();
}

// --hang-timeout-first bounds the time to the first beat: a worker that never
// beats within it is hung; one that beat in time is then watched by --hang-timeout.
TEST_F(Hang, TheFirstBeatTimeoutCatchesAWorkerThatNeverBeats) {
    auto r = run(job({"--nproc_per_node=2", "--hang-timeout=5", "--hang-timeout-first=1"},
                     {"if-rank", "0", "beat", "40:100", "sleep", "60"}));
    EXPECT_EQ(r.exit_code, 124) << r.describe();
    EXPECT_EQ(
        own_lines_with(r.err, {"hang: rank 1 (node 0) never beat within --hang-timeout-first=1 ("})
            .size(),
        1u)
        << r.describe();
}

// A hang is a failure like a worker's: --max_restarts restarts the job.
TEST_F(Hang, AHangUsesARestart) {
    auto r = run(job({"--nproc_per_node=1", "--hang-timeout=0.5", "--max_restarts=1"},
                     {"beat", "2:50", "if-restart", "0", "sleep", "60", "exit", "0"}));
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"hang: rank 0", "restarting the workers (1 of 1)"}).size(), 1u)
        << r.describe();
}

// Millions of beats cost the worker a few microseconds each, block nothing, and
// lose no output: every line of the flood after the storm arrives.
TEST_F(Hang, ABeatStormCostsLittleAndLosesNoOutput) {
    auto r = run(job({"--nproc_per_node=2", "--hang-timeout=10"},
                     {"beat-storm", "1000000", "flood", "20000"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (int rank = 0; rank < 2; ++rank) {
        int flood = 0;
        for (const auto& line : non_empty_lines(r.out))
            if (line.starts_with(fmt::format("[{}]: flood ", rank))) ++flood;
        EXPECT_EQ(flood, 20000) << "rank " << rank;
    }
    std::vector<std::string> storms;
    for (const auto& line : non_empty_lines(r.out))
        if (contains(line, "storm 1000000 beats in")) storms.push_back(line);
    EXPECT_EQ(storms.size(), 2u) << r.describe();
    for (const auto& line : storms) std::cout << "[          ] " << line << "\n";
}

// While ddprun is stopped (SIGSTOP) nobody reads the beats: the worker's writes
// still return at once, and it finishes.
TEST_F(Hang, BeatingNeverBlocksEvenWhenDdprunIsStopped) {
    const std::string done = path("done");
    auto ddprun = start(job({"--nproc_per_node=1", "--hang-timeout=600"},
                            {"ready", path("started"), "wait-file", path("go"), "beat-storm",
                             "300000", "ready", done, "sleep", "1"}));
    ASSERT_TRUE(wait_until([&] { return std::filesystem::exists(path("started")); }, 30s));
    // The supervisor and the agent stop; the worker (its own process group) runs on.
    const pid_t agent = agent_of(*ddprun);
    ASSERT_GT(agent, 0);
    ASSERT_EQ(::kill(agent, SIGSTOP), 0);
    ASSERT_EQ(::kill(ddprun->pid(), SIGSTOP), 0);
    { std::ofstream go(path("go")); }
    const bool finished = wait_until([&] { return std::filesystem::exists(done); }, 30s);
    ::kill(agent, SIGCONT);
    ::kill(ddprun->pid(), SIGCONT);
    EXPECT_TRUE(finished) << "the worker's beats blocked while ddprun was stopped";
    auto r = ddprun->wait();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
}

// --dry-run says what --hang-timeout will do, and starts nothing.
TEST_F(Hang, DryRunSaysHowHangsAreHandled) {
    auto r = run(job({"--dry-run", "--nproc_per_node=2", "--hang-timeout=60",
                      "--hang-timeout-first=600", "--max_restarts=2"},
                     {"exit", "0"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(contains(r.out,
                         "silent for 1 min is hung, and so is one that has not written "
                         "within 10 min of its start"))
        << r.describe();
    EXPECT_TRUE(contains(r.out, "exit code 124 after 2 restart(s)")) << r.describe();
    EXPECT_TRUE(recorded_pids().empty());
}

// --- two agents ------------------------------------------------------------------

class HangTwoNodes : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(MultiNode, HangTwoNodes, ::testing::ValuesIn(k_backends), backend_name);

// A rank that stops beating on either node: both nodes print the same job-wide
// picture naming it, capture their own workers' stacks, and exit 124.
TEST_P(HangTwoNodes, ARankThatStopsOnEitherNodeStopsBothWithOnePicture) {
    for (int stuck : {3, 0}) {
        SCOPED_TRACE(fmt::format("rank {} stops", stuck));
        m_run_id += "h";
        const std::string logs = path(fmt::format("logs{}", stuck));
        Job job;
        job.flags = {"--hang-timeout=1", "--log_dir=" + logs};
        const std::vector<std::string> actions = {
            "if-rank", std::to_string(stuck), "beat",  "2:100:step",
            "if-rank", std::to_string(stuck), "sleep", "120",
            "beat",    "600:100:step",        "sleep", "120"};
        auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                                 {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
        EXPECT_EQ(exit_codes(r), (std::vector<int>{124, 124})) << describe_all(r);
        const int node = stuck / 2;
        for (const auto& result : r) {
            EXPECT_EQ(own_lines_with(result.err,
                                     {fmt::format("hang: rank {} (node {}) stopped making progress "
                                                  "first",
                                                  stuck, node),
                                      "last beat 'step 2'", "every rank:"})
                          .size(),
                      1u)
                << describe_all(r);
        }
        for (int n = 0; n < 2; ++n)
            for (int local = 0; local < 2; ++local)
                EXPECT_TRUE(std::filesystem::exists(
                    fmt::format("{}/{}/attempt_0/{}/stacks.txt", logs, m_run_id, local)))
                    << "node " << n << " local rank " << local << "\n"
                    << describe_all(r);
    }
}

// --- a real PyTorch job -----------------------------------------------------------

// Rank 3 of a 2x2 gloo job sleeps in its step while the others wait in all_reduce:
// both nodes name rank 3 as the rank that stopped first, their summaries show rank
// 3 in its sleep and the others in all_reduce, within the timeout plus 2 s of rank
// 3's last beat, and nothing is left running.
TEST_P(HangTwoNodes, APytorchRankStuckBeforeAllReduceIsNamedWithItsStack) {
    const std::string example = k_examples_dir + "/progress_train.py";
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    RunOptions options;
    options.env = {{"PYTHON_EXEC", k_python}};
    Job job;
    job.guard = 120s;
    job.flags = {"--hang-timeout=3", "--log_dir=" + path("logs")};
    // Each step takes 0.5 s: rank 3's last beat is that much older than the others'.
    const std::vector<std::string> program = {
        example, "--steps", "1000", "--step-time", "0.5", "--stall-rank", "3", "--stall-step", "3"};
    auto r = run_nodes(job,
                       {{.node_rank = 0, .addr = "127.0.0.1", .program = program},
                        {.node_rank = 1, .addr = "127.0.0.2", .program = program}},
                       options);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{124, 124})) << describe_all(r);
    for (const auto& result : r) {
        EXPECT_EQ(own_lines_with(result.err, {"hang: rank 3 (node 1) stopped making progress first",
                                              "last beat 'step 2'", "every rank:", "'step 3'"})
                      .size(),
                  1u)
            << describe_all(r);
    }
    // Node 1's summary: rank 3 in its sleep (progress_train.py's stall), rank 2 in
    // all_reduce; node 0's: ranks 0 and 1 in all_reduce.
    EXPECT_TRUE(contains(r[1].err, "rank 3 (pid")) << describe_all(r);
    EXPECT_FALSE(own_lines_with(r[1].err, {"rank 3 (pid", "main (progress_train.py:"}).empty())
        << describe_all(r);
    EXPECT_TRUE(own_lines_with(r[1].err, {"rank 3 (pid", "all_reduce"}).empty()) << describe_all(r);
    for (int rank : {0, 1, 2}) {
        EXPECT_EQ(own_lines_with(r[rank / 2].err, {fmt::format("rank {} (pid", rank),
                                                   "all_reduce (distributed_c10d"})
                      .size(),
                  1u)
            << describe_all(r);
    }
    for (const auto& result : r) {
        const auto box = result.err.find("=====");
        if (box != std::string::npos) std::cout << result.err.substr(box);
    }
}

}  // namespace
}  // namespace ddprun_it
