// The round's signals and kill (round_signals.hpp) over an in-memory store: who
// hears what, once, and what a stray writer without the job's secret cannot do.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <csignal>

#include "ddprun/rendezvous/round_signals.hpp"
#include "ddprun/store/signed_store.hpp"
#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = RoundSignals::Clock;

const JobKeys k_keys("job");

TEST(RoundSignals, TheOthersHearASignalOnceAndTheSenderSkipsItsOwn) {
    auto store = make_memory_store(1s);
    RoundSignals sender(k_keys, 0, 15s);
    RoundSignals other(k_keys, 1, 15s);
    RoundSignals::publish_signal(*store, k_keys, 2, SIGUSR1, 0);
    const Clock::time_point t0{};
    EXPECT_EQ(other.tick(*store, 2, t0, true, true).signals, std::vector<int>{SIGUSR1});
    EXPECT_TRUE(other.tick(*store, 2, t0, true, true).signals.empty()) << "once";
    EXPECT_TRUE(sender.tick(*store, 2, t0, true, true).signals.empty()) << "its own";
    RoundSignals::publish_signal(*store, k_keys, 2, SIGUSR2, 1);
    EXPECT_EQ(sender.tick(*store, 2, t0, true, true).signals, std::vector<int>{SIGUSR2});
}

TEST(RoundSignals, AKillIsHeardOncePerRoundAndOnlyByThoseWhoListen) {
    auto store = make_memory_store(1s);
    RoundSignals agent(k_keys, 1, 15s);
    const Clock::time_point t0{};
    EXPECT_FALSE(agent.tick(*store, 0, t0, true, true).kill);
    RoundSignals::publish_kill(*store, k_keys, 0);
    EXPECT_FALSE(agent.tick(*store, 0, t0, false, true).kill) << "not listening";
    EXPECT_TRUE(agent.tick(*store, 0, t0, true, true).kill);
    EXPECT_FALSE(agent.tick(*store, 0, t0, true, true).kill) << "once";
    EXPECT_FALSE(agent.tick(*store, 1, t0, true, true).kill) << "round 1 was not killed";
}

TEST(RoundSignals, ACountWithoutItsRecordHoldsTheNextBackForTheGapBoundOnly) {
    auto store = make_memory_store(1s);
    RoundSignals agent(k_keys, 1, 10s);
    store->add(k_keys.round(0, "signals"), 1);  // counted, never written
    RoundSignals::publish_signal(*store, k_keys, 0, SIGTERM, 0);
    const auto t0 = Clock::now();
    EXPECT_TRUE(agent.tick(*store, 0, t0, true, true).signals.empty());
    EXPECT_TRUE(agent.tick(*store, 0, t0 + 9s, true, true).signals.empty());
    EXPECT_EQ(agent.tick(*store, 0, t0 + 10s, true, true).signals, std::vector<int>{SIGTERM});
}

TEST(RoundSignals, RecordsWithoutTheJobSecretAreNeverActedOn) {
    const std::string secret(32, 's');
    auto raw = make_memory_store(1s);
    auto store = sign_store(raw->clone(), secret);
    RoundSignals agent(k_keys, 1, 15s);
    const Clock::time_point t0{};
    raw->set(k_keys.round(0, "kill"), "1");
    raw->add(k_keys.round(0, "signals"), 1);
    raw->set(k_keys.round(0, "signal/1"), fmt::format("{} 0", SIGKILL));
    auto heard = agent.tick(*store, 0, t0, true, true);
    EXPECT_FALSE(heard.kill);
    EXPECT_TRUE(heard.signals.empty());
    // A genuine record replaces a forged one and is heard.
    RoundSignals::publish_kill(*store, k_keys, 0);
    RoundSignals::publish_signal(*store, k_keys, 0, SIGUSR1, 0);
    heard = agent.tick(*store, 0, t0, true, true);
    EXPECT_TRUE(heard.kill);
    EXPECT_EQ(heard.signals, std::vector<int>{SIGUSR1});
}

TEST(RoundSignals, NonsenseRecordsAreSkipped) {
    auto store = make_memory_store(1s);
    RoundSignals agent(k_keys, 1, 15s);
    for (const char* text : {"nonsense", "0 0", "65 0", "-1 0"}) {
        const auto n = store->add(k_keys.round(0, "signals"), 1);
        store->set(k_keys.round(0, fmt::format("signal/{}", n)), text);
    }
    RoundSignals::publish_signal(*store, k_keys, 0, SIGINT, 0);
    EXPECT_EQ(agent.tick(*store, 0, Clock::time_point{}, true, true).signals,
              std::vector<int>{SIGINT});
}

}  // namespace
}  // namespace ddprun
