// StderrTail: the lines of a worker's stderr the failure report quotes.
// Chunks split lines anywhere (a pipe read ends where it ends), so every case
// is also fed byte by byte and must come out the same.
#include "ddprun/workers/stderr_tail.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

using Lines = std::vector<std::string>;

Lines tail_of(const std::vector<std::string>& chunks, std::size_t lines,
              std::size_t max_line_bytes = 64 * 1024) {
    StderrTail tail(lines, max_line_bytes);
    for (const auto& chunk : chunks) tail.feed(chunk);
    return tail.lines();
}

Lines tail_bytewise(const std::vector<std::string>& chunks, std::size_t lines,
                    std::size_t max_line_bytes = 64 * 1024) {
    StderrTail tail(lines, max_line_bytes);
    for (const auto& chunk : chunks)
        for (char c : chunk) tail.feed(std::string_view(&c, 1));
    return tail.lines();
}

TEST(StderrTail, KeepsTheLastLines) {
    struct Case {
        std::vector<std::string> chunks;
        Lines tail;
    };
    const Case cases[] = {
        {{}, {}},
        {{""}, {}},
        {{"only\n"}, {"only"}},
        {{"1\n2\n3\n4\n5\n"}, {"3", "4", "5"}},
        {{"1\n2\n3\n4\npartial"}, {"3", "4", "partial"}},
        {{"\n\n\n"}, {"", "", ""}},
        {{"x", "y", "z\n"}, {"xyz"}},
        {{"a\nb\nc\nd", "e\nf"}, {"c", "de", "f"}},
        {{"1\n2\n3\n4\n5\n6\n7", "8\n"}, {"5", "6", "78"}},
        {{"skipped partial", "\n1\n2\n3\n4\n"}, {"2", "3", "4"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.chunks));
        EXPECT_EQ(tail_of(c.chunks, 3), c.tail);
        EXPECT_EQ(tail_bytewise(c.chunks, 3), c.tail);
    }
}

// What a terminal showed: "\r\n" ends a line like "\n"; any other '\r' starts
// the line over (a progress bar redrawing itself).
TEST(StderrTail, CarriageReturns) {
    struct Case {
        std::vector<std::string> chunks;
        Lines tail;
    };
    const Case cases[] = {
        {{"crlf 1\r\ncrlf 2\r\n"}, {"crlf 1", "crlf 2"}},
        {{"start\nbar 10%\rbar 50%\rbar 100%\ndone\n"}, {"start", "bar 100%", "done"}},
        {{"x\nbar 10%\rbar 20%"}, {"x", "bar 20%"}},
        {{"p 10%\r", "p 20%\r", "\n"}, {"p 20%"}},
        {{"abc\r", "\nnext"}, {"abc", "next"}},  // "\r\n" split between reads
        {{"abc\r", "def\n"}, {"def"}},
        {{"abc\r"}, {"abc"}},  // maybe the first half of a "\r\n"
        {{"\r\r\n"}, {""}},
        {{"a\rb\rc\r\n"}, {"c"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.chunks));
        EXPECT_EQ(tail_of(c.chunks, 3), c.tail);
        EXPECT_EQ(tail_bytewise(c.chunks, 3), c.tail);
    }
}

TEST(StderrTail, ManyLinesInOneChunkKeepOnlyTheLast) {
    std::string many;
    for (int i = 0; i < 100000; ++i) many += "line " + std::to_string(i) + "\n";
    EXPECT_EQ(tail_of({many}, 3), (Lines{"line 99997", "line 99998", "line 99999"}));
    EXPECT_EQ(tail_of({many, "partial"}, 2), (Lines{"line 99999", "partial"}));
}

TEST(StderrTail, LongLinesAreCut) {
    struct Case {
        std::vector<std::string> chunks;
        Lines tail;
    };
    const Case cases[] = {
        {{"abcdefgh\n", "12", "34", "56\n"}, {"abcd", "1234"}},
        {{"abcdefgh"}, {"abcd"}},
        // A '\r' past the cut still starts the line over.
        {{"abcdefgh\rxy\n"}, {"xy"}},
        {{"abcdefgh\r", "xy"}, {"xy"}},
        {{"abcdefgh\r\n"}, {"abcd"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.chunks));
        EXPECT_EQ(tail_of(c.chunks, 5, 4), c.tail);
        EXPECT_EQ(tail_bytewise(c.chunks, 5, 4), c.tail);
    }
}

TEST(StderrTail, NoLinesKeepsNothing) {
    EXPECT_EQ(tail_of({"a\nb\n", "c"}, 0), Lines{});
}

TEST(StderrTail, OneLine) {
    EXPECT_EQ(tail_of({"a\nb\n"}, 1), Lines{"b"});
    EXPECT_EQ(tail_of({"a\nb\nc"}, 1), Lines{"c"});
    EXPECT_EQ(tail_of({"a\n", "b"}, 1), Lines{"b"});
}

// --report-lines: every line is looked at, however many arrive in one chunk or
// however a line is split; the last 10 matches are kept with the total.
std::shared_ptr<const LineMatcher::Patterns> patterns(std::initializer_list<const char*> texts) {
    auto out = std::make_shared<LineMatcher::Patterns>();
    for (const char* text : texts) out->emplace_back(text, std::regex::ECMAScript);
    return out;
}

TEST(LineMatcher, AMatchThousandsOfLinesUpIsKept) {
    LineMatcher matcher(patterns({"NCCL WARN", "CUDA error"}));
    std::string flood;
    for (int i = 0; i < 2000; ++i) flood += "step " + std::to_string(i) + "\n";
    matcher.feed("start\nrank 3 NC");
    matcher.feed("CL WARN Net : Connection closed by peer\r\n" + flood);
    matcher.feed("RuntimeError: CUDA error: an illegal memory access");  // no newline: it died
    const auto found = matcher.matches();
    EXPECT_EQ(found.total, 2u);
    EXPECT_EQ(found.lines, (Lines{"rank 3 NCCL WARN Net : Connection closed by peer",
                                  "RuntimeError: CUDA error: an illegal memory access"}));
}

TEST(LineMatcher, OnlyTheLastTenAreKeptAndEveryOneCounted) {
    LineMatcher matcher(patterns({"^W"}));
    for (int i = 0; i < 25; ++i) matcher.feed("W" + std::to_string(i) + "\nother\n");
    const auto found = matcher.matches();
    EXPECT_EQ(found.total, 25u);
    ASSERT_EQ(found.lines.size(), 10u);
    EXPECT_EQ(found.lines.front(), "W15");
    EXPECT_EQ(found.lines.back(), "W24");
}

TEST(LineMatcher, AHugeLineIsMatchedOnItsStartAndCut) {
    LineMatcher matcher(patterns({"WARN"}), 10, 8);
    matcher.feed("WARN" + std::string(1 << 20, 'x') + "\n");
    matcher.feed(std::string(1 << 20, 'y') + "WARN\n");  // past what is looked at
    const auto found = matcher.matches();
    EXPECT_EQ(found.total, 1u);
    EXPECT_EQ(found.lines, (Lines{"WARNxxxx"}));
}

}  // namespace
}  // namespace ddprun
