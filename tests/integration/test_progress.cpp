// Restarts that make no progress (--max-no-progress-restarts, --progress-file):
// real restarts of real workers on one node and on two agents over both
// backends. A round makes progress when a rank beats on DDPRUN_PROGRESS_FD or
// the progress file changes (a checkpoint saved by rename); N restarts in a row
// without either, and the next failure stops the job with exit code 78 on
// every node, with the same decision in every node's event log.
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

constexpr int k_no_progress = 78;

std::vector<std::string> lines_of_file(const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

// The "progress" events of an event log, in order.
std::vector<std::string> progress_events(const std::string& log) {
    std::vector<std::string> found;
    for (const auto& line : lines_of_file(log))
        if (contains(line, "\"event\":\"progress\"")) found.push_back(line);
    return found;
}

int restarts_logged(const std::string& err) {
    return static_cast<int>(own_lines_with(err, {"restarting the workers ("}).size());
}

class Progress : public IntegrationTest {};

// Rank 1 fails at once every round, nobody beats: two restarts without progress
// are allowed, the third failure stops the job with 78 instead of using the
// seven restarts left; one line says why, and the box carries the exit code.
TEST_F(Progress, RestartsWithoutProgressStopTheJobWith78) {
    const std::string log = path("events.jsonl");
    auto r = run({"--nproc_per_node=2", "--max_restarts=10", "--max-no-progress-restarts=2",
                  "--event-log", log, k_fake_worker, "if-rank", "1", "exit", "3", "sleep", "0.2"});
    ASSERT_EQ(r.exit_code, k_no_progress) << r.describe();
    EXPECT_EQ(restarts_logged(r.err), 2) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"no progress in 3 failed round(s) in a row",
                                     "no rank wrote to DDPRUN_PROGRESS_FD",
                                     "--max-no-progress-restarts=2", "exit code 78"})
                  .size(),
              1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"ddprun: job made no progress in 2 restart(s) in a row "
                                     "(exit code 78)"})
                  .size(),
              1u)
        << r.describe();
    EXPECT_TRUE(contains(r.err, "  exit code: 3")) << "the root cause is still the worker's\n"
                                                   << r.describe();
    const auto events = progress_events(log);
    ASSERT_EQ(events.size(), 3u) << r.describe();
    EXPECT_TRUE(contains(events[0], "\"made_progress\":false,\"restarts_without_progress\":1"));
    EXPECT_TRUE(contains(events[2], "\"restarts_without_progress\":3"));
    EXPECT_TRUE(contains(events[2], "\"stopping\":true"));
    EXPECT_TRUE(contains(events[1], "\"stopping\":false"));
}

// Every round beats before it fails: each restart made progress, so the job
// uses every restart and ends with the worker's own code.
TEST_F(Progress, ABeatIsProgress) {
    auto r = run({"--nproc_per_node=2", "--max_restarts=3", "--max-no-progress-restarts=1",
                  k_fake_worker, "if-rank", "0", "beat", "1:10", "if-rank", "1", "sleep", "0.3",
                  "if-rank", "1", "exit", "3", "sleep", "5"});
    ASSERT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(restarts_logged(r.err), 3) << r.describe();
    EXPECT_TRUE(contains(r.err, "job failed after 3 restart(s)")) << r.describe();
}

// No beats, but rank 0 saves a checkpoint (written, then renamed into place)
// every round: the progress file changed, so every restart is used. Without the
// save, the same job stops with 78.
TEST_F(Progress, AChangedProgressFileIsProgress) {
    const std::string checkpoint = path("latest.ckpt");
    auto saved = run({"--nproc_per_node=2",
                      "--max_restarts=3",
                      "--max-no-progress-restarts=1",
                      "--progress-file",
                      checkpoint,
                      k_fake_worker,
                      "if-rank",
                      "0",
                      "ready",
                      checkpoint,
                      "if-rank",
                      "1",
                      "sleep",
                      "0.3",
                      "if-rank",
                      "1",
                      "exit",
                      "3",
                      "sleep",
                      "5"});
    ASSERT_EQ(saved.exit_code, 3) << saved.describe();
    EXPECT_EQ(restarts_logged(saved.err), 3) << saved.describe();

    auto unsaved = run({"--nproc_per_node=2", "--max_restarts=3", "--max-no-progress-restarts=1",
                        "--progress-file", checkpoint, k_fake_worker, "if-rank", "1", "exit", "3",
                        "sleep", "5"});
    ASSERT_EQ(unsaved.exit_code, k_no_progress) << unsaved.describe();
    EXPECT_EQ(restarts_logged(unsaved.err), 1) << unsaved.describe();
    EXPECT_EQ(own_lines_with(unsaved.err, {"no rank wrote to DDPRUN_PROGRESS_FD and " + checkpoint +
                                           " did not change"})
                  .size(),
              1u)
        << unsaved.describe();
}

