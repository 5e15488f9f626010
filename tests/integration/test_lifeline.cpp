// --lifeline: an agent that a --hosts launcher started reads the launcher's
// link on its stdin (here a pipe the test holds, as ssh's channel would be).
// Its end kills every worker at once, on every node, whatever the phase; a
// "signal N" line is signal N from a user; any other line is warned about.

#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

// Every message of a lost link carries these words.
const std::string k_lost = "--hosts launcher's link closed";

std::vector<std::string> job(std::vector<std::string> flags,
                             const std::vector<std::string>& actions) {
    flags.insert(flags.begin(), "--lifeline");
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), actions.begin(), actions.end());
    return flags;
}

std::vector<std::string> lines_of(const std::string& out, int rank) {
    auto by_rank = lines_by_rank(out);
    auto it = by_rank.find(rank);
    return it == by_rank.end() ? std::vector<std::string>{} : it->second;
}

class LifelineSingleNode : public IntegrationTest {
  protected:
    // A ddprun whose stdin is the test's pipe.
    std::unique_ptr<DdprunProcess> start_linked(const std::vector<std::string>& args) {
        RunOptions options;
        options.stdin_pipe = true;
        options.timeout = k_node_guard;
        return start(args, options);
    }

    void wait_ready(int workers, const DdprunProcess& ddprun) {
        for (int rank = 0; rank < workers; ++rank) {
            ASSERT_TRUE(wait_for_file(path(fmt::format("ready.{}", rank)), 30s))
                << "worker " << rank << " never started\n"
                << ddprun.err_so_far();
        }
    }
};

// The workers would take their SIGTERM grace (300 s, beyond the hang guard): only a
// kill at once ends the job in time.
TEST_F(LifelineSingleNode, EndOfFileKillsEveryWorkerAtOnce) {
    auto ddprun = start_linked(job({"--nproc_per_node=2", "--shutdown_timeout=300"},
                                   sleepers(m_dir, {"trap", "SIGTERM", "trap", "SIGINT"})));
    wait_ready(2, *ddprun);
    if (HasFatalFailure()) return;
    ddprun->close_stdin();
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << "the end of the link did not stop the job\n" << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.describe();
    // One line, and it says why.
    auto own = ddprun_own_lines(r.err);
    ASSERT_EQ(own.size(), 1u) << r.describe();
    EXPECT_TRUE(contains(own[0], k_lost) && contains(own[0], "killing every worker"))
        << r.describe();
    // No grace was given: the workers never saw a stop signal.
    EXPECT_EQ(count_occurrences(r.out, "got SIG"), 0u) << r.describe();
}

// When the ssh connection drops, ddprun's stdout and stderr go with it: the writes that
// follow fail with EPIPE, and must not kill ddprun before it has killed the workers
// (-v: it has more to say on the way out).
TEST_F(LifelineSingleNode, EndOfFileWithBrokenOutputStillKillsTheWorkers) {
    auto ddprun = start_linked(
        job({"--nproc_per_node=2", "--shutdown_timeout=300", "-v"}, sleepers(m_dir, {})));
    wait_ready(2, *ddprun);
    if (HasFatalFailure()) return;
    ddprun->close_output();
    ddprun->close_stdin();
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << "not 141 (SIGPIPE)\n" << r.describe();
    EXPECT_TRUE(wait_job_gone(k_orphan_grace).empty());
}

TEST_F(LifelineSingleNode, SignalLineStopsLikeSigint) {
    auto ddprun = start_linked(job(
        {"--nproc_per_node=2"}, sleepers(m_dir, {"trap-exit", "SIGINT", "trap-exit", "SIGTERM"})));
    wait_ready(2, *ddprun);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(ddprun->write_stdin("signal 2\n"));
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.describe();
    for (int rank : {0, 1})
        EXPECT_EQ(lines_of(r.out, rank), std::vector<std::string>{"got SIGINT"}) << r.describe();
    EXPECT_TRUE(own_lines_with(r.err, {k_lost}).empty()) << r.describe();
}

// As from a user: a second stop signal kills at once, instead of the grace (300 s).
TEST_F(LifelineSingleNode, SecondSignalLineKillsAtOnce) {
    auto ddprun = start_linked(job({"--nproc_per_node=2", "--shutdown_timeout=300"},
                                   sleepers(m_dir, {"trap", "SIGTERM", "trap", "SIGINT"})));
    wait_ready(2, *ddprun);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(ddprun->write_stdin("signal 15\n"));
    // The first one was handled once a worker got it; two at once could merge.
    ASSERT_TRUE(ddprun->wait_for_output("[0]: got SIGTERM", 30s)) << ddprun->err_so_far();
    ASSERT_TRUE(ddprun->write_stdin("signal 15\n"));
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << "the second line did not kill the workers\n" << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.describe();
}

