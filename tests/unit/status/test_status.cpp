// `ddprun status` without a job (status.hpp): read_job() against an in-memory store
// holding what agents write, and the screen and JSON line by line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ddprun/elastic/elastic.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/status/status.hpp"
#include "ddprun/store/signed_store.hpp"
#include "support/memory_store.hpp"
#include "support/text_lines.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string k_secret = "0123456789abcdef0123456789abcdef";

constexpr std::int64_t k_now = 1796560628000;  // 2026-12-06 12:37:08 UTC

NodeStatus node(int rank, std::vector<RankStatus> ranks) {
    NodeStatus s;
    s.node_rank = rank;
    s.round = 1;
    s.restarts = 1;
    s.state = "running";
    s.host = rank == 0 ? "gpu01" : "gpu02";
    s.pid = 100 + rank;
    s.first_rank = 2 * rank;
    s.nproc = 2;
    s.workers_alive = 2;
    s.time_ms = k_now - 1500;
    s.ranks = std::move(ranks);
    if (rank == 0) {
        s.nnodes = 3;
        s.world_size = 6;
        s.max_restarts = 3;
    }
    return s;
}

JobView running_view() {
    JobView view;
    view.run_id = "job";
    view.where = "the c10d store at 10.0.0.1:29400";
    view.now_ms = k_now;
    NodeStatus zero = node(0, {{0, 500, 100, 10}, {1, 480, 200, 9.5}});
    zero.stragglers = {{3, 1, 1, 9.75, k_now - 60000, false, 1}};
    NodeStatus one = node(1, {{2, 490, 100, 10}, {3, 50, 12000, 1}});
    view.zero = zero;
    view.nodes = {zero, one, std::nullopt};
    return view;
}

TEST(StatusScreen, ARunningJobLineByLine) {
    const std::string screen = render_status(running_view());
    EXPECT_THAT(lines_of(screen),
                ElementsAre("job 'job' (the c10d store at 10.0.0.1:29400), at 12:37:08 UTC",
                            "state:      running round 1", "restarts:   1 of 3",
                            "nodes:      3 (world size 6)", "stragglers:",
                            "  rank 3 (node 1): 1.0 steps/s against a median of 9.8, since "
                            "12:36:08 UTC",
                            "",
                            "node  host                      agent pid  ranks     workers  state"
                            "           heartbeat",
                            "0     gpu01                           100  0-1       2/2      running"
                            "         1.5 s ago",
                            "1     gpu02                           101  2-3       2/2      running"
                            "         1.5 s ago",
                            "2     (no status record yet)", "",
                            "rank   node     steps   last step   steps/s  (median 9.8)",
                            "0      0          500      100 ms      10.0",
                            "1      0          480      200 ms       9.5",
                            "2      1          490      100 ms      10.0",
                            "3      1           50        12 s       1.0  straggler, silent"));
}

TEST(StatusScreen, MarksASlowRankNodeZeroHasNotNamedYet) {
    JobView view = running_view();
    view.zero->stragglers.clear();
    view.nodes[0]->stragglers.clear();
    EXPECT_THAT(render_status(view),
                HasSubstr("3      1           50        12 s       1.0  slow, silent\n"));
    EXPECT_THAT(render_status(view, 0.05), HasSubstr("1.0  silent\n"));
}

TEST(StatusScreen, TheStatesOfAJob) {
    JobView view = running_view();
    view.zero->state = "stopping";
    view.zero->exit_code = 3;
    view.zero->stop = "rank 3 (node 1) failed";
    EXPECT_THAT(render_status(view),
                HasSubstr("state:      stopping round 1: rank 3 (node 1) failed (exit code 3)\n"));
    view.zero->exit_code = 0;
    view.zero->stop = "every node finished";
    EXPECT_THAT(render_status(view), HasSubstr("state:      finished with code 0 (every node "
                                               "finished; the agents are leaving)\n"));
    view.zero->exit_code = -1;
    view.zero->state = "joining";
    view.zero->round = 2;
    EXPECT_THAT(render_status(view), HasSubstr("state:      joining round 2\n"));
    // A node still in the last round's record.
    EXPECT_THAT(render_status(view), HasSubstr("round 1?"));
}

TEST(StatusScreen, JoiningRoundZero) {
    JobView view;
    view.run_id = "job";
    view.where = "etcd at 10.0.0.1:2379";
    view.now_ms = k_now;
    view.joining_nnodes = 2;
    NodeInfo info;
    info.node_rank = 0;
    info.host = "gpu01";
    info.pid = 77;
    info.nproc = 8;
    view.joined = {info};
    EXPECT_THAT(lines_of(render_status(view)),
                ElementsAre("job 'job' (etcd at 10.0.0.1:2379), at 12:37:08 UTC",
                            "state:      joining round 0: 1 of 2 nodes", "",
                            "node  host                      agent pid  nproc",
                            "0     gpu01                            77  8"));
    view.joined.clear();
    view.joining_nnodes = 0;
    EXPECT_THAT(render_status(view), HasSubstr("forming its first round (elastic)"));
}

