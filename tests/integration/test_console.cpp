// A big job's console: --collapse-lines shows a line that 8 ranks print alike
// once, with their ranks, and keeps every rank's own lines in its log file;
// --report-lines copies a failed rank's matching stderr lines into the summary,
// however far above the tail they were, on the node where it failed and on
// every other node.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
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

// Rank 1 warns once, writes 2,000 more lines to stderr and fails.
const std::vector<std::string> k_warn_then_fail = {
    "if-rank", "1", "partial-stderr", "NCCL WARN Net : Connection closed by peer\n",
    "if-rank", "1", "stderr",         "2000",
    "if-rank", "1", "exit",           "3",
    "sleep",   "10"};

std::vector<std::string> job(std::vector<std::string> flags) {
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), k_warn_then_fail.begin(), k_warn_then_fail.end());
    return flags;
}

class ReportLines : public IntegrationTest {};

TEST_F(ReportLines, AMatchingLineFarAboveTheTailIsInTheSummary) {
    auto r = run(
        job({"--nproc_per_node=2", "--report-lines", "NCCL WARN", "--report-lines", "CUDA error"}));
    ASSERT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"  stderr lines matching --report-lines (1):"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"    | NCCL WARN Net : Connection closed by peer"}).size(), 1u)
        << r.describe();
    EXPECT_TRUE(contains(r.err, "    | err 1999 rank 1")) << "the tail is still there\n"
                                                          << r.describe();
    // Without the flag the line is only in the worker's stream, not the box.
    auto plain = run(job({"--nproc_per_node=2"}));
    ASSERT_EQ(plain.exit_code, 3) << plain.describe();
    EXPECT_TRUE(own_lines_with(plain.err, {"NCCL WARN"}).empty()) << plain.describe();
}

TEST_F(ReportLines, TheEnvironmentGivesOnePattern) {
    RunOptions options;
    options.env = {{"DDPRUN_REPORT_LINES", "Connection closed"}};
    auto r = run(job({"--nproc_per_node=2"}), options);
    ASSERT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"    | NCCL WARN Net : Connection closed by peer"}).size(), 1u)
        << r.describe();
}

TEST_F(ReportLines, ABadPatternIsOneLineAndStartsNothing) {
    auto r = run({"--report-lines", "NCCL (WARN", k_fake_worker, "ready", path("started")});
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"--report-lines='NCCL (WARN'", "not a regular expression",
                                     "write an ECMAScript regex"})
                  .size(),
              1u)
        << r.describe();
    EXPECT_FALSE(std::filesystem::exists(path("started")));
}

class ReportLinesTwoNodes : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(MultiNode, ReportLinesTwoNodes, ::testing::ValuesIn(k_backends),
                         backend_name);

