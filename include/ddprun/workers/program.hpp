// Program: finds the file a worker command will execute, so that a missing or
// non-executable program is reported once, before anything starts, with the
// launcher's 127 / 126 convention.
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun {

// Resolves `name` like execvp would: a name with '/' is taken as a path, others
// are searched in `path_var` (PATH). Checks that the result is a regular file
// the agent may execute.
std::expected<std::string, Error> resolve_executable(const std::string& name,
                                                     const std::string& path_var);

// Resolves argv[0] of a worker command, and for `python -u script.py` also
// checks that the script exists. Returns the path to execute.
std::expected<std::string, Error> resolve_command(const std::vector<std::string>& argv,
                                                  const LaunchConfig& config,
                                                  const Environment& env);

}  // namespace ddprun
