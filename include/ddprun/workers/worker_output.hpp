// Where a round's worker output goes, decided from the launch: each stream's sinks (the
// console, the --log_dir files, whether --duplicate-*-filters look at it), the patterns
// that pick a failed rank's stderr lines for its summary, and the attempt's filtered
// files. Apart from WorkerGroup, which supervises the processes: these are torchrun's
// rules for --redirects, --tee, --local_ranks_filter and the filters, tested as such.
#pragma once

#include <memory>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/workers/log_mux.hpp"
#include "ddprun/workers/stderr_tail.hpp"

namespace ddprun {

struct WorkerSinks {
    StreamSink out, err;
};

// Local rank `local_rank`'s streams: on the console unless redirected (and not tee'd)
// or hidden by --local_ranks_filter; in `worker_dir`'s stdout.log and stderr.log under a log
// directory; through --duplicate-*-filters when tee'd and not hidden (what torchrun tails).
WorkerSinks worker_sinks(const LaunchContext& ctx, int local_rank, const std::string& worker_dir);

// --report-lines' regexes (checked by the command line) and --duplicate-stderr-filters'
// strings, each matched literally (duplicate_filter_pattern), compiled for LineMatcher;
// null when there are none.
std::shared_ptr<const LineMatcher::Patterns> report_patterns(const LaunchConfig& config);

// --duplicate-*-filters: the mux copies what they pick to filtered_stdout.log and
// filtered_stderr.log in `attempt_dir` (each made only when its list is given). Without a
// log directory (no --log_dir, --redirects or --tee) no stream is tee'd, so no line would
// ever be copied: there is no file then, where torchrun makes empty ones in a temporary
// directory.
Status open_filtered_files(LogMux& mux, const LaunchContext& ctx, const std::string& attempt_dir);

}  // namespace ddprun
