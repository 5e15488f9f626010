// LineSplitter decides where ddprun may put a prefix and what it may write
// whole, so its output must not depend on how the kernel happened to cut the
// pipe data into reads. These tests feed every input cut at every position.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ddprun/line_splitter.hpp"

namespace ddprun {
namespace {

struct Seg {
    std::string text;
    bool starts_line;
    bool complete;
    bool operator==(const Seg&) const = default;
};

void PrintTo(const Seg& seg, std::ostream* os) {
    *os << "{\"";
    for (char c : seg.text) {
        if (c == '\n') {
            *os << "\\n";
        } else if (c == '\r') {
            *os << "\\r";
        } else {
            *os << c;
        }
    }
    *os << "\", " << (seg.starts_line ? "starts" : "cont") << ", "
        << (seg.complete ? "complete" : "partial") << "}";
}

struct Recorder {
    std::vector<Seg>* out;
    void operator()(const LineSplitter::Segment& s) const {
        out->push_back({std::string(s.text), s.starts_line, s.complete});
    }
};

// Feeds `chunks` in order, then finish().
std::vector<Seg> split(const std::vector<std::string>& chunks) {
    std::vector<Seg> segs;
    LineSplitter splitter;
    for (const auto& chunk : chunks) splitter.feed(chunk, Recorder{&segs});
    splitter.finish(Recorder{&segs});
    return segs;
}

struct Case {
    std::string input;
    std::vector<Seg> expected;  // after feeding the whole input and finish()
};

const std::vector<Case>& cases() {
    static const std::vector<Case> k_cases = {
        {"", {}},
        {"a", {{"a", true, false}}},
        {"\n", {{"\n", true, true}}},
        {"\r", {{"\r", true, true}}},
        {"abc\n", {{"abc\n", true, true}}},
        {"abc\ndef", {{"abc\n", true, true}, {"def", true, false}}},
        {"a\nb\nc\n", {{"a\n", true, true}, {"b\n", true, true}, {"c\n", true, true}}},
        {"\n\n", {{"\n", true, true}, {"\n", true, true}}},
        {"10%\r50%\r100%\n",
         {{"10%\r", true, true}, {"50%\r", true, true}, {"100%\n", true, true}}},
        {"crlf\r\n", {{"crlf\r", true, true}, {"\n", true, true}}},
        {"\n\rx", {{"\n", true, true}, {"\r", true, true}, {"x", true, false}}},
        {"tab\there\n", {{"tab\there\n", true, true}}},
        {std::string("nul\0byte\n", 9), {{std::string("nul\0byte\n", 9), true, true}}},
        {"long line without any terminator at all",
         {{"long line without any terminator at all", true, false}}},
    };
    return k_cases;
}

TEST(LineSplitter, WholeInputGivesExpectedSegments) {
    for (const auto& c : cases()) {
        EXPECT_EQ(split({c.input}), c.expected) << "input: " << ::testing::PrintToString(c.input);
    }
}

TEST(LineSplitter, OneCutAtEveryPositionGivesSameSegments) {
    for (const auto& c : cases()) {
        for (std::size_t cut = 0; cut <= c.input.size(); ++cut) {
            EXPECT_EQ(split({c.input.substr(0, cut), c.input.substr(cut)}), c.expected)
                << "input: " << ::testing::PrintToString(c.input) << " cut at " << cut;
        }
    }
}

TEST(LineSplitter, TwoCutsAtEveryPairOfPositionsGiveSameSegments) {
    for (const auto& c : cases()) {
        for (std::size_t a = 0; a <= c.input.size(); ++a) {
            for (std::size_t b = a; b <= c.input.size(); ++b) {
                EXPECT_EQ(
                    split({c.input.substr(0, a), c.input.substr(a, b - a), c.input.substr(b)}),
                    c.expected)
                    << "input: " << ::testing::PrintToString(c.input) << " cuts " << a << "," << b;
            }
        }
    }
}

TEST(LineSplitter, ByteByByteGivesSameSegments) {
    for (const auto& c : cases()) {
        std::vector<std::string> bytes;
        for (char ch : c.input) bytes.emplace_back(1, ch);
        EXPECT_EQ(split(bytes), c.expected) << "input: " << ::testing::PrintToString(c.input);
    }
}

TEST(LineSplitter, PendingBytesWaitForTerminator) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.feed("abc", Recorder{&segs});
    EXPECT_TRUE(segs.empty());
    EXPECT_TRUE(splitter.has_partial());
    EXPECT_EQ(splitter.pending_size(), 3u);
    splitter.feed("def\nx", Recorder{&segs});
    EXPECT_EQ(segs, (std::vector<Seg>{{"abcdef\n", true, true}}));
    EXPECT_EQ(splitter.pending_size(), 1u);
}

TEST(LineSplitter, FlushedPartialIsContinuedWithoutPrefix) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.feed("Loading", Recorder{&segs});
    splitter.flush_partial(Recorder{&segs});
    EXPECT_TRUE(splitter.mid_line());
    EXPECT_FALSE(splitter.has_partial());
    splitter.feed("...", Recorder{&segs});
    splitter.flush_partial(Recorder{&segs});
    splitter.feed(" done\nnext\n", Recorder{&segs});
    EXPECT_FALSE(splitter.mid_line());
    EXPECT_EQ(segs, (std::vector<Seg>{{"Loading", true, false},
                                      {"...", false, false},
                                      {" done\n", false, true},
                                      {"next\n", true, true}}));
}

