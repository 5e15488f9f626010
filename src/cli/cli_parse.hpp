// The options as CLI11 parses them: the scanned command line and the job file
// (--config, DDPRUN_CONFIG). Internal to the command line (src/cli/*.cpp).
//
// Why this header exists: cli.cpp turns what was given into a LaunchConfig and
// must know, for each option, its values and where they came from; the CLI11
// app that finds them, and writes them back as a job file, stays in
// cli_parse.cpp, the one file that includes CLI11.
#pragma once

#include <cstddef>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "cli_options.hpp"
#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"

namespace ddprun::cli {

// One option of k_options as the command line or the job file gave it.
struct Given {
    std::size_t count = 0;            // how many times: -vv is 2, a job file's `verbose = 2` too
    std::vector<std::string> values;  // in order; a job file's unquoted a,b list is one "a,b"
    std::string origin;               // "job.toml:3" where the job file set it, else ""
};
using GivenOptions = std::vector<Given>;  // indexed like k_options

// The last value given for the option of canonical name `name`; null if none.
inline const std::string* last_value(const GivenOptions& given, std::string_view name) {
    for (std::size_t i = 0; i < k_options.size() && i < given.size(); ++i)
        if (k_options[i].name == name && !given[i].values.empty()) return &given[i].values.back();
    return nullptr;
}

// Where the job file is named: "--config" (as typed) or "DDPRUN_CONFIG".
struct JobFile {
    std::string label;
    std::string path;
};

// The job file: the last --config, else DDPRUN_CONFIG; none if neither.
std::optional<JobFile> job_file_of(const Scanned& scanned, const Environment& env);

struct ParsedOptions {
    GivenOptions given;
    std::string job_file_text;  // with --write-config: what was given, as a job file
};

// Parses `scanned` (scan() has already reported every malformed flag) and
// `file`, if any (a --config in `scanned` is read only as `file`). A flag on the command line wins
// over the file's line. An unreadable file, an unknown key or a key that is not for a file is one
// line naming the file, the line and the key (exit 2).
std::expected<ParsedOptions, Error> parse_options(const Scanned& scanned,
                                                  const std::optional<JobFile>& file);

}  // namespace ddprun::cli
