// What a failed job's console keeps: --report-lines copies a failed rank's
// matching stderr lines into the summary, however far above the tail they were,
// on the node where it failed and on every other node.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

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

}  // namespace
}  // namespace ddprun_it
