// duration_text (duration_text.hpp): the one way a duration reaches a user, its
// unit picked by size. Its edges, where the unit or the rounding changes, are
// pinned down here once.
#include "ddprun/base/duration_text.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace ddprun {
namespace {

using namespace std::chrono_literals;

struct DurationCase {
    std::chrono::milliseconds duration;
    std::string text;
};

TEST(DurationText, PicksItsUnitBySize) {
    const DurationCase cases[] = {
        {0ms, "0 s"},
        {1ms, "1 ms"},
        {850ms, "850 ms"},
        {999ms, "999 ms"},
        {1000ms, "1 s"},
        {1049ms, "1 s"},  // to the tenth: 1.049 is 1.0, written without the ".0"
        {1050ms, "1.1 s"},
        {1500ms, "1.5 s"},
        {9999ms, "10 s"},
        {15000ms, "15 s"},
        {30100ms, "30.1 s"},
        {59949ms, "59.9 s"},
        {59950ms, "1 min"},  // 60.0 s is a minute
        {60000ms, "1 min"},
        {60499ms, "1 min"},  // from a minute on, whole seconds
        {60500ms, "1 min 1 s"},
        {90000ms, "1 min 30 s"},
        {150000ms, "2 min 30 s"},
        {600000ms, "10 min"},
        {3599000ms, "59 min 59 s"},
        {3600000ms, "1 h"},
        {3661000ms, "1 h 1 min 1 s"},
        {7205000ms, "2 h 5 s"},
        {90000000ms, "25 h"},
        {-1500ms, "-1.5 s"},
    };
    for (const auto& c : cases) EXPECT_EQ(duration_text(c.duration), c.text) << c.duration.count();
}

TEST(DurationText, TakesAnyDurationToTheNearestMillisecond) {
    EXPECT_EQ(duration_text(600s), "10 min");
    EXPECT_EQ(duration_text(2min + 30s), "2 min 30 s");
    EXPECT_EQ(duration_text(std::chrono::duration<double>(0.5)), "500 ms");
    EXPECT_EQ(duration_text(std::chrono::duration<double>(2.0)), "2 s");
    EXPECT_EQ(duration_text(std::chrono::duration<double>(0.0004)), "0 s");
    EXPECT_EQ(duration_text(1'500'000ns), "2 ms");
    EXPECT_EQ(duration_text(1'499'999ns), "1 ms");
}

}  // namespace
}  // namespace ddprun