TEST(StatusJson, OneObjectWithEveryNodeAndRank) {
    auto json = nlohmann::json::parse(status_json(running_view()));
    EXPECT_EQ(json["state"], "running");
    EXPECT_EQ(json["round"], 1);
    EXPECT_EQ(json["nnodes"], 3);
    EXPECT_EQ(json["world_size"], 6);
    EXPECT_TRUE(json["exit_code"].is_null());
    ASSERT_EQ(json["nodes"].size(), 3u);
    EXPECT_EQ(json["nodes"][1]["host"], "gpu02");
    EXPECT_EQ(json["nodes"][1]["heartbeat_age_ms"], 1500);
    EXPECT_TRUE(json["nodes"][2]["status"].is_null());
    ASSERT_EQ(json["ranks"].size(), 4u);
    EXPECT_EQ(json["ranks"][3]["marks"], nlohmann::json({"straggler", "silent"}));
    EXPECT_EQ(json["stragglers"][0]["rank"], 3);
    EXPECT_EQ(json["median_steps_per_second"], 9.75);
}

// --- read_job against a store ------------------------------------------------------

class ReadJob : public ::testing::Test {
  protected:
    std::unique_ptr<Store> m_store = make_memory_store(1s);
    void put(Store& store, const NodeStatus& status) {
        store.set(JobKeys("job").status(status.node_rank), to_json(status, "job"));
    }
};

TEST_F(ReadJob, NodeZerosRecordAndTheOthers) {
    put(*m_store, node(0, {}));
    put(*m_store, node(2, {}));
    auto view = read_job(*m_store, "job", "here", false);
    ASSERT_TRUE(view) << view.error().message;
    ASSERT_EQ(view->nodes.size(), 3u);
    EXPECT_TRUE(view->nodes[0]);
    EXPECT_FALSE(view->nodes[1]);
    EXPECT_TRUE(view->nodes[2]);
    EXPECT_EQ(view->zero->nnodes, 3);
}

TEST_F(ReadJob, AJobThatIsNotThereIsExit1) {
    auto view = read_job(*m_store, "job", "the c10d store at 10.0.0.1:29400", false);
    ASSERT_FALSE(view);
    EXPECT_EQ(view.error().exit_code, 1);
    EXPECT_EQ(view.error().message,
              "no job 'job' at the c10d store at 10.0.0.1:29400: it ended (its records are gone), "
              "has not started, or runs under another --rdzv_id");
    // Another job's records are not this one's.
    put(*m_store, node(0, {}));
    EXPECT_FALSE(read_job(*m_store, "other", "here", false));
}

TEST_F(ReadJob, RoundZeroBeingJoined) {
    NodeInfo info;
    info.node_rank = 0;
    info.host = "gpu01";
    info.fingerprint.nnodes = 4;
    m_store->set(JobKeys("job").round(0, "info/0"), to_json(info));
    auto view = read_job(*m_store, "job", "here", false);
    ASSERT_TRUE(view) << view.error().message;
    EXPECT_EQ(view->joining_nnodes, 4);
    ASSERT_EQ(view->joined.size(), 1u);
    EXPECT_EQ(view->joined[0].host, "gpu01");
}

TEST_F(ReadJob, AnElasticJobFormingItsFirstRound) {
    m_store->add(JobKeys("job").elastic("arrivals"), 1);
    auto view = read_job(*m_store, "job", "here", false);
    ASSERT_TRUE(view) << view.error().message;
    EXPECT_EQ(view->joining_nnodes, 0);
    EXPECT_FALSE(view->zero);
}

TEST_F(ReadJob, AMalformedNodeZeroRecordIsOneLine) {
    m_store->set(JobKeys("job").status(0), "{\"run_id\": \"job\"}");
    auto view = read_job(*m_store, "job", "here", false);
    ASSERT_FALSE(view);
    EXPECT_EQ(view.error().exit_code, 1);
    EXPECT_THAT(view.error().message, HasSubstr("node 0's status record"));
    EXPECT_THAT(view.error().message, HasSubstr("node_rank"));
}

// A job with a secret: a reader without it, or with another, is refused (exit 2);
// with it, it reads.
TEST_F(ReadJob, AJobWithASecretRefusesAReaderWithoutIt) {
    auto raw = make_memory_store(1s);  // its clones share its data
    auto job = sign_store(raw->clone(), k_secret);
    put(*job, node(0, {}));
    for (const std::string& secret : {std::string(), std::string(32, 'x')}) {
        auto reader = sign_store(raw->clone(), secret);
        auto view = read_job(*reader, "job", "here", !secret.empty());
        ASSERT_FALSE(view);
        EXPECT_EQ(view.error().exit_code, 2);
        EXPECT_THAT(view.error().message, HasSubstr("give ddprun status the job's secret"));
        EXPECT_THAT(view.error().message,
                    HasSubstr(secret.empty() ? "it runs with a job secret, and this reader was "
                                               "given none"
                                             : "its records are not signed with the secret given"));
        EXPECT_EQ(view.error().message.find('\n'), std::string::npos);
    }
    EXPECT_TRUE(read_job(*sign_store(raw->clone(), k_secret), "job", "here", true));
}

}  // namespace
}  // namespace ddprun
