// Environment: a process environment as a map. The CLI reads defaults from it,
// the rank plan decides what workers inherit, the scheduler parsers read
// SLURM_*/OMPI_*; all of them take it as a value, so each is testable without
// touching the real environment.
#pragma once

#include <map>
#include <string>

namespace ddprun {

using Environment = std::map<std::string, std::string>;

// `envp` as a map (environ, or a test's own array); entries without '=' are skipped.
Environment environment_from(char** envp);

}  // namespace ddprun
