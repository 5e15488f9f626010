// Known errors: failures of torch (and of the Python around it) whose cause and
// fix are known, recognised in what the root-cause worker left (its error file's
// message and its stderr tail) so that the failure summary can add one line
// saying what to do. Pure. The table is kept small on purpose: an entry earns its
// place by being common and by having one fix that is right whenever it matches.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// The fix for the first known error found in `error_message` or `stderr_tail`
// (one line, e.g. "export USE_LIBUV=0 ..."), or nullopt when none matches.
std::optional<std::string_view> known_error_fix(std::string_view error_message,
                                                const std::vector<std::string>& stderr_tail);

}  // namespace ddprun
