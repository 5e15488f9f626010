// One option's value, where it came from, and the parsers that check it.
// Internal to the command line (src/cli*.cpp); include/ddprun/cli.hpp is the
// interface.
//
// Why this header exists: cli.cpp decides which value an option takes (flag,
// DDPRUN_<NAME>, PET_<NAME>, scheduler) and cli_values.cpp checks it; a Setting
// carries the value together with its label so that every parser's error names
// the flag or variable the user actually set.
#pragma once

#include <fmt/format.h>

#include <expected>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/cli/cli.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun::cli {

constexpr int k_max_nnodes = 1 << 16;

// An option's name as its variable suffix: nproc-per-node -> NPROC_PER_NODE.
std::string env_suffix(std::string_view name);
std::string lower(std::string_view text);

// One option's value and where it came from, for messages that name both.
struct Setting {
    std::string label;  // "--nnodes", "-r", "PET_NNODES", "nnodes" (a job file's key), ...
    std::string value;
    bool bare_flag = false;  // a flag on the command line: it has no value to show
    std::string origin{};    // a job file's "job.toml:3", else ""

    std::string shown() const {
        if (bare_flag) return label;
        bool plain = !value.empty() && value.find_first_of(" \t'\"") == std::string::npos;
        return fmt::format("{}={}", label, plain ? value : "'" + value + "'");
    }
    // shown(), after the file and line it came from, to start a message with.
    std::string where() const { return origin.empty() ? shown() : origin + ": " + shown(); }
    Error error(std::string_view problem, std::string_view example) const {
        return usage_error(fmt::format("{}: {} (e.g. {}={})", where(), problem, label, example));
    }
    Error error_hint(std::string_view problem, std::string_view hint) const {
        return usage_error(fmt::format("{}: {} ({})", where(), problem, hint));
    }
};

template <typename T>
using Parsed = std::expected<T, Error>;

// Each returns the value for LaunchConfig or one line naming s.label, the value
// and an example.
Parsed<bool> parse_switch(const Setting& s);
Parsed<int> parse_int(const Setting& s, long long min, long long max, std::string_view example);
// --nnodes=N (min == max) or MIN:MAX (elastic), 1 <= MIN <= MAX.
struct NnodesRange {
    int min = 1;
    int max = 1;
};
Parsed<NnodesRange> parse_nnodes(const Setting& s);
Parsed<NprocSpec> parse_nproc(const Setting& s);
Parsed<int> parse_port(const Setting& s);
Parsed<double> parse_seconds(const Setting& s, bool zero_ok, std::string_view example);
// A fraction in [0, 1) (--straggler-fraction): 0 turns the thing off.
Parsed<double> parse_fraction(const Setting& s);
Parsed<std::string> parse_nonempty(const Setting& s, std::string_view example);
// A host name or address: what other nodes and messages will use verbatim. Empty
// only where `empty_ok` (then the default applies, as in torchrun).
Parsed<std::string> parse_host(const Setting& s, std::string_view example, bool empty_ok = false);
Parsed<std::string> parse_backend(const Setting& s);
Parsed<std::string> parse_endpoint(const Setting& s);
Parsed<RendezvousSettings> parse_rdzv_conf(const Setting& s);
Parsed<StreamSelection> parse_streams(const Setting& s);
Parsed<std::optional<std::set<int>>> parse_rank_filter(const Setting& s);
Parsed<std::vector<int>> parse_signals(const Setting& s);
Parsed<std::string> parse_start_method(const Setting& s);
Parsed<NumaBinding> parse_numa_binding(const Setting& s);
Parsed<std::string> parse_log_prefix(const Setting& s);

// For default signal lists (no --signals_to_handle): moves the signals that
// `ignored` says were ignored at the start (nohup) from config.stop_signals and
// config.forward_signals to config.ignored_signals.
void leave_ignored_signals(LaunchConfig& config, bool (*ignored)(int));

// LOGLEVEL's value as a verbosity (-1 quiet .. 2), else nullopt.
std::optional<int> verbosity_for_level(std::string_view level);

}  // namespace ddprun::cli
