// LineSplitter decides where ddprun may put a prefix and what it may write
// whole, so its output must not depend on how the kernel happened to cut the
// pipe data into reads. These tests feed every input cut at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/line_splitter.hpp"

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

// ------------------------------------------------------- feed_prefixed

// What the console shows for a stream: feed() with a sink that writes the
// prefix before every segment that starts a line. feed_prefixed() must write
// exactly this, cut for cut, and leave the splitter in the same state.
struct PrefixingSink {
    std::string* out;
    std::string_view prefix;
    void operator()(const LineSplitter::Segment& s) const {
        if (s.starts_line) out->append(prefix);
        out->append(s.text);
    }
};

std::string view(const OutputBuffer& buffer) {
    return std::string(buffer.data(), buffer.size());
}

// Feeds the same chunks to a reference splitter (feed + PrefixingSink) and to
// feed_prefixed, checking output and state after every chunk; `between` runs
// after each chunk on both (flushes, broken lines).
template <typename Between>
void expect_same_as_feed(const std::vector<std::string_view>& chunks, std::string_view prefix,
                         Between&& between, const std::string& context) {
    LineSplitter reference;
    LineSplitter fast;
    std::string expected;
    OutputBuffer out;
    out.append("#");  // the mux's reserved first byte: output never starts at offset 0
    std::string got_before = "#";
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        reference.feed(chunks[i], PrefixingSink{&expected, prefix});
        fast.feed_prefixed(chunks[i], prefix, out);
        ASSERT_EQ(view(out), got_before + expected.substr(got_before.size() - 1))
            << context << ", after chunk " << i;
        ASSERT_EQ(fast.pending_size(), reference.pending_size()) << context << ", chunk " << i;
        ASSERT_EQ(fast.mid_line(), reference.mid_line()) << context << ", chunk " << i;
        between(reference, fast, expected, out);
        got_before = view(out);
    }
    reference.finish(PrefixingSink{&expected, prefix});
    std::string got = view(out).substr(1);
    std::string fast_rest;
    fast.finish(PrefixingSink{&fast_rest, prefix});
    EXPECT_EQ(got + fast_rest, expected) << context;
}

void expect_same_as_feed(const std::vector<std::string_view>& chunks, std::string_view prefix,
                         const std::string& context) {
    expect_same_as_feed(
        chunks, prefix, [](LineSplitter&, LineSplitter&, std::string&, OutputBuffer&) {}, context);
}

const std::vector<std::string>& prefixes() {
    static const std::vector<std::string> k_prefixes = {
        "",
        "[0]: ",
        std::string(15, 'p') + ":",       // 16 bytes: the largest single-store prefix
        std::string(16, 'p') + ":",       // 17 bytes: copied byte by byte
        "[trainer node 12 rank 1023]: ",  // a long template
        std::string(100, 'P'),
    };
    return k_prefixes;
}

TEST(LineSplitterPrefixed, EveryCaseCutAnywhereWritesWhatFeedWrites) {
    for (const auto& prefix : prefixes()) {
        for (const auto& c : cases()) {
            std::string_view in = c.input;
            for (std::size_t a = 0; a <= in.size(); ++a) {
                for (std::size_t b = a; b <= in.size(); ++b) {
                    expect_same_as_feed(
                        {in.substr(0, a), in.substr(a, b - a), in.substr(b)}, prefix,
                        "input " + ::testing::PrintToString(c.input) + " cuts " +
                            std::to_string(a) + "," + std::to_string(b) + " prefix " + prefix);
                }
            }
        }
    }
}

// Lines of every length around the 16- and 64-byte blocks, each starting at
// every offset within a block, in one chunk and cut into two at every
// position: the block loop's edges (a terminator as a block's first or last
// byte, two in one block, a line longer than two blocks, the last 128 bytes
// that go through the padded tail) all meet these.
TEST(LineSplitterPrefixed, LinesOfEveryLengthAtEveryOffset) {
    for (const auto& prefix : {std::string("[7]: "), std::string(40, 'q')}) {
        for (std::size_t length = 1; length <= 200; ++length) {
            for (std::size_t offset = 0; offset < 64; offset += (length < 20 ? 1 : 7)) {
                std::string input(offset, 'o');
                input += '\n';
                for (int line = 0; line < 3; ++line) {
                    input += std::string(length - 1, static_cast<char>('a' + line));
                    input += line == 1 ? '\r' : '\n';
                }
                input += "open";
                std::string context = "length " + std::to_string(length) + " offset " +
                                      std::to_string(offset) + " prefix " + prefix;
                expect_same_as_feed({input}, prefix, context);
                for (std::size_t cut = 0; cut <= input.size(); cut += 5) {
                    std::string_view in = input;
                    expect_same_as_feed({in.substr(0, cut), in.substr(cut)}, prefix,
                                        context + " cut " + std::to_string(cut));
                }
            }
        }
    }
}

