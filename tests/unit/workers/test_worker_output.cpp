// Where a worker's output goes: torchrun's rules for --redirects, --tee,
// --local_ranks_filter and --duplicate-*-filters, and the failure report's patterns.
#include "ddprun/workers/worker_output.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace ddprun {
namespace {

TEST(WorkerSinks, FollowRedirectsTeeAndTheRanksFilter) {
    struct Case {
        const char* what;
        StreamSelection redirects, tee;
        std::optional<std::set<int>> shown;
        bool log_dir;
        // local rank 1's stdout, then its stderr
        bool out_console, out_duplicate, err_console, err_duplicate;
    };
    const Case cases[] = {
        {"plain", {}, {}, {}, false, true, false, true, false},
        {"tee 3", {}, {kBoth, {}}, {}, true, true, true, true, true},
        {"tee 1", {}, {kStdout, {}}, {}, true, true, true, true, false},
        {"tee 2", {}, {kStderr, {}}, {}, true, true, false, true, true},
        {"tee 0:3 leaves rank 1 out",
         {},
         {kNone, {{0, kBoth}}},
         {},
         true,
         true,
         false,
         true,
         false},
        {"tee 1:2", {}, {kNone, {{1, kStderr}}}, {}, true, true, false, true, true},
        {"redirect 3", {kBoth, {}}, {}, {}, true, false, false, false, false},
        // torchrun's tee tails the file whatever the redirects say.
        {"redirect 1, tee 1", {kStdout, {}}, {kStdout, {}}, {}, true, true, true, true, false},
        {"redirect 3, tee 2", {kBoth, {}}, {kStderr, {}}, {}, true, false, false, true, true},
        {"hidden by --local_ranks_filter",
         {},
         {kBoth, {}},
         std::set<int>{0},
         true,
         false,
         false,
         false,
         false},
        {"shown by --local_ranks_filter",
         {},
         {kBoth, {}},
         std::set<int>{1},
         true,
         true,
         true,
         true,
         true},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        LaunchContext ctx;
        ctx.config.redirects = c.redirects;
        ctx.config.tee = c.tee;
        ctx.config.local_ranks_filter = c.shown;
        if (c.log_dir) ctx.log_dir = "/logs";
        const WorkerSinks sinks = worker_sinks(ctx, 1, "/logs/j/attempt_0/1");
        EXPECT_EQ(sinks.out.console, c.out_console);
        EXPECT_EQ(sinks.out.duplicate, c.out_duplicate);
        EXPECT_EQ(sinks.err.console, c.err_console);
        EXPECT_EQ(sinks.err.duplicate, c.err_duplicate);
        EXPECT_EQ(sinks.out.file_path, c.log_dir ? "/logs/j/attempt_0/1/stdout.log" : "");
        EXPECT_EQ(sinks.err.file_path, c.log_dir ? "/logs/j/attempt_0/1/stderr.log" : "");
    }
}

TEST(ReportPatterns, ReportLinesAndStderrFiltersEachFindTheirLines) {
    LaunchConfig config;
    EXPECT_EQ(report_patterns(config), nullptr);
    config.duplicate_stdout_filters = {"apple"};
    EXPECT_EQ(report_patterns(config), nullptr) << "stdout's filters are not the summary's";
    config.report_lines = {"NCCL (WARN|INFO)"};
    config.duplicate_stderr_filters = {"loss (nan)", "a\nb", "done\n"};
    const auto patterns = report_patterns(config);
    ASSERT_NE(patterns, nullptr);
    EXPECT_EQ(patterns->size(), 3u) << "a filter no line can hold adds nothing";
    auto found = [&](const std::string& line) {
        for (const auto& pattern : *patterns)
            if (std::regex_search(line, pattern)) return true;
        return false;
    };
    EXPECT_TRUE(found("NCCL WARN x"));
    EXPECT_TRUE(found("step 3: loss (nan)"));
    EXPECT_FALSE(found("step 3: loss nan")) << "a filter is plain text";
    EXPECT_TRUE(found("all done"));
    EXPECT_FALSE(found("done yet"));
    EXPECT_FALSE(found("a"));
}

}  // namespace
}  // namespace ddprun
