// Where a round's worker output goes (see worker_output.hpp).
#include "ddprun/workers/worker_output.hpp"

#include <regex>

#include "ddprun/workers/duplicate_filter.hpp"

namespace ddprun {

WorkerSinks worker_sinks(const LaunchContext& ctx, int local_rank, const std::string& worker_dir) {
    const LaunchConfig& config = ctx.config;
    const bool shown =
        !config.local_ranks_filter || config.local_ranks_filter->contains(local_rank);
    // As torchrun: a tee'd stream is tailed to the console whatever the redirects say, and
    // only what it tails (less the ranks --local_ranks_filter hides) goes through
    // --duplicate-*-filters.
    const unsigned redirected = config.redirects.for_rank(local_rank);
    const unsigned teed = shown ? config.tee.for_rank(local_rank) : kNone;
    WorkerSinks sinks;
    sinks.out.console = shown && (!(redirected & kStdout) || (teed & kStdout));
    sinks.err.console = shown && (!(redirected & kStderr) || (teed & kStderr));
    sinks.out.duplicate = (teed & kStdout) != 0;
    sinks.err.duplicate = (teed & kStderr) != 0;
    if (!ctx.log_dir.empty()) {
        sinks.out.file_path = worker_dir + "/stdout.log";
        sinks.err.file_path = worker_dir + "/stderr.log";
    }
    return sinks;
}

std::shared_ptr<const LineMatcher::Patterns> report_patterns(const LaunchConfig& config) {
    if (config.report_lines.empty() && config.duplicate_stderr_filters.empty()) return nullptr;
    constexpr auto flags = std::regex::ECMAScript | std::regex::optimize;
    auto patterns = std::make_shared<LineMatcher::Patterns>();
    for (const auto& pattern : config.report_lines) patterns->emplace_back(pattern, flags);
    // A failed rank's stderr lines that a filter picks go in its summary as --report-lines'
    // matches do, tee'd or not: the summary is about the failure, not the console.
    for (const auto& filter : config.duplicate_stderr_filters)
        if (auto pattern = duplicate_filter_pattern(filter))
            patterns->emplace_back(*pattern, flags);
    return patterns;
}

Status open_filtered_files(LogMux& mux, const LaunchContext& ctx, const std::string& attempt_dir) {
    if (ctx.log_dir.empty()) return {};
    if (auto opened = mux.duplicate_lines(WorkerStream::Stdout, ctx.config.duplicate_stdout_filters,
                                          attempt_dir + "/filtered_stdout.log");
        !opened)
        return opened;
    return mux.duplicate_lines(WorkerStream::Stderr, ctx.config.duplicate_stderr_filters,
                               attempt_dir + "/filtered_stderr.log");
}

}  // namespace ddprun
