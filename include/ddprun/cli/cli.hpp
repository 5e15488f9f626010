// Command line, job file and environment defaults -> LaunchConfig. The
// environment comes in as a map, so every bad input is table-testable.
#pragma once

#include <expected>
#include <map>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun {

struct CommandLine {
    // ShowStatus: `ddprun status` (status.hpp) reads the job `config` names.
    enum class Action { Run, PrintHelp, PrintVersion, ShowStatus };
    Action action = Action::Run;
    LaunchConfig config;
    std::string text;  // help or version text for PrintHelp / PrintVersion
    // --write-config FILE: where to write job_file (a TOML job file of the options
    // given); with --dry-run the plan is printed too, and nothing is started either way.
    std::string write_config;
    std::string job_file;
    bool watch = false;  // ddprun status --watch
    bool json = false;   // ddprun status --json
    // ddprun status: the job's store was named (--rdzv_endpoint, --rdzv_id, --master_addr,
    // or their variables); else, under Slurm, the allocation's steps are looked through.
    bool rendezvous_given = false;
};

// args: argv[1..]. env: the process environment (DDPRUN_<NAME>, PET_<NAME>,
// LOGLEVEL, PYTHON_EXEC are read from it). Reads the job file that --config or
// DDPRUN_CONFIG names, and nothing else. `ignored` says which signals were
// ignored when ddprun started (signal_ignored; tests pass their own): those
// stay ignored unless --signals_to_handle names them (config.ignored_signals).
std::expected<CommandLine, Error> parse_command_line(const std::vector<std::string>& args,
                                                     const Environment& env,
                                                     bool (*ignored)(int) = signal_ignored);

// Writes --write-config's job file whole (a temporary file renamed over FILE,
// so a job never reads half of one) and says so on stderr.
std::expected<void, Error> write_job_file(const std::string& path, const std::string& text);

// Parses a signal list such as "SIGTERM,SIGINT" or "TERM,2" (used by
// --signals_to_handle); exposed for tests.
std::expected<std::vector<int>, Error> parse_signal_list(const std::string& value);

// The closest known flag to an unknown one (edit distance), or "" if none is close.
std::string closest_flag(const std::string& unknown);

}  // namespace ddprun
