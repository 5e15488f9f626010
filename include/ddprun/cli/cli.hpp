// Command line and environment defaults -> LaunchConfig. Pure: no I/O, the
// environment comes in as a map, so every bad input is table-testable.
#pragma once

#include <expected>
#include <map>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun {

struct CommandLine {
    enum class Action { Run, PrintHelp, PrintVersion };
    Action action = Action::Run;
    LaunchConfig config;
    std::string text;  // help or version text for PrintHelp / PrintVersion
};

// args: argv[1..]. env: the process environment (DDPRUN_<NAME>, PET_<NAME>,
// LOGLEVEL, PYTHON_EXEC are read from it).
std::expected<CommandLine, Error> parse_command_line(const std::vector<std::string>& args,
                                                     const Environment& env);

// Parses a signal list such as "SIGTERM,SIGINT" or "TERM,2" (used by
// --signals_to_handle); exposed for tests.
std::expected<std::vector<int>, Error> parse_signal_list(const std::string& value);

// The closest known flag to an unknown one (edit distance), or "" if none is close.
std::string closest_flag(const std::string& unknown);

}  // namespace ddprun
