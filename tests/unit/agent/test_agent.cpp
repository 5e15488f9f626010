// The agent's state machine against a scripted cluster: real workers
// (tests/fake_worker), real signals, and a FakeCluster that plays the other
// nodes: it answers open and join as the test says, stops the round the way
// the test says another node would, and records what the agent published.
#include <signal.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <optional>

#include "ddprun/agent/agent.hpp"
#include "workers/worker_fixture.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::Console;
using testing::fake_worker_context;
using ::testing::HasSubstr;
using testing::TempDir;

// What the fake cluster was asked, and what it answers.
struct Script {
    // Answers.
    Status open_result;
    std::optional<Error> join_error;  // the join fails with this
    bool join_never_answers = false;  // until abort()
    std::function<void()> on_join;    // runs inside join(), with the agent's signals blocked
    // Run on the loop right after the join of round `round` answered: what the other
    // nodes do while this node's workers start.
    std::function<void(int round, const RoundHandlers&, boost::asio::io_context&)> after_join;
    // Whether the cluster ends the round itself when the agent publishes (the local
    // cluster's rule: the first publication wins).
    bool stop_on_publish = true;

    // Records.
    int opens = 0;
    std::vector<int> joins;  // rounds
    std::vector<FailureRecord> failures;
    int finished = 0;
    int kills = 0;
    std::vector<int> broadcasts;
    std::vector<std::pair<std::string, int>> aborts;
    std::vector<bool> end_rounds;  // killed, per call
};

class FakeCluster final : public Cluster {
  public:
    FakeCluster(boost::asio::io_context& io, Script& script) : m_io(io), m_script(script) {}

    void open(Opened done) override {
        ++m_script.opens;
        boost::asio::post(m_io, [this, done] { done(m_script.open_result); });
    }

    void join(int round, int master_port, RoundHandlers handlers, Joined done) override {
        m_script.joins.push_back(round);
        m_handlers = std::move(handlers);
        m_stopped = false;
        if (m_script.on_join) m_script.on_join();
        if (m_script.join_never_answers) {
            m_pending_join = std::move(done);
            return;
        }
        boost::asio::post(m_io, [this, round, master_port, done] {
            if (m_script.join_error) return done(std::unexpected(*m_script.join_error));
            RoundInfo info;
            info.node_rank = 0;
            info.nproc_per_node = {2};
            info.master_addr = "127.0.0.1";
            info.master_port = master_port;
            info.restart_count = info.round = round;
            done(info);
            if (m_script.after_join) m_script.after_join(round, m_handlers, m_io);
        });
    }

    void publish_failure(FailureRecord record) override {
        m_script.failures.push_back(record);
        if (!m_script.stop_on_publish) return;
        StopEvent event;
        event.kind = StopEvent::Kind::Failure;
        event.exit_code = record.exit_code;
        event.failure = record;
        stop(event);
    }
    void publish_finished() override {
        ++m_script.finished;
        if (m_script.stop_on_publish) stop(StopEvent{StopEvent::Kind::Done, {}, {}, 0});
    }
    void publish_kill() override { ++m_script.kills; }
    void broadcast_signal(int signal) override { m_script.broadcasts.push_back(signal); }
    void abort(const std::string& message, int exit_code) override {
        m_script.aborts.emplace_back(message, exit_code);
        if (m_pending_join) {
            auto done = std::move(m_pending_join);
            m_pending_join = nullptr;
            boost::asio::post(m_io, [done, message, exit_code] {
                done(std::unexpected(Error{message, exit_code}));
            });
        }
        stop(StopEvent{StopEvent::Kind::Abort, {}, message, exit_code});
    }
    void end_round(bool killed) override { m_script.end_rounds.push_back(killed); }

  private:
    void stop(StopEvent event) {
        if (m_stopped || !m_handlers.on_stop) return;
        m_stopped = true;
        boost::asio::post(m_io, [on_stop = m_handlers.on_stop, event] { on_stop(event); });
    }

    boost::asio::io_context& m_io;
    Script& m_script;
    RoundHandlers m_handlers;
    Joined m_pending_join;
    bool m_stopped = false;
};

// Calls `then` on the loop once every path exists (fake_worker's `ready` files): a
// worker's signal dispositions are set only once it runs, so a test that signals
// workers waits for them. Polled, bounded by the test's own timeout.
void when_ready(boost::asio::io_context& io, std::vector<std::filesystem::path> paths,
                std::function<void()> then) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io, std::chrono::milliseconds(5));
    timer->async_wait([&io, timer, paths, then](boost::system::error_code ec) {
        if (ec) return;
        for (const auto& path : paths)
            if (!std::filesystem::exists(path)) return when_ready(io, paths, then);
        then();
    });
}

