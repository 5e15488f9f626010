// torchrun 2.x's --duplicate-stdout-filters / --duplicate-stderr-filters, end to end: a
// tee'd stream's lines that hold a filter are also written, prefixed as on the console, to
// <log_dir>/<run id>/attempt_<N>/filtered_stdout.log / filtered_stderr.log; a rank not
// tee'd adds nothing; a failed rank's filtered stderr lines are in the failure summary.
#include <filesystem>
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

using Lines = std::vector<std::string>;

// Each rank prints apples, oranges and pears to stdout and a boom among calm lines to
// stderr; what they print goes out in several writes, so the ranks' lines interleave.
const std::vector<std::string> k_fruit = {"partial",        "apple {rank}\npear {rank}\n",
                                          "partial",        "orange juice {rank}\n",
                                          "print",          "2",
                                          "partial-stderr", "calm {rank}\nboom {rank}\n",
                                          "stderr",         "2",
                                          "partial",        "pear and apple {rank}\n"};

class DuplicateFilters : public IntegrationTest {
  protected:
    std::string logs() const { return path("logs"); }
    std::string filtered(const std::string& name) const {
        return fmt::format("{}/dup/attempt_0/{}", logs(), name);
    }

    RunResult run_fruit(const std::string& tee, std::vector<std::string> flags) {
        std::vector<std::string> args = {"--nproc_per_node=2", "--tee=" + tee,
                                         "--log_dir=" + logs(), "--rdzv_id=dup"};
        args.insert(args.end(), flags.begin(), flags.end());
        args.push_back(k_fake_worker);
        args.insert(args.end(), k_fruit.begin(), k_fruit.end());
        return run(args);
    }
};

// The lines of a file by the "[rank]: " they start with, in the file's order.
std::map<int, Lines> by_rank(const std::string& text) {
    std::map<int, Lines> lines;
    for (const auto& line : split_lines(text)) {
        auto split = split_prefix(line);
        if (!split) {
            lines[-1].push_back(line);  // not prefixed: a failure shows it
            continue;
        }
        lines[split->first].push_back(line);
    }
    return lines;
}

Lines stdout_lines(int rank) {
    return {fmt::format("[{0}]: apple {0}", rank), fmt::format("[{0}]: orange juice {0}", rank),
            fmt::format("[{0}]: pear and apple {0}", rank)};
}

TEST_F(DuplicateFilters, TeedLinesThatHoldAFilterGoToTheAttemptsFiles) {
    auto r = run_fruit(
        "3", {"--duplicate-stdout-filters=apple,orange", "--duplicate_stderr_filters=boom"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    const std::string out = read_text_file(filtered("filtered_stdout.log"));
    EXPECT_EQ(by_rank(out), (std::map<int, Lines>{{0, stdout_lines(0)}, {1, stdout_lines(1)}}))
        << out;
    const std::string err = read_text_file(filtered("filtered_stderr.log"));
    EXPECT_EQ(by_rank(err), (std::map<int, Lines>{{0, {"[0]: boom 0"}}, {1, {"[1]: boom 1"}}}))
        << err;
    // The console and the rank's own logs are as without the filters.
    EXPECT_TRUE(contains(r.out, "[1]: pear 1\n")) << r.describe();
    EXPECT_EQ(read_text_file(fmt::format("{}/dup/attempt_0/1/stderr.log", logs())),
              "calm 1\nboom 1\nerr 0 rank 1\nerr 1 rank 1\n");
}

// As torchrun: only what it tails to the console (--tee) is filtered.
TEST_F(DuplicateFilters, RanksNotTeedContributeNothing) {
    auto r = run_fruit(
        "0:3", {"--duplicate-stdout-filters=apple,orange", "--duplicate-stderr-filters=boom"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(
        read_text_file(filtered("filtered_stdout.log")),
        fmt::format("{}\n{}\n{}\n", stdout_lines(0)[0], stdout_lines(0)[1], stdout_lines(0)[2]));
    EXPECT_EQ(read_text_file(filtered("filtered_stderr.log")), "[0]: boom 0\n");
}

TEST_F(DuplicateFilters, WithoutFiltersThereIsNoFile) {
    auto r = run_fruit("3", {});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_TRUE(std::filesystem::exists(fmt::format("{}/dup/attempt_0/0/stdout.log", logs())));
    EXPECT_FALSE(std::filesystem::exists(filtered("filtered_stdout.log")));
    EXPECT_FALSE(std::filesystem::exists(filtered("filtered_stderr.log")));
    // One list alone makes its own file only.
    auto only_stdout = run_fruit("3", {"--duplicate-stdout-filters=pear"});
    ASSERT_EQ(only_stdout.exit_code, 0) << only_stdout.describe();
    EXPECT_TRUE(std::filesystem::exists(filtered("filtered_stdout.log")));
    EXPECT_FALSE(std::filesystem::exists(filtered("filtered_stderr.log")));
}

// A failed rank's stderr lines that a filter picks are quoted in the summary, as
// --report-lines' matches, however far above the tail they were.
TEST_F(DuplicateFilters, AFailingRanksFilteredStderrLineIsInTheSummary) {
    auto r = run({"--nproc_per_node=2",
                  "--tee=3",
                  "--log_dir=" + logs(),
                  "--rdzv_id=dup",
                  "--duplicate-stderr-filters=boom",
                  k_fake_worker,
                  "if-rank",
                  "1",
                  "partial-stderr",
                  "boom: the loss is nan (step 7)\n",
                  "if-rank",
                  "1",
                  "stderr",
                  "200",
                  "if-rank",
                  "1",
                  "exit",
                  "3",
                  "sleep",
                  "10"});
    ASSERT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"  stderr lines matching --report-lines (1):"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"    | boom: the loss is nan (step 7)"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(read_text_file(filtered("filtered_stderr.log")),
              "[1]: boom: the loss is nan (step 7)\n");
}

}  // namespace
}  // namespace ddprun_it
