// ddprun's own messages: one line each on stderr, "ddprun: " first, and
// "warning: " / "error: " where it matters. Worker output never goes here.
#pragma once

#include <spdlog/spdlog.h>

namespace ddprun {

// verbosity: -1 errors only, 0 info, 1 debug, 2 trace.
void setup_logging(int verbosity);

}  // namespace ddprun
