// torch's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT under the real ddprun: a
// worker really in state D (a fake_worker whose vforked child sleeps: the
// parent waits in the kernel, uninterruptibly) for the timeout stops the job on
// every node, without a restart whatever --max_restarts says, with one line
// naming the rank, its pid and how long; without the variable, or with one that
// is not a positive number, a worker's spell in D is nobody's business.
#include <chrono>
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
constexpr const char* k_variable = "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT";

class Uninterruptible : public IntegrationTest {};

// Rank 1 waits 30 s on its vforked child, rank 0 sleeps: the job stops about a second
// in, exit 69, and rank 1 ran once (restarts would have started it again).
TEST_F(Uninterruptible, AWorkerInDStatePastTheTimeoutStopsTheJobWithoutARestart) {
    RunOptions options;
    options.env = {{k_variable, "1"}};
    auto r = run({"--nproc_per_node=2", "--max_restarts=2", k_fake_worker, "if-rank", "1",
                  "vfork-sleep", "30", "sleep", "30"},
                 options);
    EXPECT_EQ(r.exit_code, k_unhealthy) << r.describe();
    EXPECT_GE(r.elapsed, 1s) << "stopped before the timeout\n" << r.describe();
    EXPECT_LT(r.elapsed, 10s) << r.describe();
    const auto workers = recorded_workers();
    ASSERT_EQ(workers.size(), 2u) << r.describe();
    EXPECT_EQ(workers.at(0).size(), 1u) << "no restart\n" << r.describe();
    ASSERT_EQ(workers.at(1).size(), 1u) << "no restart\n" << r.describe();
    const auto lines = own_lines_with(
        r.err, {fmt::format("ddprun: error: rank 1 (pid {}) on node 0 (", workers.at(1).front()),
                "has been in uninterruptible sleep (D state) for 1",
                " s (" + std::string(k_variable) + "=1)", "the job stops without a restart"});
    EXPECT_EQ(lines.size(), 1u) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"uninterruptible"}).size(), 1u) << "one line\n"
                                                                     << r.describe();
    EXPECT_FALSE(contains(r.err, "restarting")) << r.describe();
}

// Off: the worker spends 2 s in D, then both exit 0.
class UninterruptibleOff : public IntegrationTest,
                           public ::testing::WithParamInterface<const char*> {};
std::string off_name(const ::testing::TestParamInfo<const char*>& param) {
    const std::string value = param.param;
    if (value.empty()) return "unset";
    return value == "0" ? "zero" : value;
}
INSTANTIATE_TEST_SUITE_P(Values, UninterruptibleOff, ::testing::Values("", "abc", "0"), off_name);

TEST_P(UninterruptibleOff, AWorkerInDStateRunsToItsEnd) {
    const std::string value = GetParam();
    RunOptions options;
    if (!value.empty()) options.env = {{k_variable, value}};
    auto r =
        run({"--nproc_per_node=2", k_fake_worker, "if-rank", "1", "vfork-sleep", "2"}, options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_GE(r.elapsed, 2s) << "rank 1 was not in D for 2 s\n" << r.describe();
    // A value that is not a number is most likely a mistake: said once, as a warning.
    EXPECT_EQ(own_lines_with(r.err, {"warning", std::string(k_variable) + "=abc",
                                     "not a number of seconds", "off"})
                  .size(),
              value == "abc" ? 1u : 0u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"uninterruptible sleep (D state) for"}).size(), 0u)
        << r.describe();
}

// Two agents over each backend: rank 3 (node 1) stays in D; both nodes stop with 69 and
// print the same line, and no node restarts.
class UninterruptibleTwoNodes : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(MultiNode, UninterruptibleTwoNodes, ::testing::ValuesIn(k_backends),
                         backend_name);

TEST_P(UninterruptibleTwoNodes, EveryNodeStopsNamingTheWorker) {
    Job job;
    job.flags = {"--max_restarts=2"};
    const std::vector<std::string> actions = {"if-rank", "3", "vfork-sleep", "30", "sleep", "30"};
    RunOptions options;
    options.env = {{k_variable, "1"}};
    auto r = run_nodes(job,
                       {{.node_rank = 0, .addr = "127.0.0.1", .actions = actions},
                        {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}},
                       options);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{k_unhealthy, k_unhealthy})) << describe_all(r);
    const auto workers = recorded_workers();
    ASSERT_EQ(workers.size(), 4u) << describe_all(r);
    for (const auto& [rank, pids] : workers)
        EXPECT_EQ(pids.size(), 1u) << "rank " << rank << " restarted\n" << describe_all(r);
    for (const auto& node : r) {
        EXPECT_LT(node.elapsed, 15s) << describe_all(r);
        EXPECT_EQ(
            own_lines_with(node.err, {fmt::format("ddprun: error: rank 3 (pid {}) on node 1 (",
                                                  workers.at(3).front()),
                                      "has been in uninterruptible sleep (D state) for 1",
                                      "the job stops without a restart"})
                .size(),
            1u)
            << describe_all(r);
        EXPECT_FALSE(contains(node.err, "restarting")) << describe_all(r);
    }
}

}  // namespace
}  // namespace ddprun_it
