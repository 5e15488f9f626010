// The c10d liveness strategies (cluster/liveness.hpp) over an in-memory store, with
// a short heartbeat timeout: a node that stops beating is lost once, the store's
// host is watched by the others, and a beating node is never lost. (The etcd
// strategy needs a real etcd: tests/integration/test_etcd.cpp.)
#include <gtest/gtest.h>

#include <thread>

#include "cluster/liveness.hpp"
#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = Liveness::Clock;

constexpr auto k_timeout = 100ms;

struct Node {
    Node(Store& shared, int rank)
        : store(shared.clone()),
          rendezvous(*store, "job"),
          liveness(make_liveness(LivenessSetup{.store = *store,
                                               .rendezvous = rendezvous,
                                               .member = nullptr,
                                               .node_rank = rank,
                                               .timeout = k_timeout},
                                 rank == 0)) {
        liveness->start_round(0, 2, Clock::now());
    }
    std::unique_ptr<Store> store;
    Rendezvous rendezvous;
    std::unique_ptr<Liveness> liveness;
};

// Beats `beating` nodes and observes `watcher` until it sees a loss, for at most
// `bound` (a hang guard well past the timeout).
std::optional<Liveness::Loss> watch(Node& watcher, const std::vector<Node*>& beating,
                                    Clock::duration bound) {
    const auto end = Clock::now() + bound;
    while (Clock::now() < end) {
        for (Node* node : beating) node->liveness->beat(Clock::now());
        watcher.liveness->beat(Clock::now());
        if (auto loss = watcher.liveness->observe(Clock::now())) return loss;
        std::this_thread::sleep_for(k_timeout / 5);
    }
    return std::nullopt;
}

TEST(Liveness, TheStoresHostPublishesANodeThatStoppedBeating) {
    auto store = make_memory_store(1s);
    Node zero(*store, 0);
    auto loss = watch(zero, {}, 10s);
    ASSERT_TRUE(loss);
    ASSERT_TRUE(loss->node);
    EXPECT_EQ(loss->node->node_rank, 1);
    EXPECT_EQ(loss->node->kind, FailureKind::NodeLost);
    EXPECT_EQ(loss->node->exit_code, exit_code::kRendezvous);
    EXPECT_NE(loss->node->message.find("node 1 stopped answering (no heartbeat for 100 ms"),
              std::string::npos)
        << loss->node->message;
}

TEST(Liveness, AnotherNodeLosesTheStoresHostItself) {
    auto store = make_memory_store(1s);
    Node one(*store, 1);
    auto loss = watch(one, {}, 10s);
    ASSERT_TRUE(loss);
    EXPECT_FALSE(loss->node);
    EXPECT_EQ(loss->message,
              "the store's host (node 0) stopped answering (no heartbeat for 100 ms)");
}

TEST(Liveness, NodesThatBeatAreNeverLost) {
    auto store = make_memory_store(1s);
    Node zero(*store, 0);
    Node one(*store, 1);
    EXPECT_FALSE(watch(zero, {&one}, 5 * k_timeout));
    EXPECT_FALSE(watch(one, {&zero}, 5 * k_timeout));
}

TEST(Liveness, AC10dStoreErrorGivesTheStoreUp) {
    auto store = make_memory_store(1s);
    Node one(*store, 1);
    const StoreError lost(StoreError::Kind::Connection, "connection reset");
    EXPECT_EQ(one.liveness->after(lost, false, true, false), Liveness::AfterError::GiveUp);
    EXPECT_EQ(one.liveness->lost_store(lost), "lost the rendezvous store: connection reset");
}

}  // namespace
}  // namespace ddprun
