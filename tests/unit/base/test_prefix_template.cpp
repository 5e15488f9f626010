// The log prefix template: what each placeholder expands to, and that the
// command line's check names the bad placeholder or brace.
#include "ddprun/base/prefix_template.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

TEST(PrefixTemplate, ExpandsPlaceholders) {
    StreamSource source;
    source.rank = 12;
    source.local_rank = 4;
    source.node_rank = 1;
    source.role = "trainer";
    source.round = 3;
    source.host = "gpu07";
    struct Case {
        std::string tmpl;
        std::string expected;
    };
    const std::vector<Case> cases = {
        {"", ""},
        {"[{rank}]: ", "[12]: "},
        {"{node_rank}/{local_rank} {role}|", "1/4 trainer|"},
        {"{rank}{rank}", "1212"},
        {"[r{round} {rank}]: ", "[r3 12]: "},
        {"[{host}:{local_rank}]: ", "[gpu07:4]: "},
        {"{{host}}", "{host}"},
        {"{{rank}}", "{rank}"},
        {"}}{{", "}{"},
        {"{{{rank}}}", "{12}"},
        {"{nope} ", "{nope} "},  // unknown: left as written
        {"{rank", "{rank"},
        {"a}b", "a}b"},
        {"{}", "{}"},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(expand_prefix(c.tmpl, source), c.expected) << "template: " << c.tmpl;
    }
}

TEST(PrefixTemplate, ValidationNamesTheProblem) {
    struct Case {
        std::string tmpl;
        std::string error_contains;  // empty: valid
    };
    const std::vector<Case> cases = {
        {"", ""},
        {"[{rank}]: ", ""},
        {"{role}-{node_rank}-{local_rank}: ", ""},
        {"{round}: ", ""},
        {"{host} {rank}: ", ""},
        {"{hostname}", "unknown placeholder {hostname}"},
        {"{{literal}} ", ""},
        {"[{rnk}]: ", "unknown placeholder {rnk}"},
        {"[{rnk}]: ", "known: {rank}, {local_rank}, {node_rank}, {role}, {round}, {host}"},
        {"{}", "unknown placeholder {}"},
        {"[{rank]: ", "unmatched '{' at character 2"},
        {"[rank}]: ", "unmatched '}' at character 6"},
        {"{ra{nk}", "unmatched '{' at character 1"},
        {"{rank}}", "unmatched '}' at character 7"},
    };
    for (const auto& c : cases) {
        auto valid = validate_prefix_template(c.tmpl);
        if (c.error_contains.empty()) {
            EXPECT_TRUE(valid) << "template: " << c.tmpl << " error: " << valid.error().message;
        } else {
            ASSERT_FALSE(valid) << "template: " << c.tmpl;
            EXPECT_EQ(valid.error().exit_code, exit_code::kUsage);
            EXPECT_NE(valid.error().message.find(c.error_contains), std::string::npos)
                << "template: " << c.tmpl << " error: " << valid.error().message;
        }
    }
}

TEST(PrefixTemplate, AGroupOfRanksIsShownAsRuns) {
    EXPECT_EQ(rank_runs({7, 0, 1, 2, 3, 5, 3}), "0-3,5,7");
    EXPECT_EQ(rank_runs({4}), "4");
    EXPECT_EQ(rank_runs({}), "");
    StreamSource source;
    source.rank = 8;
    source.local_rank = 0;
    source.node_rank = 1;
    source.host = "gpu02";
    EXPECT_EQ(expand_group_prefix("[{rank}]: ", source, "8-15", "0-7"), "[8-15]: ");
    EXPECT_EQ(expand_group_prefix("{host}/{node_rank}/{local_rank}> ", source, "8-15", "0-7"),
              "gpu02/1/0-7> ");
}

}  // namespace
}  // namespace ddprun