// Random input, random reads, random partial flushes and broken lines, as
// the mux would see them, for both the dense (many terminators per block) and
// the sparse (lines of hundreds of bytes) kind of output.
TEST(LineSplitterPrefixed, RandomChunksFlushesAndBrokenLinesMatchFeed) {
    std::mt19937 rng(2024);
    for (int round = 0; round < 400; ++round) {
        bool dense = round % 2 == 0;
        std::string input;
        std::size_t size = rng() % 5000;
        while (input.size() < size) {
            std::size_t line = dense ? rng() % 8 : rng() % 400;
            for (std::size_t i = 0; i < line; ++i) input += static_cast<char>('a' + rng() % 26);
            auto t = rng() % 10;
            input += t == 0 ? '\r' : (t == 1 ? '\0' : '\n');  // NUL is no terminator
        }
        std::vector<std::string_view> chunks;
        for (std::size_t pos = 0; pos < input.size();) {
            std::size_t n = std::min<std::size_t>(1 + rng() % 700, input.size() - pos);
            chunks.push_back(std::string_view(input).substr(pos, n));
            pos += n;
        }
        const std::string& prefix = prefixes()[rng() % prefixes().size()];
        auto between = [&](LineSplitter& reference, LineSplitter& fast, std::string& expected,
                           OutputBuffer& out) {
            auto what = rng() % 6;
            if (what == 0) {  // the partial-line timer
                reference.flush_partial(PrefixingSink{&expected, prefix});
                std::string flushed;
                fast.flush_partial(PrefixingSink{&flushed, prefix});
                out.append(flushed);
            } else if (what == 1) {  // another stream ended the console line
                reference.line_broken();
                fast.line_broken();
            }
        };
        expect_same_as_feed(chunks, prefix, between, "round " + std::to_string(round));
    }
}

// The copy loops, called directly on every length up to a few blocks, and
// written after existing output of every alignment: the portable one is what
// non-x86 builds use, so it is held to the same result here.
TEST(LineSplitterPrefixed, CopyLoopsAgreeOnEveryLengthAndAlignment) {
    std::mt19937 rng(7);
    using Loop = const char* (*)(const char*, const char*, std::string_view, OutputBuffer&);
    std::vector<std::pair<std::string, Loop>> loops = {
        {"scalar", &detail::copy_prefixed_lines_scalar},
        {"dispatch", &detail::copy_prefixed_lines},
#if defined(__SSE2__)
        {"sse2", &detail::copy_prefixed_lines_sse2},
#endif
    };
    for (std::size_t length = 0; length <= 300; ++length) {
        std::string input;
        for (std::size_t i = 0; i < length; ++i) {
            auto r = rng() % 12;
            input += r == 0 ? '\n' : (r == 1 ? '\r' : static_cast<char>('a' + r));
        }
        for (const auto& prefix : prefixes()) {
            // Reference: every segment prefixed; the unterminated rest left.
            std::string expected;
            std::size_t rest = 0;
            for (std::size_t i = 0; i < input.size(); ++i) {
                if (input[i] == '\n' || input[i] == '\r') {
                    expected += prefix;
                    expected += input.substr(rest, i + 1 - rest);
                    rest = i + 1;
                }
            }
            for (const auto& [name, loop] : loops) {
                if (name == "sse2" && prefix.empty()) continue;  // dispatch handles ""
                std::size_t already = length % 67;
                OutputBuffer out;
                out.append(std::string(already, '#'));
                // Exactly sized, so that a sanitizer build catches a read past the end.
                auto exact = std::make_unique<char[]>(input.size());
                std::copy(input.begin(), input.end(), exact.get());
                const char* begin = exact.get();
                const char* left = loop(begin, begin + input.size(), prefix, out);
                std::string context = name + " length " + std::to_string(length) + " prefix " +
                                      ::testing::PrintToString(prefix);
                EXPECT_EQ(view(out), std::string(already, '#') + expected) << context;
                EXPECT_EQ(left - begin, static_cast<std::ptrdiff_t>(rest)) << context;
            }
        }
    }
}

// One read can hold thousands of segments: the output buffer grows while
// the loop runs (every byte a terminator, a long prefix) and keeps what was
// written before it grew.
TEST(LineSplitterPrefixed, OutputGrowsMidChunkWithoutLosingBytes) {
    std::string prefix(100, 'P');
    std::string input(100000, '\n');
    input[5000] = 'x';
    input += "tail";
    OutputBuffer out;
    out.append("start");
    LineSplitter splitter;
    splitter.feed_prefixed(input, prefix, out);
    std::string expected = "start";
    std::string reference;
    LineSplitter check;
    check.feed(input, PrefixingSink{&reference, prefix});
    expected += reference;
    ASSERT_EQ(out.size(), expected.size());
    EXPECT_TRUE(view(out) == expected);
    EXPECT_EQ(splitter.pending_size(), 4u);
}

// A line far longer than one read: held back whole, then written once with
// one prefix when its newline arrives, however the reads cut it.
TEST(LineSplitterPrefixed, VeryLongLineAcrossManyChunks) {
    std::string line(3 * 1024 * 1024 + 17, 'L');
    line += '\n';
    std::string input = "before\n" + line + "after\n";
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{65536}, std::size_t{131072}}) {
        std::vector<std::string_view> chunks;
        for (std::size_t pos = 0; pos < input.size(); pos += chunk) {
            chunks.push_back(std::string_view(input).substr(pos, chunk));
        }
        LineSplitter splitter;
        OutputBuffer out;
        for (auto c : chunks) splitter.feed_prefixed(c, "[0]: ", out);
        EXPECT_FALSE(splitter.has_partial());
        EXPECT_TRUE(view(out) == "[0]: before\n[0]: " + line + "[0]: after\n") << "chunk " << chunk;
    }
}

}  // namespace
}  // namespace ddprun