// Rank 3 fails on node 1: node 0's summary, built from the failure record that
// came through the store, carries its matching line too.
TEST_P(ReportLinesTwoNodes, TheLineTravelsWithTheFailure) {
    Job job;
    job.flags = {"--report-lines=NCCL WARN"};
    const std::vector<std::string> actions = {
        "if-rank", "3", "partial-stderr", "NCCL WARN Net : Connection closed by peer\n",
        "if-rank", "3", "stderr",         "500",
        "if-rank", "3", "exit",           "3",
        "sleep",   "10"};
    auto r = run_nodes(job, {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                             {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{3, 3})) << describe_all(r);
    for (const auto& node : r)
        EXPECT_EQ(
            own_lines_with(node.err, {"    | NCCL WARN Net : Connection closed by peer"}).size(),
            1u)
            << describe_all(r);
}

class CollapseLines : public IntegrationTest {};

// The ranks of a group prefix's runs ("0-3,5").
std::vector<int> ranks_of(const std::string& runs_text) {
    std::vector<int> ranks;
    std::istringstream runs(runs_text);
    for (std::string run; std::getline(runs, run, ',');) {
        const auto dash = run.find('-');
        const int first = std::stoi(run.substr(0, dash));
        const int last = dash == std::string::npos ? first : std::stoi(run.substr(dash + 1));
        for (int rank = first; rank <= last; ++rank) ranks.push_back(rank);
    }
    return ranks;
}

// Eight ranks print the same two lines, rank 2 one of its own between them; the
// window (10 s, the most, so that a loaded machine's scheduling cannot split a
// group; the job's end shows what is held anyway) is far longer than the ranks
// need to print after the common start. The order the eight pipes are read in
// decides one thing: if rank 2's lines are all read before any other rank's
// second line, that second line joins rank 2's (after its own line) rather than
// forming a group ahead of it. Both are right: every rank's order is kept.
TEST_F(CollapseLines, EightRanksLinesShowOnceAndTheLogsKeepEveryLine) {
    const std::string go = path("go");
    const std::string logs = path("logs");
    auto ddprun =
        start({"--nproc_per_node=8", "--collapse-lines", "--collapse-window=10",
               "--log_dir=" + logs, "--rdzv_id=c", k_fake_worker, "ready", path("ready.{rank}"),
               "wait-file", go, "partial", "Epoch 3 done\n", "if-rank", "2", "partial",
               "rank two's own\n", "partial", "Epoch 4 done\n"});
    ASSERT_TRUE(wait_until(
        [&] {
            for (int rank = 0; rank < 8; ++rank)
                if (!std::filesystem::exists(path(fmt::format("ready.{}", rank)))) return false;
            return true;
        },
        30s));
    { std::ofstream touch(go); }
    auto r = ddprun->wait();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(r.out ==
                    "[0-7]: Epoch 3 done\n[0-1,3-7]: Epoch 4 done\n[2]: rank two's own\n"
                    "[2]: Epoch 4 done\n" ||
                r.out == "[0-7]: Epoch 3 done\n[2]: rank two's own\n[0-7]: Epoch 4 done\n")
        << r.describe();
    for (int rank = 0; rank < 8; ++rank) {
        std::ifstream log(fmt::format("{}/c/attempt_0/{}/stdout.log", logs, rank));
        std::stringstream text;
        text << log.rdbuf();
        EXPECT_EQ(text.str(), rank == 2 ? "Epoch 3 done\nrank two's own\nEpoch 4 done\n"
                                        : "Epoch 3 done\nEpoch 4 done\n")
            << "rank " << rank;
    }
}

// A flood that eight ranks print alike (each cats one file of 100,000 numbered
// lines): however the reads cut lines and whatever the groups, every rank's
// lines are all there, once, in order, and some of them were merged.
TEST_F(CollapseLines, AFloodLosesAndReordersNothing) {
    const std::string numbers = path("numbers.txt");
    {
        std::ofstream out(numbers);
        for (int i = 1; i <= 100000; ++i) out << i << "\n";
    }
    auto r = run({"--nproc_per_node=8", "--collapse-lines", "--collapse-window=2", "--no_python",
                  "cat", numbers});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::vector<int> next(8, 1);  // each rank's next expected number
    std::size_t merged = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        const auto close = line.find("]: ");
        ASSERT_TRUE(line.starts_with("[") && close != std::string::npos) << line;
        const int number = std::stoi(line.substr(close + 3));
        const std::vector<int> ranks = ranks_of(line.substr(1, close - 1));
        if (ranks.size() > 1) ++merged;
        for (int rank : ranks) {
            ASSERT_TRUE(rank >= 0 && rank < 8) << line;
            ASSERT_EQ(number, next[static_cast<std::size_t>(rank)])
                << "rank " << rank << ": " << line;
            ++next[static_cast<std::size_t>(rank)];
        }
    }
    for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(next[static_cast<std::size_t>(rank)], 100001);
    EXPECT_GT(merged, 0u) << "no line was shown once for several ranks";
    std::cout << "[          ] " << merged << " merged lines\n";
}

// A Python worker that prints on a wall-clock grid shared by the ranks: after
// the go file gives T0, pass p's line i at T0 + p * 2.5 s + i * 0.05 s, 40 lines
// a pass; it writes when each line really went into the pipe to times.RANK.
constexpr const char* k_grid_worker = R"(
import os, sys, time
rank, where, passes = os.environ["RANK"], sys.argv[1], int(sys.argv[2])
open(f"{where}/ready.{rank}", "w").close()
while not os.path.exists(f"{where}/go"):
    time.sleep(0.005)
t0 = float(open(f"{where}/go").read())
times = []
for p in range(passes):
    for i in range(40):
        time.sleep(max(0.0, t0 + p * 2.5 + i * 0.05 - time.time()))
        sys.stdout.write(f"pass {p} epoch {i} loss 0.25\n")
        sys.stdout.flush()
        times.append(f"pass {p} epoch {i} loss 0.25 {time.time()}")
open(f"{where}/times.{rank}", "w").write("\n".join(times) + "\n")
)";