// A failure another node published: rank 5 on "otherhost" exited 3.
StopEvent remote_failure(int exit_code = 3) {
    StopEvent event;
    event.kind = StopEvent::Kind::Failure;
    event.exit_code = exit_code;
    event.failure.kind = FailureKind::Worker;
    event.failure.node_rank = 1;
    event.failure.host = "otherhost";
    event.failure.rank = 5;
    event.failure.local_rank = 1;
    event.failure.pid = 4242;
    event.failure.exit_code = exit_code;
    event.failure.time_ms = 1;
    event.failure.message = "remote boom";
    return event;
}

class AgentTest : public ::testing::Test {
  protected:
    TempDir dir;
    Console console{dir.path()};
    Script script;

    std::string ready_path() const { return (dir.path() / "ready.{rank}").string(); }
    std::vector<std::filesystem::path> ready_files() const {
        return {dir.path() / "ready.0", dir.path() / "ready.1"};
    }

    int run(std::vector<std::string> worker_args, std::function<void(LaunchContext&)> adjust = {}) {
        LaunchContext ctx = fake_worker_context(dir.path() / "scratch", 2, std::move(worker_args));
        ctx.config.nnodes = 2;
        if (adjust) adjust(ctx);
        Agent agent(
            std::move(ctx),
            [this](boost::asio::io_context& io, const LaunchContext&) {
                return std::make_unique<FakeCluster>(io, script);
            },
            console.options());
        return agent.run();
    }
};

TEST_F(AgentTest, EveryWorkerSucceedingEndsTheRoundWhenTheClusterSaysDone) {
    EXPECT_EQ(run({"print", "1"}), 0);
    EXPECT_EQ(script.opens, 1);
    EXPECT_EQ(script.joins, std::vector<int>{0});
    EXPECT_EQ(script.finished, 1);
    EXPECT_TRUE(script.failures.empty());
    EXPECT_EQ(script.end_rounds, std::vector<bool>{false});
    EXPECT_THAT(console.out(), HasSubstr("[1]: line 0 rank 1"));
}

TEST_F(AgentTest, ALocalFailureIsPublishedWithItsRankAndStopsTheOthers) {
    EXPECT_EQ(run({"if-rank", "1", "stderr", "1", "if-rank", "1", "exit", "4", "sleep", "30"}), 4);
    ASSERT_EQ(script.failures.size(), 1u);
    const FailureRecord& record = script.failures[0];
    EXPECT_EQ(record.kind, FailureKind::Worker);
    EXPECT_EQ(record.rank, 1);
    EXPECT_EQ(record.exit_code, 4);
    EXPECT_EQ(record.host, "testhost");
    EXPECT_EQ(record.stderr_tail, std::vector<std::string>{"err 0 rank 1"});
    EXPECT_EQ(script.finished, 0);
}

TEST_F(AgentTest, AFailureOnAnotherNodeStopsTheWorkersAndIsTheRootCause) {
    script.after_join = [](int, const RoundHandlers& handlers, auto&) {
        handlers.on_stop(remote_failure(3));
    };
    EXPECT_EQ(run({"sleep", "30"}), 3);
    EXPECT_TRUE(script.failures.empty()) << "workers stopped by the agent are not a failure";
    EXPECT_EQ(script.end_rounds, std::vector<bool>{false});
}

TEST_F(AgentTest, AFailureDuringTheExitBarrierFailsThisNodeToo) {
    // The workers here succeed, but the cluster reports another node's failure instead of Done.
    script.stop_on_publish = false;
    script.after_join = [](int, const RoundHandlers& handlers, auto&) {
        handlers.on_stop(remote_failure(9));
    };
    EXPECT_EQ(run({"exit", "0"}), 9);
}

TEST_F(AgentTest, AStoreLostIsTheRendezvousExitCode) {
    script.after_join = [](int, const RoundHandlers& handlers, auto&) {
        handlers.on_stop(StopEvent{StopEvent::Kind::StoreLost, {}, "lost the store", 75});
    };
    EXPECT_EQ(run({"sleep", "30"}), exit_code::kRendezvous);
}

TEST_F(AgentTest, AnOpenThatFailsEndsTheJobWithItsCodeAndNeverJoins) {
    script.open_result = std::unexpected(rendezvous_error("no store there"));
    EXPECT_EQ(run({"exit", "0"}), exit_code::kRendezvous);
    EXPECT_TRUE(script.joins.empty());
}

TEST_F(AgentTest, AJoinThatFailsEndsTheRoundAndTheJob) {
    script.join_error = Error{"node 1 never joined", exit_code::kRendezvous};
    EXPECT_EQ(run({"exit", "0"}), exit_code::kRendezvous);
    EXPECT_EQ(script.end_rounds, std::vector<bool>{false});
}