TEST(LineSplitter, FlushWithNothingPendingEmitsNothing) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.flush_partial(Recorder{&segs});
    splitter.feed("a\n", Recorder{&segs});
    splitter.flush_partial(Recorder{&segs});
    splitter.finish(Recorder{&segs});
    EXPECT_EQ(segs, (std::vector<Seg>{{"a\n", true, true}}));
    EXPECT_FALSE(splitter.mid_line());
}

TEST(LineSplitter, CarriageReturnAfterFlushedPartialEndsThatLine) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.feed("50%", Recorder{&segs});
    splitter.flush_partial(Recorder{&segs});
    splitter.feed("\r60%\r", Recorder{&segs});
    EXPECT_EQ(segs,
              (std::vector<Seg>{{"50%", true, false}, {"\r", false, true}, {"60%\r", true, true}}));
}

TEST(LineSplitter, BrokenLineGetsPrefixOnContinuation) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.feed("abc", Recorder{&segs});
    splitter.flush_partial(Recorder{&segs});
    splitter.line_broken();  // another stream ended the console line
    EXPECT_FALSE(splitter.mid_line());
    splitter.feed("def\n", Recorder{&segs});
    EXPECT_EQ(segs, (std::vector<Seg>{{"abc", true, false}, {"def\n", true, true}}));
}

TEST(LineSplitter, FinishEmitsPendingAsPartialLine) {
    LineSplitter splitter;
    std::vector<Seg> segs;
    splitter.feed("a\nlast", Recorder{&segs});
    splitter.finish(Recorder{&segs});
    EXPECT_EQ(segs, (std::vector<Seg>{{"a\n", true, true}, {"last", true, false}}));
    EXPECT_TRUE(splitter.mid_line());  // the mux ends the console line itself
}

// Random inputs, random cuts and random partial flushes: the segments always
// add up to the input, every line's first segment (and only it) starts a line,
// and only the last segment of a line is complete.
TEST(LineSplitter, RandomChunkingAndFlushesKeepEveryByteInOrder) {
    std::mt19937 rng(12345);
    const std::string alphabet = "ab\n\r";
    for (int round = 0; round < 500; ++round) {
        std::string input;
        std::size_t size = rng() % 200;
        for (std::size_t i = 0; i < size; ++i) input += alphabet[rng() % alphabet.size()];

        LineSplitter splitter;
        std::vector<Seg> segs;
        std::size_t pos = 0;
        while (pos < input.size()) {
            std::size_t n = std::min<std::size_t>(1 + rng() % 20, input.size() - pos);
            splitter.feed(std::string_view(input).substr(pos, n), Recorder{&segs});
            pos += n;
            if (rng() % 3 == 0) splitter.flush_partial(Recorder{&segs});
        }
        splitter.finish(Recorder{&segs});

        std::string joined;
        bool at_line_start = true;
        for (const auto& seg : segs) {
            ASSERT_FALSE(seg.text.empty());
            EXPECT_EQ(seg.starts_line, at_line_start) << "round " << round;
            char last = seg.text.back();
            bool terminated = last == '\n' || last == '\r';
            EXPECT_EQ(seg.complete, terminated) << "round " << round;
            EXPECT_EQ(seg.text.find_first_of("\n\r"),
                      terminated ? seg.text.size() - 1 : std::string::npos)
                << "a terminator inside a segment, round " << round;
            at_line_start = seg.complete;
            joined += seg.text;
        }
        EXPECT_EQ(joined, input) << "round " << round;
    }
}

}  // namespace
}  // namespace ddprun