// Eight ranks print each line within milliseconds of each other, a line every
// 50 ms, three times the default window's 150 ms: whenever the previous group
// went out, a line every rank printed well inside the window is one group.
// 30 passes of 40 lines, as three jobs of ten (one Python start-up each);
// a line some rank printed more than 75 ms after another is not judged.
TEST_F(CollapseLines, LinesPrintedWithinTheWindowAreOneGroup) {
    constexpr int k_jobs = 3, k_passes = 10, k_ranks = 8;
    std::vector<std::unique_ptr<DdprunProcess>> jobs;
    for (int j = 0; j < k_jobs; ++j) {
        const std::string where = path(fmt::format("job{}", j));
        std::filesystem::create_directories(where);
        jobs.push_back(start({"--nproc_per_node=8", "--collapse-lines", k_python, "-c",
                              k_grid_worker, where, std::to_string(k_passes)}));
    }
    ASSERT_TRUE(wait_until(
        [&] {
            for (int j = 0; j < k_jobs; ++j)
                for (int rank = 0; rank < k_ranks; ++rank)
                    if (!std::filesystem::exists(path(fmt::format("job{}/ready.{}", j, rank))))
                        return false;
            return true;
        },
        60s));
    const double t0 =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch() + 300ms)
            .count();
    for (int j = 0; j < k_jobs; ++j) {
        const std::string go = path(fmt::format("job{}/go", j));
        { std::ofstream(go + ".new") << fmt::format("{:.6f}", t0); }
        std::filesystem::rename(go + ".new", go);
    }
    std::size_t judged = 0, split = 0;
    for (int j = 0; j < k_jobs; ++j) {
        auto r = jobs[static_cast<std::size_t>(j)]->wait();
        ASSERT_EQ(r.exit_code, 0) << r.describe();
        // Each text: the groups it was shown in, and when each rank printed it.
        std::map<std::string, std::vector<std::vector<int>>> shown;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            const auto close = line.find("]: ");
            ASSERT_TRUE(line.starts_with("[") && close != std::string::npos) << line;
            shown[line.substr(close + 3)].push_back(ranks_of(line.substr(1, close - 1)));
        }
        std::map<std::string, std::vector<double>> printed;
        for (int rank = 0; rank < k_ranks; ++rank) {
            std::ifstream times(path(fmt::format("job{}/times.{}", j, rank)));
            for (std::string line; std::getline(times, line);) {
                const auto space = line.rfind(' ');
                printed[line.substr(0, space)].push_back(std::stod(line.substr(space + 1)));
            }
        }
        ASSERT_EQ(shown.size(), std::size_t{40 * k_passes}) << r.describe();
        for (const auto& [text, groups] : shown) {
            std::vector<int> ranks;
            for (const auto& group : groups) ranks.insert(ranks.end(), group.begin(), group.end());
            std::sort(ranks.begin(), ranks.end());
            EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << text;
            const auto& at = printed[text];
            ASSERT_EQ(at.size(), std::size_t{k_ranks}) << text;
            if (*std::max_element(at.begin(), at.end()) - *std::min_element(at.begin(), at.end()) >
                0.075)
                continue;
            ++judged;
            if (groups.size() > 1) {
                ++split;
                ADD_FAILURE() << "job " << j << ": '" << text << "' shown in " << groups.size()
                              << " groups though every rank printed it within 75 ms";
            }
        }
    }
    std::cout << "[          ] " << judged << " of " << 40 * k_passes * k_jobs << " lines judged, "
              << split << " split\n";
    // Most lines are judged, or the machine was too loaded to tell anything.
    EXPECT_GE(judged, std::size_t{40 * k_passes * k_jobs / 2});
}

TEST_F(CollapseLines, TheWindowNeedsTheSwitchAndABound) {
    auto alone = run({"--collapse-window=0.5", k_fake_worker, "exit", "0"});
    EXPECT_EQ(alone.exit_code, 2) << alone.describe();
    EXPECT_EQ(own_lines_with(alone.err, {"--collapse-window=0.5", "needs --collapse-lines"}).size(),
              1u)
        << alone.describe();
    auto long_window =
        run({"--collapse-lines", "--collapse-window=60", k_fake_worker, "exit", "0"});
    EXPECT_EQ(long_window.exit_code, 2) << long_window.describe();
}

}  // namespace
}  // namespace ddprun_it
