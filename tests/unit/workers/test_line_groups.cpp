// LineGroups: which held lines --collapse-lines shows once, in which order, and
// which go out when. Each case is a script of (stream, line, arrival ms) and
// the output of take() at given times.
#include "ddprun/workers/line_groups.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = LineGroups::Clock;

const Clock::time_point k_t0{};

// Streams 0-7 are grouped (bit 1 << n) and shown alone as "[n]: "; stream 8 is
// never grouped (bit 0), shown as "[x]: ".
struct Script {
    LineGroups groups;

    void hold(std::size_t stream, const std::string& line, int ms) {
        const std::uint64_t bit = stream == 8 ? 0 : std::uint64_t{1} << stream;
        auto prefix = std::make_shared<const std::string>(
            stream == 8 ? "[x]: " : "[" + std::to_string(stream) + "]: ");
        groups.hold(bit, prefix, line, k_t0 + std::chrono::milliseconds(ms));
    }
    // What take() writes for the groups begun at or before `ms` (-1: all).
    std::string take(int ms = -1) {
        OutputBuffer out;
        const auto until = ms < 0 ? Clock::time_point::max() : k_t0 + std::chrono::milliseconds(ms);
        groups.take(
            until,
            [this](std::uint64_t bits) -> const std::string& {
                shown = "[";
                for (std::size_t n = 0; n < 8; ++n)
                    if ((bits >> n & 1) != 0)
                        shown += (shown.size() > 1 ? "," : "") + std::to_string(n);
                shown += "]: ";
                return shown;
            },
            out);
        return std::string(out.data(), out.size());
    }
    std::string shown;
};

TEST(LineGroups, LinesPrintedAlikeAreOneGroupInArrivalOrder) {
    Script s;
    s.hold(0, "a", 0);
    s.hold(1, "a", 1);
    s.hold(2, "b", 2);
    s.hold(1, "b", 3);
    s.hold(0, "c", 4);
    EXPECT_EQ(s.take(), "[0,1]: a\n[1,2]: b\n[0]: c\n");
    EXPECT_TRUE(s.groups.empty());
    EXPECT_EQ(s.groups.bytes(), 0u);
}

TEST(LineGroups, AStreamsLinesKeepTheirOrder) {
    Script s;
    s.hold(0, "x", 0);
    s.hold(1, "y", 1);
    s.hold(1, "x", 2);  // after its "y": it cannot join stream 0's "x" ahead of it
    s.hold(0, "x", 3);  // its second "x": not the group it is in
    EXPECT_EQ(s.take(), "[0]: x\n[1]: y\n[0,1]: x\n");
}

TEST(LineGroups, ALineJoinsTheEarliestGroupItFits) {
    Script s;
    s.hold(0, "tick", 0);
    s.hold(0, "tick", 1);
    s.hold(0, "tick", 2);
    s.hold(1, "tick", 3);
    s.hold(1, "tick", 4);
    EXPECT_EQ(s.take(), "[0,1]: tick\n[0,1]: tick\n[0]: tick\n");
}

TEST(LineGroups, TakeShowsTheGroupsBegunByThenAndLaterLinesStillMeet) {
    Script s;
    s.hold(0, "epoch 0", 0);
    s.hold(1, "epoch 0", 3);
    s.hold(0, "epoch 1", 50);
    s.hold(1, "epoch 1", 52);
    s.hold(0, "epoch 3", 150);
    EXPECT_EQ(s.take(149), "[0,1]: epoch 0\n[0,1]: epoch 1\n");
    EXPECT_EQ(s.groups.oldest(), k_t0 + 150ms);
    // The group begun at 150 ms still takes its other member, whenever the
    // groups before it went out.
    s.hold(1, "epoch 3", 151);
    EXPECT_EQ(s.take(300), "[0,1]: epoch 3\n");
    EXPECT_EQ(s.take(), "");
}

TEST(LineGroups, AGroupShownIsNotJoined) {
    Script s;
    s.hold(0, "same", 0);
    EXPECT_EQ(s.take(0), "[0]: same\n");
    s.hold(1, "same", 10);
    s.hold(0, "same", 11);
    EXPECT_EQ(s.take(), "[0,1]: same\n");
}

TEST(LineGroups, AStreamThatIsNeverGroupedStaysAlone) {
    Script s;
    s.hold(8, "hello", 0);
    s.hold(0, "hello", 1);
    s.hold(8, "hello", 2);
    s.hold(1, "hello", 3);
    EXPECT_EQ(s.take(), "[x]: hello\n[0,1]: hello\n[x]: hello\n");
    // Its lines take no place in a grouped stream's order.
    s.hold(1, "a", 10);
    s.hold(8, "z", 11);
    s.hold(0, "a", 12);
    EXPECT_EQ(s.take(), "[0,1]: a\n[x]: z\n");
}

TEST(LineGroups, BytesCountEveryLineHeld) {
    Script s;
    s.hold(0, "abc", 0);
    s.hold(1, "abc", 0);
    s.hold(2, "de", 100);
    EXPECT_EQ(s.groups.bytes(), 4u + 4u + 3u);
    EXPECT_EQ(s.take(0), "[0,1]: abc\n");
    EXPECT_EQ(s.groups.bytes(), 3u);
    s.take();
    EXPECT_EQ(s.groups.bytes(), 0u);
}

TEST(LineGroups, WhatStaysHeldKeepsEveryStreamsOrder) {
    Script s;
    s.hold(0, "a", 0);
    s.hold(0, "b", 100);
    s.hold(1, "a", 120);  // joins the group begun at 0 ms, which goes out
    s.hold(1, "b", 130);
    EXPECT_EQ(s.take(50), "[0,1]: a\n");
    s.hold(2, "b", 140);
    EXPECT_EQ(s.take(), "[0,1,2]: b\n");
}

}  // namespace
}  // namespace ddprun
