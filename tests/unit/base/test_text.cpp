// The text helpers every parser of outside input goes through (text.hpp):
// one trim, one integer parser, one yes/no parser. Their edges are the
// parsers' edges, so they are pinned down here once.
#include "ddprun/base/text.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace ddprun {
namespace {

TEST(Text, TrimRemovesBlanksAtBothEnds) {
    EXPECT_EQ(trim("  a b \t\r\n"), "a b");
    EXPECT_EQ(trim("\v\fx"), "x");
    EXPECT_EQ(trim(""), "");
    EXPECT_EQ(trim(" \t\n "), "");
    EXPECT_EQ(trim_right("  a b \r\n"), "  a b");
    EXPECT_EQ(trim_right(" \t"), "");
}

struct IntegerCase {
    std::string text;
    std::optional<long long> integer;  // to_integer's answer
    std::optional<long long> flag;     // to_flag_integer's answer
};

TEST(Text, Integers) {
    const IntegerCase cases[] = {
        {"0", 0, 0},
        {"42", 42, 42},
        {" 42\n", 42, 42},
        {"-7", -7, -7},
        {"007", 7, 7},
        {"9223372036854775807", 9223372036854775807LL, 9223372036854775807LL},
        {"-9223372036854775808", -9223372036854775807LL - 1, -9223372036854775807LL - 1},
        // Too large for 64 bits: not a number rather than a wrapped one.
        {"9223372036854775808", std::nullopt, std::nullopt},
        {"99999999999999999999999", std::nullopt, std::nullopt},
        // A '+' only where a user typed the number (Python's int() takes it).
        {"+8", std::nullopt, 8},
        {" +8 ", std::nullopt, 8},
        {"+-8", std::nullopt, std::nullopt},
        {"++8", std::nullopt, std::nullopt},
        {"+ 8", std::nullopt, std::nullopt},
        {"+", std::nullopt, std::nullopt},
        // Anything else around or inside the digits.
        {"", std::nullopt, std::nullopt},
        {"  ", std::nullopt, std::nullopt},
        {"-", std::nullopt, std::nullopt},
        {"- 8", std::nullopt, std::nullopt},
        {"8x", std::nullopt, std::nullopt},
        {"x8", std::nullopt, std::nullopt},
        {"1 2", std::nullopt, std::nullopt},
        {"1.0", std::nullopt, std::nullopt},
        {"1e3", std::nullopt, std::nullopt},
        {"0x10", std::nullopt, std::nullopt},
        {std::string("1\0", 2), std::nullopt, std::nullopt},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("'" + c.text + "'");
        EXPECT_EQ(to_integer(c.text), c.integer);
        EXPECT_EQ(to_flag_integer(c.text), c.flag);
    }
}

TEST(Text, IntegersInAnotherBase) {
    EXPECT_EQ(to_integer("3b", 16), 0x3b);
    EXPECT_EQ(to_integer("FF", 16), 0xff);
    EXPECT_EQ(to_integer("0x3b", 16), std::nullopt);
    EXPECT_EQ(to_integer("3g", 16), std::nullopt);
}

TEST(Text, YesAndNo) {
    for (const char* yes : {"1", "true", "yes", "on", "TRUE", "Yes", " on\n"}) {
        SCOPED_TRACE(yes);
        EXPECT_EQ(to_bool(yes), true);
    }
    for (const char* no : {"0", "false", "no", "off", "FALSE", "No", "\toff "}) {
        SCOPED_TRACE(no);
        EXPECT_EQ(to_bool(no), false);
    }
    for (const char* neither :
         {"", " ", "2", "-1", "+1", "y", "n", "t", "f", "yes!", "o n", "truee", "enable", "01"}) {
        SCOPED_TRACE(neither);
        EXPECT_EQ(to_bool(neither), std::nullopt);
    }
}

TEST(Text, IdRanges) {
    std::vector<std::pair<long long, long long>> seen;
    auto collect = [&seen](long long first, long long last) {
        seen.emplace_back(first, last);
        return true;
    };
    EXPECT_TRUE(for_each_id_range("0,2-5, 7", collect));
    EXPECT_EQ(seen, (std::vector<std::pair<long long, long long>>{{0, 0}, {2, 5}, {7, 7}}));
    for (const char* bad : {"", "5-2", "-1", "1-", "a", "1,,2", "1-2-3", "+1"}) {
        SCOPED_TRACE(bad);
        EXPECT_FALSE(for_each_id_range(bad, [](long long, long long) { return true; }));
    }
    EXPECT_FALSE(for_each_id_range("1,2", [](long long first, long long) { return first < 2; }));
}

TEST(Text, JsonNesting) {
    EXPECT_TRUE(json_nesting_within(R"({"a": [1, {"b": 2}]})", 3));
    EXPECT_FALSE(json_nesting_within(R"({"a": [1, {"b": 2}]})", 2));
    EXPECT_TRUE(json_nesting_within(R"({"a": "[[[[[[\"[["})", 1)) << "brackets inside strings";
    EXPECT_FALSE(json_nesting_within(std::string(1000, '['), 64));
}

}  // namespace
}  // namespace ddprun