TEST_F(LifelineSingleNode, SigusrLineIsForwardedAndTheJobGoesOn) {
    auto ddprun = start_linked(
        job({"--nproc_per_node=2"}, {"ready", path("ready.{rank}"), "wait-signal", "print", "1"}));
    wait_ready(2, *ddprun);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(ddprun->write_stdin(fmt::format("signal {}\n", SIGUSR1)));
    auto r = ddprun->wait();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (int rank : {0, 1})
        EXPECT_EQ(lines_of(r.out, rank),
                  (std::vector<std::string>{"got SIGUSR1", fmt::format("line 0 rank {}", rank)}))
            << r.describe();
}

// The link is ddprun's alone: workers read /dev/null (end of file at once) while it is open.
TEST_F(LifelineSingleNode, WorkersDoNotSeeTheLink) {
    auto ddprun = start_linked(job({"--nproc_per_node=2"}, {"read-stdin", "print", "1"}));
    auto r = ddprun->wait();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (int rank : {0, 1})
        EXPECT_EQ(lines_of(r.out, rank),
                  (std::vector<std::string>{"stdin: eof after 0 bytes",
                                            fmt::format("line 0 rank {}", rank)}))
            << r.describe();
}

// Bad lines are warned about, one line each, and change nothing: the job goes on
// until the signal that follows them ends it.
TEST_F(LifelineSingleNode, BadLinesAreWarnedAboutAndIgnored) {
    auto ddprun = start_linked(job(
        {"--nproc_per_node=1"}, {"count-signal", "SIGUSR1", path("usr1"), "ready",
                                 path("ready.{rank}"), "wait-file", path("never"), "print", "1"}));
    wait_ready(1, *ddprun);
    if (HasFatalFailure()) return;
    const std::string huge(100000, 'x');
    ASSERT_TRUE(ddprun->write_stdin("hello there\nsignal 99\n" + huge + "\nsignal 9\n"));
    ASSERT_TRUE(ddprun->wait_for_output("does not handle SIGKILL", 30s, true))
        << ddprun->err_so_far();
    EXPECT_TRUE(ddprun->running());
    ASSERT_TRUE(ddprun->write_stdin("signal 10\n"));
    ASSERT_TRUE(wait_until([&] { return read_text_file(path("usr1")) == "SIGUSR1 0\n"; }, 30s))
        << ddprun->err_so_far();
    ASSERT_TRUE(ddprun->write_stdin("signal 15\n"));
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"warning: ignored a line", "'hello there'"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"warning: ignored a line", "'signal 99'"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"warning: ignored a line", "(100000 bytes)"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"warning: ignored 'signal 9'"}).size(), 1u) << r.describe();
    // Nothing of the huge line is echoed whole.
    EXPECT_LT(r.err.size(), 10000u) << r.describe();
    // SIGUSR1 reached the worker once.
    EXPECT_EQ(read_text_file(path("usr1")), "SIGUSR1 0\n") << r.describe();
}

// --- several nodes ---------------------------------------------------------------

class LifelineMultiNode : public MultiNodeBackendTest {
  protected:
    static RunOptions linked() {
        RunOptions options;
        options.stdin_pipe = true;
        return options;
    }
};

// A launcher gone while an agent still connects to the store (c10d: node 0 never
// starts its store) or waits for its peers (etcd): nobody will ever stop it but the link.
TEST_P(LifelineMultiNode, EndOfFileWhileConnectingOrJoiningExitsPromptly) {
    Job job;
    job.conf["join_timeout"] = "300";  // beyond the guard: only the link ends the wait
    job.flags = {"--lifeline"};
    job.guard = 20s;
    auto node1 =
        start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = {"exit", "0"}}, linked());
    ASSERT_TRUE(wait_until([&] { return agent_of(*node1) > 0; }, 10s)) << node1->err_so_far();
    node1->close_stdin();
    auto r = node1->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {k_lost}).size(), 1u) << r.describe();
}

// Node 1's launcher link ends: both nodes stop at once (no 300 s grace), and node 0
// says why.
TEST_P(LifelineMultiNode, EndOfFileOnOneNodeKillsEveryNode) {
    Job job;
    job.flags = {"--lifeline", "--shutdown_timeout=300"};
    const auto actions = sleepers(m_dir, {"trap", "SIGTERM"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(
        start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}, linked()));
    agents.push_back(
        start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}, linked()));
    wait_ready(4, agents);
    if (HasFatalFailure()) return;
    agents[1]->close_stdin();
    auto r = wait_nodes(agents);
    ASSERT_FALSE(r[0].timed_out || r[1].timed_out) << describe_all(r);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{128 + SIGKILL, 128 + SIGKILL})) << describe_all(r);
    EXPECT_EQ(own_lines_with(r[1].err, {k_lost, "killing every worker"}).size(), 1u)
        << describe_all(r);
    EXPECT_FALSE(
        own_lines_with(r[0].err, {"node 1 (127.0.0.2)", "lost its link to the --hosts launcher"})
            .empty())
        << "node 0 must name node 1's lost link\n"
        << describe_all(r);
    EXPECT_TRUE(wait_job_gone(k_orphan_grace).empty());
}

INSTANTIATE_TEST_SUITE_P(Lifeline, LifelineMultiNode, ::testing::ValuesIn(k_backends),
                         backend_name);

}  // namespace
}  // namespace ddprun_it