// Progress resets the count: fail without progress, then with, then without:
// the limit of 1 is never passed, and all three restarts are used.
TEST_F(Progress, ProgressResetsTheCount) {
    // Round n (TORCHELASTIC_RESTART_COUNT) beats only when n is 1 or 3.
    auto r = run({"--nproc_per_node=1", "--max_restarts=3", "--max-no-progress-restarts=1",
                  k_fake_worker, "if-restart", "1", "beat", "1:10", "if-restart", "3", "beat",
                  "1:10", "exit", "3"});
    ASSERT_EQ(r.exit_code, 3) << r.describe();
    EXPECT_EQ(restarts_logged(r.err), 3) << r.describe();
}

TEST_F(Progress, BadInputIsOneLine) {
    auto no_limit = run({"--progress-file=/tmp/x", k_fake_worker, "exit", "0"});
    EXPECT_EQ(no_limit.exit_code, 2) << no_limit.describe();
    EXPECT_EQ(
        own_lines_with(no_limit.err, {"--progress-file", "--max-no-progress-restarts"}).size(), 1u)
        << no_limit.describe();
    auto negative = run({"--max-no-progress-restarts=-1", k_fake_worker, "exit", "0"});
    EXPECT_EQ(negative.exit_code, 2) << negative.describe();
    auto dry = run({"--dry-run", "--max_restarts=5", "--max-no-progress-restarts=2",
                    "--progress-file=/ckpt/latest", k_fake_worker});
    ASSERT_EQ(dry.exit_code, 0) << dry.describe();
    EXPECT_TRUE(contains(dry.out,
                         "DDPRUN_PROGRESS_FD or /ckpt/latest changed on a node; after 2 "
                         "restart(s) in a row without it the job stops with exit code 78"))
        << dry.describe();
}

// --- two agents ------------------------------------------------------------------

class ProgressTwoNodes : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(MultiNode, ProgressTwoNodes, ::testing::ValuesIn(k_backends),
                         backend_name);

// Rank 3 (node 1) fails every round; only rank 0 (node 0) beats. Progress is
// job-wide: node 1's ranks made none, node 0's did, so both nodes use every
// restart and exit with the worker's code. Without rank 0's beats both stop
// with 78 after one restart, and both event logs say the same.
TEST_P(ProgressTwoNodes, EveryNodeDecidesAlikeFromEveryNodesProgress) {
    for (bool beats : {true, false}) {
        SCOPED_TRACE(beats ? "rank 0 beats" : "nobody beats");
        m_run_id += beats ? "b" : "n";
        const std::vector<std::string> logs = {path(fmt::format("{}-0.jsonl", beats)),
                                               path(fmt::format("{}-1.jsonl", beats))};
        Job job;
        job.flags = {"--max_restarts=2", "--max-no-progress-restarts=1"};
        std::vector<std::string> actions;
        if (beats) actions = {"if-rank", "0", "beat", "1:10"};
        actions.insert(actions.end(), {"if-rank", "3", "sleep", "0.3", "if-rank", "3", "exit", "3",
                                       "sleep", "10"});
        auto r = run_nodes(job, {{.node_rank = 0,
                                  .addr = "127.0.0.1",
                                  .flags = {"--event-log=" + logs[0]},
                                  .actions = actions},
                                 {.node_rank = 1,
                                  .addr = "127.0.0.2",
                                  .flags = {"--event-log=" + logs[1]},
                                  .actions = actions}});
        const int expected = beats ? 3 : k_no_progress;
        EXPECT_EQ(exit_codes(r), (std::vector<int>{expected, expected})) << describe_all(r);
        for (const auto& node : r)
            EXPECT_EQ(restarts_logged(node.err), beats ? 2 : 1) << describe_all(r);
        std::vector<std::vector<std::string>> decisions;
        for (const auto& log : logs) {
            std::vector<std::string> mine;
            // Each decision without the line's time, node and host.
            for (const auto& event : progress_events(log))
                mine.push_back(event.substr(event.find("\"round\":")));
            decisions.push_back(mine);
        }
        EXPECT_EQ(decisions[0], decisions[1]) << describe_all(r);
        EXPECT_EQ(decisions[0].size(), 2u) << describe_all(r);  // rounds 0 and 1
    }
}

}  // namespace
}  // namespace ddprun_it
