// torch's FileTimer watchdog under the real ddprun (file_timer.hpp): with
// TORCHELASTIC_ENABLE_FILE_TIMER=1 a Python worker that uses torch's own
// FileTimerClient and `expires(after=N)` is killed with the signal it asked
// for when its scope runs out, exactly as under torchrun, and one that
// releases its scopes in time runs to its end. The switch and the FIFO's path
// are checked with fake workers, which need no torch.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

class FileTimer : public IntegrationTest {};

// The worker: every rank holds a scope it releases in time; rank `hung` then,
// once every rank has said so (a file each beside the script), enters one of 1 s
// and hangs in it.
const char* const k_worker_script = R"(import os, sys, time
from torch.distributed.elastic.timer import FileTimerClient, configure, expires

configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
rank = int(os.environ["RANK"])
hung = int(sys.argv[1])
with expires(after=1, scope="warmup"):
    pass
time.sleep(1.5)  # past the released scope's expiration: it must not fire
print(f"released rank {rank}", flush=True)
# Every rank's release is printed before the hang's stop can cut one short.
here = os.path.dirname(os.path.abspath(sys.argv[0]))
open(os.path.join(here, f"released.{rank}"), "w").close()
if rank == hung:
    world = int(os.environ["WORLD_SIZE"])
    while not all(os.path.exists(os.path.join(here, f"released.{r}")) for r in range(world)):
        time.sleep(0.01)
    with expires(after=1, scope="step"):
        print(f"hanging rank {rank}", flush=True)
        time.sleep(60)
elif hung >= 0:
    time.sleep(60)  # until ddprun stops it
)";

RunOptions file_timer_env(std::vector<std::pair<std::string, std::string>> env = {}) {
    RunOptions options;
    options.env = std::move(env);
    options.env.emplace_back("TORCHELASTIC_ENABLE_FILE_TIMER", "1");
    options.env.emplace_back("PYTHON_EXEC", k_python);
    options.timeout = 100s;  // torch imports on a shared 2-core machine
    return options;
}

TEST_F(FileTimer, AnExpiredScopeKillsTheWorkerWithTheSignalItAskedFor) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    const std::string script = path("worker.py");
    write_text_file(script, k_worker_script);
    auto ddprun = start({"--nproc_per_node=2", script, "1"}, file_timer_env());
    ASSERT_TRUE(ddprun->wait_for_output("[1]: hanging rank 1", 90s)) << ddprun->err_so_far();
    const auto hung_at = Clock::now();
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    // Its scope of 1 s, a second at most for the server's reaction (torch's polls
    // every 0.1 s; ddprun's timer is exact) and the job's stop, on a busy machine.
    EXPECT_LT(r.exited_at - hung_at, 15s) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.describe();
    EXPECT_TRUE(contains(r.out, "[0]: released rank 0")) << r.describe();
    const std::string messages = ddprun_messages(r.err);
    EXPECT_TRUE(contains(messages, "root cause: rank 1 ")) << r.describe();
    EXPECT_TRUE(contains(messages, "SIGKILL")) << r.describe();
    bool named = false;
    for (const auto& line : ddprun_own_lines(r.err))
        named = named || (contains(line, "rank 1 (pid ") &&
                          contains(line, "FileTimer scope 'step' expired (set for ") &&
                          contains(line, "sent SIGKILL"));
    EXPECT_TRUE(named) << "one line names the rank, the scope and the signal\n" << r.describe();
    EXPECT_FALSE(contains(r.err, "'warmup'")) << "the released scope fired\n" << r.describe();
}

TEST_F(FileTimer, ScopesReleasedInTimeLetTheJobSucceed) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    const std::string script = path("worker.py");
    write_text_file(script, k_worker_script);
    auto r = run({"--nproc_per_node=2", script, "-1"}, file_timer_env());
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    for (int rank : {0, 1})
        EXPECT_TRUE(contains(r.out, fmt::format("[{0}]: released rank {0}", rank))) << r.describe();
    EXPECT_FALSE(contains(r.err, "FileTimer")) << r.describe();
}

