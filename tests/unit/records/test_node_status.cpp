// NodeStatus's wire format (node_status.hpp): what every agent writes for
// `ddprun status` and node 0's straggler watch, read back as untrusted text.
#include <gtest/gtest.h>

#include "ddprun/records/node_status.hpp"

namespace ddprun {
namespace {

NodeStatus node_zero() {
    NodeStatus s;
    s.node_rank = 0;
    s.round = 2;
    s.restarts = 1;
    s.state = "running";
    s.host = "gpu01";
    s.addr = "10.0.0.1";
    s.pid = 4242;
    s.first_rank = 0;
    s.nproc = 2;
    s.workers_alive = 2;
    s.time_ms = 1796560628019;
    s.ranks = {{0, 120, 40, 10.125}, {1, 0, -1, -1}};
    s.nnodes = 2;
    s.world_size = 4;
    s.max_restarts = 3;
    s.exit_code = -1;
    s.stragglers = {{3, 1, 0.5, 10, 1796560600000, false, 1}};
    s.straggler_news = {{3, 1, 0.5, 10, 1796560600000, false, 1}};
    return s;
}

TEST(NodeStatusRecord, RoundTripsWithNodeZerosFields) {
    NodeStatus s = node_zero();
    auto back = parse_node_status(to_json(s, "job"), "job");
    ASSERT_TRUE(back) << back.error();
    s.ranks[0].rate = 10.125;  // three decimals survive
    EXPECT_EQ(*back, s);
}

TEST(NodeStatusRecord, AnotherNodesRecordHasNoJobFields) {
    NodeStatus s = node_zero();
    s.node_rank = 1;
    s.nnodes = 0;
    s.stragglers.clear();
    s.straggler_news.clear();
    const std::string text = to_json(s, "job");
    EXPECT_EQ(text.find("stragglers"), std::string::npos) << text;
    auto back = parse_node_status(text, "job");
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->nnodes, 0);
    EXPECT_EQ(back->exit_code, -1);
}

TEST(NodeStatusRecord, RatesKeepThreeDecimals) {
    NodeStatus s = node_zero();
    s.ranks = {{0, 1, 0, 1.0 / 3}};
    auto back = parse_node_status(to_json(s, "job"), "job");
    ASSERT_TRUE(back) << back.error();
    EXPECT_DOUBLE_EQ(back->ranks[0].rate, 0.333);
}

// Whatever is under the key may be another run's, a stray writer's or garbage: one
// line saying what is wrong, never a crash.
TEST(NodeStatusRecord, MalformedRecordsAreOneLineErrors) {
    const std::string good = to_json(node_zero(), "job");
    struct Case {
        std::string text;
        std::string says;
    };
    const Case cases[] = {
        {"", "empty"},
        {"not json", ""},
        {"[]", "object"},
        {R"({"node_rank": 0})", "run_id"},
        {to_json(node_zero(), "other"), "'other'"},
        {R"({"run_id":"job","node_rank":"zero"})", "node_rank"},
        {R"({"run_id":"job","node_rank":-1})", "node_rank"},
        {R"({"run_id":"job","node_rank":0,"round":0,"restarts":0,"state":"x","host":"h",)"
         R"("addr":"","pid":1,"first_rank":0,"nproc":1,"workers_alive":0,"time_ms":1,)"
         R"("ranks":[{"rank":0,"beats":1,"silent_ms":0,"rate":"fast"}]})",
         "rate"},
        {R"({"run_id":"job","node_rank":0,"round":0,"restarts":0,"state":"x","host":"h",)"
         R"("addr":"","pid":1,"first_rank":0,"nproc":1,"workers_alive":0,"time_ms":1,)"
         R"("ranks":[{"rank":0,"beats":1,"silent_ms":0,"rate":-5}]})",
         "rate"},
        {R"({"run_id":"job","node_rank":0,"round":0,"restarts":0,"state":"x","host":"h",)"
         R"("addr":"","pid":1,"first_rank":0,"nproc":1,"workers_alive":0,"time_ms":1,)"
         R"("ranks":7})",
         "ranks"},
        {R"({"run_id":"job","node_rank":0,"round":0,"restarts":0,"state":"x","host":"h",)"
         R"("addr":"","pid":1,"first_rank":0,"nproc":1,"workers_alive":0,"time_ms":1,)"
         R"("nnodes":2,"world_size":2,"max_restarts":0,"exit_code":300,"stop":""})",
         "exit_code"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.text);
        auto parsed = parse_node_status(c.text, "job");
        ASSERT_FALSE(parsed);
        EXPECT_EQ(parsed.error().find('\n'), std::string::npos);
        EXPECT_NE(parsed.error().find(c.says), std::string::npos) << parsed.error();
    }
}

TEST(NodeStatusRecord, ControlCharactersInTextBecomeSpaces) {
    NodeStatus s = node_zero();
    s.host = "gpu\n01";
    auto back = parse_node_status(to_json(s, "job"), "job");
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->host, "gpu 01");
}

}  // namespace
}  // namespace ddprun
