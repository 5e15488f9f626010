// Slurm's compressed host lists ("node[01-04,07],login1") expanded to host
// names. Why it exists: under Slurm, node 0 of a step is the first host of
// SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), and the only alternative to
// parsing the list is running `scontrol show hostnames`, which a launcher
// must not depend on. Pure, so every form Slurm writes is table-tested.
#pragma once

#include <cstddef>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// More hosts than any cluster has: a list that expands past this is a typo
// ("node[1-99999999]") and is refused before it is built.
constexpr std::size_t k_max_hostlist_hosts = 100000;

// Expands a Slurm hostlist. Names are separated by commas outside brackets;
// a name holds any number of bracket groups of numbers and ranges
// ("node[01-04,07]"), several groups give every combination with the first
// group varying slowest ("rack[1-2]-n[1-2]": rack1-n1 rack1-n2 rack2-n1
// rack2-n2). A range keeps the width of its lower bound ("[08-10]": 08 09 10).
// Order is kept and nothing is sorted or deduplicated, as in Slurm.
// Errors: one line naming the problem and its position (1-based), e.g.
// "unclosed '[' at character 5".
std::expected<std::vector<std::string>, std::string> expand_hostlist(std::string_view hostlist);

}  // namespace ddprun