// fake_worker prints the path it got, and whether it is a FIFO while the job runs.
std::vector<std::string> show_timer_file() {
    return {"--nproc_per_node=2", "--no_python", "/bin/sh", "-c",
            "echo \"file=${TORCHELASTIC_TIMER_FILE:-unset}\"; "
            "if [ -p \"$TORCHELASTIC_TIMER_FILE\" ]; then echo fifo; else echo no-fifo; fi"};
}

TEST_F(FileTimer, WorkersGetAFifoInTheScratchDirOrTheUsersPath) {
    RunOptions options;
    options.env = {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TMPDIR", m_dir}};
    auto r = run(show_timer_file(), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    ASSERT_EQ(by_rank[0].size(), 2u) << r.describe();
    EXPECT_TRUE(by_rank[0][0].starts_with("file=" + m_dir + "/ddprun-")) << r.describe();
    EXPECT_EQ(by_rank[0][1], "fifo") << r.describe();
    EXPECT_EQ(by_rank[1], by_rank[0]) << "one FIFO for the node\n" << r.describe();

    const std::string own = path("my.fifo");
    options.env.emplace_back("TORCHELASTIC_TIMER_FILE", own);
    r = run(show_timer_file(), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    by_rank = lines_by_rank(r.out);
    EXPECT_EQ(by_rank[0], (std::vector<std::string>{"file=" + own, "fifo"})) << r.describe();
    EXPECT_FALSE(std::filesystem::exists(own)) << "the FIFO goes with the job, as torchrun's";
}

TEST_F(FileTimer, OnlyTheValueOneStartsTheServerAsUnderTorchrun) {
    RunOptions options;
    options.env = {{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}};
    auto r = run(show_timer_file(), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    EXPECT_EQ(by_rank[0], (std::vector<std::string>{"file=unset", "no-fifo"})) << r.describe();
    EXPECT_TRUE(contains(ddprun_messages(r.err), "TORCHELASTIC_ENABLE_FILE_TIMER=true"))
        << "a value that is almost the switch is pointed out\n"
        << r.describe();
}

TEST_F(FileTimer, ATimerFileThatIsNotAFifoStopsTheJobNamingIt) {
    const std::string file = path("notes.txt");
    write_text_file(file, "keep me\n");
    RunOptions options;
    options.env = {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", file}};
    auto r = run(show_timer_file(), options);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_TRUE(contains(r.err, file + " exists and is not a FIFO")) << r.describe();
    EXPECT_EQ(read_text_file(file), "keep me\n");
    EXPECT_TRUE(lines_by_rank(r.out).empty()) << "no worker starts\n" << r.describe();
}

// examples/file_timer.py as its docstring runs it: five guarded steps on each
// rank, then with --hang-rank 1 a step that never ends and the watchdog's kill.
TEST_F(FileTimer, TheExampleRunsAndItsHungStepIsKilled) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    const std::string example = k_examples_dir + "/file_timer.py";
    auto good = run({"--nproc_per_node=2", example}, file_timer_env());
    ASSERT_EQ(good.exit_code, 0) << good.describe();
    EXPECT_TRUE(contains(good.out, "[1]: rank 1: 5 steps done")) << good.describe();

    auto hung = run({"--nproc_per_node=2", example, "--hang-rank", "1"}, file_timer_env());
    EXPECT_EQ(hung.exit_code, 128 + SIGKILL) << hung.describe();
    bool named = false;
    for (const auto& line : ddprun_own_lines(hung.err))
        named = named || (contains(line, "rank 1 (pid ") &&
                          contains(line, "FileTimer scope 'step' expired (set for 2 s)"));
    EXPECT_TRUE(named) << hung.describe();
}

}  // namespace
}  // namespace ddprun_it