TEST_F(AgentTest, ASignalDuringTheJoinAbortsItOnEveryNode) {
    script.join_never_answers = true;
    // The agent reads SIGTERM from its loop: raised now, it arrives while the join is pending.
    script.on_join = [] { ::raise(SIGTERM); };
    EXPECT_EQ(run({"exit", "0"}), exit_code::kSignalBase + SIGTERM);
    ASSERT_EQ(script.aborts.size(), 1u);
    EXPECT_THAT(script.aborts[0].first, HasSubstr("received SIGTERM while joining"));
    EXPECT_EQ(script.aborts[0].second, exit_code::kSignalBase + SIGTERM);
}

TEST_F(AgentTest, ARestartRunsTheNextRoundAndItsWorkersSeeTheRestartCount) {
    EXPECT_EQ(run({"if-restart", "0", "if-rank", "0", "exit", "3", "print", "1"},
                  [](LaunchContext& c) { c.config.max_restarts = 1; }),
              0);
    EXPECT_EQ(script.joins, (std::vector<int>{0, 1}));
    EXPECT_EQ(script.end_rounds, (std::vector<bool>{false, false}));
    ASSERT_EQ(script.failures.size(), 1u);
    EXPECT_EQ(script.failures[0].exit_code, 3);
}

TEST_F(AgentTest, ExhaustedRestartsReportTheLastFailure) {
    EXPECT_EQ(run({"if-rank", "0", "exit", "6", "sleep", "30"},
                  [](LaunchContext& c) { c.config.max_restarts = 2; }),
              6);
    EXPECT_EQ(script.joins, (std::vector<int>{0, 1, 2}));
}

TEST_F(AgentTest, AKillFromAnotherNodeEndsTheGraceAtOnce) {
    // Workers that ignore SIGTERM would hold the round for the whole shutdown_timeout.
    script.after_join = [](int, const RoundHandlers& handlers, auto&) {
        handlers.on_stop(remote_failure(3));
        handlers.on_kill();
    };
    auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(run({"ignore-term", "sleep", "30"},
                  [](LaunchContext& c) { c.config.shutdown_timeout = 60s; }),
              3);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 30s) << "the kill did not end the grace";
}

TEST_F(AgentTest, TwoStopSignalsPublishTheSignalThenAKill) {
    // Both are pending when the agent reads; the kernel hands out the lower number first.
    script.after_join = [](int, const RoundHandlers&, auto&) {
        ::raise(SIGTERM);
        ::raise(SIGINT);
    };
    EXPECT_EQ(run({"ignore-term", "ignore", "SIGINT", "sleep", "30"},
                  [](LaunchContext& c) { c.config.shutdown_timeout = 60s; }),
              exit_code::kSignalBase + SIGINT);
    ASSERT_EQ(script.failures.size(), 1u);
    EXPECT_EQ(script.failures[0].kind, FailureKind::Signal);
    EXPECT_EQ(script.failures[0].exit_code, exit_code::kSignalBase + SIGINT);
    EXPECT_EQ(script.kills, 1);
}

TEST_F(AgentTest, AForwardedSignalReachesTheWorkersAndIsBroadcast) {
    script.after_join = [this](int, const RoundHandlers&, auto& io) {
        when_ready(io, ready_files(), [] { ::raise(SIGUSR1); });
    };
    EXPECT_EQ(run({"ready", ready_path(), "wait-signal"}), 0);
    EXPECT_EQ(script.broadcasts, std::vector<int>{SIGUSR1});
    EXPECT_THAT(console.out(), HasSubstr("[0]: got SIGUSR1"));
    EXPECT_THAT(console.out(), HasSubstr("[1]: got SIGUSR1"));
}

TEST_F(AgentTest, ABroadcastFromAnotherNodeReachesTheWorkers) {
    script.after_join = [this](int, const RoundHandlers& handlers, auto& io) {
        when_ready(io, ready_files(), [on_signal = handlers.on_signal] { on_signal(SIGUSR2); });
    };
    EXPECT_EQ(run({"ready", ready_path(), "wait-signal"}), 0);
    EXPECT_THAT(console.out(), HasSubstr("[1]: got SIGUSR2"));
    EXPECT_TRUE(script.broadcasts.empty());
}

TEST_F(AgentTest, WorkersThatCannotStartAbortTheRoundEverywhere) {
    EXPECT_EQ(run({"exit", "0"},
                  [this](LaunchContext& c) {
                      std::ofstream(dir.path() / "file") << "x";
                      c.scratch_dir = (dir.path() / "file").string();
                  }),
              exit_code::kUsage);
    ASSERT_EQ(script.aborts.size(), 1u);
    EXPECT_THAT(script.aborts[0].first, HasSubstr("could not start its workers"));
}

}  // namespace
}  // namespace ddprun
