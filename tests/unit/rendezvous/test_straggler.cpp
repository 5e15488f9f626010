// StragglerWatch (straggler.hpp): node 0's rules, fed made-up rates and times.
#include <gtest/gtest.h>

#include "ddprun/rendezvous/straggler.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = StragglerWatch::Clock;
using Rate = StragglerWatch::Rate;

const Clock::time_point t0{};

// Four ranks on two nodes at 10 steps/s, rank 3 at `slow`.
std::vector<Rate> rates(double slow) {
    return {{0, 0, 10}, {1, 0, 10}, {2, 1, 10}, {3, 1, slow}};
}

TEST(MedianRate, OfTheKnownRatesOnly) {
    EXPECT_EQ(median_rate({}), -1);
    EXPECT_EQ(median_rate({5}), -1);
    EXPECT_EQ(median_rate({5, -1}), -1);
    EXPECT_EQ(median_rate({1, 3}), 2);
    EXPECT_EQ(median_rate({9, 1, 3}), 3);
    EXPECT_EQ(median_rate({9, 1, 3, -1, 4}), 3.5);
}

TEST(StragglerWatch, NamesARankBelowTheFractionForTheWholeWindow) {
    StragglerWatch watch({0.5, 10s});
    EXPECT_TRUE(watch.observe(rates(1), t0, 1000).empty());
    EXPECT_TRUE(watch.observe(rates(1), t0 + 9s, 1000).empty());
    auto named = watch.observe(rates(1), t0 + 10s, 2000);
    ASSERT_EQ(named.size(), 1u);
    EXPECT_EQ(named[0], (Straggler{3, 1, 1, 10, 2000, false, 1}));
    // Named once: later looks only update its figures.
    EXPECT_TRUE(watch.observe(rates(2), t0 + 20s, 3000).empty());
    ASSERT_EQ(watch.current().size(), 1u);
    EXPECT_EQ(watch.current()[0].rate, 2);
    EXPECT_EQ(watch.news().size(), 1u);
}

TEST(StragglerWatch, ABriefDipIsNotAStraggler) {
    StragglerWatch watch({0.5, 10s});
    watch.observe(rates(1), t0, 0);
    watch.observe(rates(8), t0 + 5s, 0);  // back above: the window starts again
    EXPECT_TRUE(watch.observe(rates(1), t0 + 10s, 0).empty());
    EXPECT_TRUE(watch.observe(rates(1), t0 + 19s, 0).empty());
    EXPECT_EQ(watch.observe(rates(1), t0 + 20s, 0).size(), 1u);
}

TEST(StragglerWatch, ARecoveredRankIsNamedAgainAsRecovered) {
    StragglerWatch watch({0.5, 10s});
    watch.observe(rates(1), t0, 0);
    ASSERT_EQ(watch.observe(rates(1), t0 + 10s, 100).size(), 1u);
    auto named = watch.observe(rates(6), t0 + 15s, 200);
    ASSERT_EQ(named.size(), 1u);
    EXPECT_EQ(named[0], (Straggler{3, 1, 6, 10, 200, true, 2}));
    EXPECT_TRUE(watch.current().empty());
    EXPECT_EQ(watch.news().size(), 2u);
    // And again, should it fall behind again for a window.
    watch.observe(rates(1), t0 + 16s, 0);
    ASSERT_EQ(watch.observe(rates(1), t0 + 26s, 300).size(), 1u);
    EXPECT_EQ(watch.news().back().seq, 3);
}

TEST(StragglerWatch, JudgesNothingWithoutAMedian) {
    StragglerWatch watch({0.5, 1s});
    // One known rate: nothing to compare with.
    watch.observe({{0, 0, 10}, {1, 0, -1}}, t0, 0);
    EXPECT_TRUE(watch.observe({{0, 0, 10}, {1, 0, -1}}, t0 + 5s, 0).empty());
    // Nobody steps (a hang: the hang monitor's business).
    watch.observe({{0, 0, 0}, {1, 0, 0}}, t0, 0);
    EXPECT_TRUE(watch.observe({{0, 0, 0}, {1, 0, 0}}, t0 + 5s, 0).empty());
}

TEST(StragglerWatch, FractionZeroIsOff) {
    StragglerWatch watch({0, 1s});
    watch.observe(rates(0.1), t0, 0);
    EXPECT_TRUE(watch.observe(rates(0.1), t0 + 5s, 0).empty());
}

TEST(StragglerWatch, KeepsTheLastNamingsOnly) {
    StragglerWatch watch({0.5, 0s});
    for (int i = 0; i < 100; ++i) watch.observe(rates(i % 2 ? 10 : 1), t0 + i * 1s, 0);
    EXPECT_EQ(watch.news().size(), k_max_straggler_news);
    EXPECT_EQ(watch.news().back().seq, 100);
}

TEST(StragglerWatch, Describes) {
    EXPECT_EQ(describe_straggler({5, 1, 0.94, 10, 0, false, 1}, 60s),
              "rank 5 (node 1) is a straggler: 0.9 steps/s against a median of 10.0 for 1 min "
              "(--straggler-window)");
    EXPECT_EQ(describe_straggler({5, 1, 9.8, 10, 0, true, 2}, 60s),
              "rank 5 (node 1) is no longer a straggler: 9.8 steps/s against a median of 10.0");
}

}  // namespace
}  // namespace ddprun
