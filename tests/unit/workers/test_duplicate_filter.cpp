// DuplicateFilter: the lines --duplicate-*-filters copies, as torchrun's tailer picks
// them (a line, read with its '\n', that contains a filter). Chunks split lines anywhere
// (a pipe read ends where it ends), so every case is also fed byte by byte and split at
// every point, and random streams are checked against a plain line-by-line reading.
#include "ddprun/workers/duplicate_filter.hpp"

#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

namespace ddprun {
namespace {

using Needles = DuplicateFilter::Needles;

std::string filtered(const Needles& needles, const std::vector<std::string>& chunks,
                     std::size_t max_line_bytes = 1024 * 1024) {
    DuplicateFilter filter(std::make_shared<const Needles>(needles), max_line_bytes);
    std::string out;
    for (const auto& chunk : chunks) filter.feed(chunk, "[7]: ", out);
    filter.finish("[7]: ", out);
    return out;
}

std::vector<std::string> bytes(const std::string& text) {
    std::vector<std::string> chunks;
    for (char c : text) chunks.emplace_back(1, c);
    return chunks;
}

// torchrun's reading, line by line: what the filter must give however it is fed.
std::string reference(const Needles& needles, const std::string& text) {
    std::string out;
    for (std::size_t start = 0; start < text.size();) {
        std::size_t nl = text.find('\n', start);
        std::string line = text.substr(start, nl == std::string::npos ? nl : nl + 1 - start);
        for (const auto& needle : needles)
            if (line.find(needle) != std::string::npos) {
                out += "[7]: " + line + (line.back() == '\n' ? "" : "\n");
                break;
            }
        start += line.size();
    }
    return out;
}

TEST(DuplicateFilter, CopiesTheLinesThatHoldAFilter) {
    struct Case {
        Needles needles;
        std::string text;
        std::string copied;
    };
    const Case cases[] = {
        {{"apple"}, "", ""},
        {{"apple"}, "pear\nplum\n", ""},
        {{"apple"}, "an apple\npear\napple pie\n", "[7]: an apple\n[7]: apple pie\n"},
        {{"apple", "orange"},
         "orange\nkiwi\napple\napple and orange\n",
         "[7]: orange\n[7]: apple\n[7]: apple and orange\n"},
        // Each matching line once, in the stream's order, whichever filter comes first.
        {{"b", "a"}, "ab\nba\nc\n", "[7]: ab\n[7]: ba\n"},
        {{"apple"}, "apple\n\n\napple\n", "[7]: apple\n[7]: apple\n"},
        // A plain substring: no regex, no word boundaries, case counts.
        {{"a.c"}, "abc\na.c\n", "[7]: a.c\n"},
        {{"pp"}, "apple\nApple\n", "[7]: apple\n[7]: Apple\n"},
        {{"Apple"}, "apple\n", ""},
        // The last line without newline is matched and given one.
        {{"boom"}, "ok\nboom at the end", "[7]: boom at the end\n"},
        {{"boom"}, "ok\nno end", ""},
        // The line is matched with its '\n', as torchrun's readline() gives it.
        {{"done\n"}, "done\nnot done yet\nall done\n", "[7]: done\n[7]: all done\n"},
        {{"done\n"}, "done", ""},
        {{"a\nb"}, "a\nb\n", ""},
        // An empty filter is in every line, as in Python.
        {{""}, "x\n\ny", "[7]: x\n[7]: \n[7]: y\n"},
        // '\r' does not end a line: the line goes whole, as the worker wrote it.
        {{"50%"}, "10%\r50%\r100%\n", "[7]: 10%\r50%\r100%\n"},
        {{"ok"}, "ok\r\n", "[7]: ok\r\n"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.needles) + " " + ::testing::PrintToString(c.text));
        EXPECT_EQ(filtered(c.needles, {c.text}), c.copied);
        EXPECT_EQ(filtered(c.needles, bytes(c.text)), c.copied);
        for (std::size_t cut = 0; cut <= c.text.size(); ++cut)
            EXPECT_EQ(filtered(c.needles, {c.text.substr(0, cut), c.text.substr(cut)}), c.copied)
                << "cut at " << cut;
        EXPECT_EQ(reference(c.needles, c.text), c.copied) << "the reference agrees";
    }
}

TEST(DuplicateFilter, NothingWithoutAMatchAndNothingHeldAfterFinish) {
    DuplicateFilter filter(std::make_shared<const Needles>(Needles{"apple"}));
    std::string out;
    filter.feed("app", "[0]: ", out);
    filter.feed("le", "[0]: ", out);
    EXPECT_EQ(out, "") << "a line is copied once it is whole";
    filter.feed(" pie\npear", "[0]: ", out);
    EXPECT_EQ(out, "[0]: apple pie\n");
    filter.finish("[0]: ", out);
    filter.finish("[0]: ", out);
    EXPECT_EQ(out, "[0]: apple pie\n");
    filter.feed("apple\n", "[0]: ", out);
    EXPECT_EQ(out, "[0]: apple pie\n[0]: apple\n") << "a stream reused after finish()";
}

// A line still unfinished past the bound: matched on what came so far, then copied to
// its end or skipped, whatever comes later in it.
TEST(DuplicateFilter, ALongLineIsMatchedOnItsStart) {
    const std::string long_match = "boom" + std::string(100, 'x') + "\n";
    const std::string long_other = std::string(100, 'x') + "boom\n";
    EXPECT_EQ(filtered({"boom"}, bytes(long_match + long_other + "boom\n"), 16),
              "[7]: " + long_match + "[7]: boom\n");
    EXPECT_EQ(filtered({"boom"}, bytes("boom" + std::string(100, 'x')), 16),
              "[7]: boom" + std::string(100, 'x') + "\n")
        << "the stream ended mid-line";
    EXPECT_EQ(filtered({"boom"}, bytes(long_other)), "[7]: " + long_other) << "within the bound";
    EXPECT_EQ(filtered({"boom"}, {long_other}, 16), "[7]: " + long_other)
        << "a line that one read carries whole is never unfinished";
}

TEST(DuplicateFilter, RandomStreamsMatchALineByLineReading) {
    std::mt19937 random(42);
    const std::string alphabet = "ab\n\rc";
    const std::vector<Needles> needle_sets = {{"ab"}, {"a", "bc"}, {"b\n", "ca"}, {"abc", "cab"}};
    for (int round = 0; round < 300; ++round) {
        std::string text;
        const std::size_t size = random() % 200;
        for (std::size_t i = 0; i < size; ++i) text += alphabet[random() % alphabet.size()];
        std::vector<std::string> chunks;
        for (std::size_t at = 0; at < text.size();) {
            const std::size_t take = 1 + random() % 20;
            chunks.push_back(text.substr(at, take));
            at += take;
        }
        for (const auto& needles : needle_sets) {
            SCOPED_TRACE(::testing::PrintToString(text));
            EXPECT_EQ(filtered(needles, chunks), reference(needles, text));
        }
    }
}

TEST(DuplicateFilterPattern, FindsTheFilterLiterallyInALine) {
    struct Case {
        std::string needle;
        std::optional<std::string> pattern;
        std::vector<std::string> found, not_found;  // lines without terminator
    };
    const Case cases[] = {
        {"boom", "boom", {"boom", "a boom here"}, {"Boom", "bo om"}},
        {"a.c", "a\\.c", {"a.c"}, {"abc"}},
        {"^$\\.*+?()[]{}|",
         "\\^\\$\\\\\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|",
         {"x^$\\.*+?()[]{}|y"},
         {"", "^$"}},
        {"/-,:", "/-,:", {"a/-,:b"}, {"/-"}},
        {"done\n", "done$", {"done", "all done"}, {"done yet"}},
        {"", "", {"", "anything"}, {}},
        {"a\nb", std::nullopt, {}, {}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.needle));
        const auto pattern = duplicate_filter_pattern(c.needle);
        ASSERT_EQ(pattern, c.pattern);
        if (!pattern) continue;
        const std::regex regex(*pattern, std::regex::ECMAScript);
        for (const auto& line : c.found) EXPECT_TRUE(std::regex_search(line, regex)) << line;
        for (const auto& line : c.not_found) EXPECT_FALSE(std::regex_search(line, regex)) << line;
    }
}

}  // namespace
}  // namespace ddprun
