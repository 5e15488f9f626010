// The status protocol (status_publisher.hpp) over an in-memory store: two nodes'
// publishers, node 0 naming a straggler from node 1's rates and node 1 learning it
// once; and the counted store the agent's /metrics reads (store_counts.hpp).
#include <gtest/gtest.h>

#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/rendezvous/status_publisher.hpp"
#include "ddprun/store/signed_store.hpp"
#include "ddprun/store/store_counts.hpp"
#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = StragglerWatch::Clock;

NodeStatus record(int node, double slow_rate, int round = 0) {
    NodeStatus s;
    s.node_rank = node;
    s.round = round;
    s.state = "running";
    s.host = node == 0 ? "gpu01" : "gpu02";
    s.first_rank = 2 * node;
    s.nproc = 2;
    s.ranks = {{2 * node, 10, 0, 10}, {2 * node + 1, 10, 0, node == 1 ? slow_rate : 10}};
    s.time_ms = 1000;
    if (node == 0) s.nnodes = 2;
    return s;
}

TEST(StatusPublisher, NodeZeroNamesAStragglerAndEveryNodeLearnsItOnce) {
    auto store = make_memory_store(1s);
    StatusPublisher zero("job", StragglerLimits{0.5, 10s});
    StatusPublisher one("job", StragglerLimits{0.5, 10s});
    const Clock::time_point t0{};
    // Node 1 first, so that node 0 reads its rates.
    EXPECT_TRUE(one.tick(*store, record(1, 1), t0).empty());
    EXPECT_TRUE(zero.tick(*store, record(0, 1), t0).empty());
    EXPECT_TRUE(one.tick(*store, record(1, 1), t0 + 10s).empty());
    auto named = zero.tick(*store, record(0, 1), t0 + 10s);
    ASSERT_EQ(named.size(), 1u);
    EXPECT_EQ(named[0].rank, 3);
    EXPECT_EQ(named[0].node_rank, 1);
    EXPECT_FALSE(named[0].recovered);
    auto learnt = one.tick(*store, record(1, 1), t0 + 11s);
    ASSERT_EQ(learnt.size(), 1u);
    EXPECT_EQ(learnt[0], named[0]);
    EXPECT_TRUE(one.tick(*store, record(1, 1), t0 + 12s).empty()) << "once";
    // Node 0's record carries it for `ddprun status`.
    auto zero_record = read_node_status(*store, JobKeys("job").status(0), "job");
    ASSERT_TRUE(zero_record);
    ASSERT_EQ(zero_record->stragglers.size(), 1u);
    // Recovered: named again, as recovered, on both.
    one.tick(*store, record(1, 10), t0 + 13s);
    auto recovered = zero.tick(*store, record(0, 10), t0 + 13s);
    ASSERT_EQ(recovered.size(), 1u);
    EXPECT_TRUE(recovered[0].recovered);
    auto learnt_again = one.tick(*store, record(1, 10), t0 + 14s);
    ASSERT_EQ(learnt_again.size(), 1u);
    EXPECT_TRUE(learnt_again[0].recovered);
}

TEST(StatusPublisher, AnotherRoundsOrAnUnsignedRecordIsLeftOut) {
    const std::string secret(32, 's');
    auto raw = make_memory_store(1s);
    auto store = sign_store(raw->clone(), secret);
    StatusPublisher zero("job", StragglerLimits{0.5, 0s});
    // Node 1's record of another round, then one nobody signed: neither is read.
    store->set(JobKeys("job").status(1), to_json(record(1, 1, 5), "job"));
    EXPECT_TRUE(zero.tick(*store, record(0, 1), Clock::time_point{}).empty());
    raw->set(JobKeys("job").status(1), to_json(record(1, 1), "job"));
    EXPECT_TRUE(zero.tick(*store, record(0, 1), Clock::time_point{} + 1s).empty());
    store->set(JobKeys("job").status(1), to_json(record(1, 1), "job"));
    EXPECT_EQ(zero.tick(*store, record(0, 1), Clock::time_point{} + 2s).size(), 1u);
}

TEST(StatusPublisher, WithoutStragglersOneWriteAndNothingElse) {
    auto counts = std::make_shared<StoreCounts>();
    auto store = count_store(make_memory_store(1s), counts);
    StatusPublisher one("job", std::nullopt);
    EXPECT_TRUE(one.tick(*store, record(1, 1), Clock::time_point{}).empty());
    EXPECT_EQ(counts->requests, 1);
    StatusPublisher zero("job", std::nullopt);
    zero.tick(*store, record(0, 1), Clock::time_point{});
    EXPECT_EQ(counts->requests, 2) << "node 0 reads nobody when it watches nothing";
    // Watching: node 0 reads node 1's record (a check and a get), node 1 node 0's.
    StatusPublisher watching_zero("job", StragglerLimits{});
    watching_zero.tick(*store, record(0, 1), Clock::time_point{});
    EXPECT_EQ(counts->requests, 5);
    StatusPublisher watching_one("job", StragglerLimits{});
    watching_one.tick(*store, record(1, 1), Clock::time_point{});
    EXPECT_EQ(counts->requests, 8);
}

TEST(StoreCounts, CallsAndFailuresOfEveryClone) {
    auto counts = std::make_shared<StoreCounts>();
    auto store = count_store(make_memory_store(50ms), counts);
    auto clone = store->clone();
    store->set("a", "1");
    EXPECT_EQ(clone->get("a"), "1");
    EXPECT_TRUE(clone->check({"a"}));
    EXPECT_EQ(counts->requests, 3);
    EXPECT_EQ(counts->errors, 0);
    // A wait that times out is a wait's normal end; a get that does is a failure.
    EXPECT_THROW(store->wait({"b"}, 10ms), StoreError);
    EXPECT_EQ(counts->errors, 0);
    EXPECT_THROW(store->get("b"), StoreError);
    store->set("n", "not a number");
    EXPECT_THROW(clone->add("n", 1), StoreError);
    EXPECT_EQ(counts->requests, 7);
    EXPECT_EQ(counts->errors, 2);
}

}  // namespace
}  // namespace ddprun
