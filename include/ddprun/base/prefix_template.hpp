// The prefix template of worker output lines (--log-prefix, default
// "[{rank}]: "): which worker a line came from. Checked once at the command
// line, expanded once per worker and round. Pure.
#pragma once

#include <string>
#include <vector>

#include "ddprun/base/error.hpp"

namespace ddprun {

// Identity of one worker stream's source, used to expand the prefix template.
struct StreamSource {
    int rank = 0;
    int local_rank = 0;
    int node_rank = 0;
    std::string role = "default";
    int round = 0;     // DDPRUN_ROUND
    std::string host;  // this node's name (LaunchContext::host: --local_addr or the hostname)
};

// Expands "{rank}", "{local_rank}", "{node_rank}", "{role}", "{round}", "{host}" in a prefix
// template. "{{" and "}}" are literal braces. Returns "" for an empty template.
// Unknown placeholders are left as written (validate_prefix_template rejects
// them at the command line).
std::string expand_prefix(const std::string& tmpl, const StreamSource& source);

// The prefix of a line that several workers of one node printed alike
// (--collapse-lines): "{rank}" and "{local_rank}" become `ranks` and
// `local_ranks` ("0-3,5"); the rest is `source`'s, which they share.
std::string expand_group_prefix(const std::string& tmpl, const StreamSource& source,
                                const std::string& ranks, const std::string& local_ranks);

// "0-3,5,7-8": sorted, distinct numbers as runs.
std::string rank_runs(std::vector<int> numbers);

// A usage error naming the first bad placeholder or unmatched brace, if any.
Status validate_prefix_template(const std::string& tmpl);

}  // namespace ddprun
