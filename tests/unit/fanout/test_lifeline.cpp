// The lifeline's protocol (lifeline.hpp): which lines are signals, how a bad
// one is shown in its warning, and how the bytes of the link become lines,
// however they are cut, with a bound on what one line may hold.
#include "ddprun/fanout/lifeline.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

using Kind = LifelineMessage::Kind;

TEST(LifelineLine, SignalLinesAndBadOnes) {
    struct Case {
        std::string line;
        int signal;  // 0: a bad line
    };
    const std::vector<Case> cases = {
        {"signal 2", 2},
        {"signal 15", 15},
        {"signal 10", 10},
        {"signal 1", 1},
        {"signal 64", 64},
        {"signal 2\r", 2},  // a CRLF sender
        {"signal 0", 0},
        {"signal 65", 0},
        {"signal 99", 0},
        {"signal 100", 0},
        {"signal -2", 0},
        {"signal +2", 0},
        {"signal  2", 0},
        {"signal 2 ", 0},
        {" signal 2", 0},
        {"signal", 0},
        {"signal ", 0},
        {"signal SIGINT", 0},
        {"signal 0x2", 0},
        {"Signal 2", 0},
        {"signal2", 0},
        {"", 0},
        {"secret 0123abcd", 0},  // reserved for a later version: a bad line today
        {std::string("signal 2\0", 9), 0},
    };
    for (const auto& c : cases) {
        auto message = parse_lifeline_line(c.line);
        if (c.signal == 0) {
            EXPECT_EQ(message.kind, Kind::Bad) << "line: " << c.line;
            EXPECT_FALSE(message.shown.empty()) << "line: " << c.line;
        } else {
            EXPECT_EQ(message.kind, Kind::Signal) << "line: " << c.line;
            EXPECT_EQ(message.signal, c.signal) << "line: " << c.line;
        }
    }
}

TEST(LifelineLine, ABadLineIsQuotedEscapedAndShortened) {
    EXPECT_EQ(parse_lifeline_line("hello").shown, "'hello'");
    EXPECT_EQ(parse_lifeline_line("").shown, "''");
    EXPECT_EQ(parse_lifeline_line("a\tb\x1b[31m").shown, "'a\\x09b\\x1b[31m'");
    auto long_line = parse_lifeline_line(std::string(200, 'x'));
    EXPECT_EQ(long_line.shown, "'" + std::string(80, 'x') + "...' (200 bytes)");
}

std::vector<std::string> describe(const std::vector<LifelineMessage>& messages) {
    std::vector<std::string> out;
    for (const auto& m : messages)
        out.push_back(m.kind == Kind::Signal ? "signal " + std::to_string(m.signal)
                                             : "bad " + m.shown);
    return out;
}

TEST(LifelineReader, CutsLinesHoweverTheBytesArrive) {
    const std::string stream = "signal 2\nhello\n\nsignal 10\r\nsignal 15\npartial";
    const std::vector<std::string> expected = {"signal 2", "bad 'hello'", "bad ''", "signal 10",
                                               "signal 15"};
    // Whole, then in every chunk size: the partial last line is never a message.
    for (std::size_t chunk = 1; chunk <= stream.size(); ++chunk) {
        LifelineReader reader;
        std::vector<std::string> got;
        for (std::size_t at = 0; at < stream.size(); at += chunk) {
            auto messages = describe(reader.feed(std::string_view(stream).substr(at, chunk)));
            got.insert(got.end(), messages.begin(), messages.end());
        }
        EXPECT_EQ(got, expected) << "chunk size " << chunk;
    }
}

TEST(LifelineReader, ALineOverTheBoundIsOneBadLineAndTheNextOneCounts) {
    for (std::size_t chunk :
         {std::size_t{1}, std::size_t{1000}, std::size_t{4096}, std::size_t{1} << 20}) {
        LifelineReader reader;
        const std::string huge = "signal 2" + std::string(3 * k_lifeline_max_line, '7');
        const std::string stream = huge + "\nsignal 15\n";
        std::vector<LifelineMessage> got;
        for (std::size_t at = 0; at < stream.size(); at += chunk) {
            auto messages = reader.feed(std::string_view(stream).substr(at, chunk));
            got.insert(got.end(), messages.begin(), messages.end());
        }
        ASSERT_EQ(got.size(), 2u) << "chunk size " << chunk;
        EXPECT_EQ(got[0].kind, Kind::Bad);
        EXPECT_EQ(got[0].shown,
                  "'signal 2" + std::string(72, '7') + fmt::format("...' ({} bytes)", huge.size()))
            << "chunk size " << chunk;
        EXPECT_EQ(got[1].kind, Kind::Signal);
        EXPECT_EQ(got[1].signal, 15);
    }
    // At the bound exactly, a line is still read.
    LifelineReader reader;
    auto at_bound = reader.feed(std::string(k_lifeline_max_line, 'y') + "\n");
    ASSERT_EQ(at_bound.size(), 1u);
    EXPECT_EQ(at_bound[0].shown, "'" + std::string(80, 'y') + "...' (4096 bytes)");
}

}  // namespace
}  // namespace ddprun
