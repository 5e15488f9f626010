// The command line and environment defaults -> a validated LaunchConfig.
//
// Why this file exists: torchrun users must be able to switch to ddprun
// without changing a flag, and a mistake must come back as one line that
// names the flag (or variable), the value and a fix, never as a parser dump.
// The work is in three steps: scan() finds where ddprun's options end (the
// program and everything after it are never looked at, let alone changed),
// CLI11 parses those options, and the rest resolves environment defaults
// (DDPRUN_<NAME>, PET_<NAME>, then what a scheduler's variables say, see
// scheduler_env.hpp) and validates every value. Pure: the environment comes in
// as a map.

#include "ddprun/cli.hpp"
#include "ddprun/text.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "ddprun/log_mux.hpp"
#include "ddprun/scheduler_env.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "unknown"
#endif

namespace ddprun {
namespace {

constexpr int k_max_nnodes = 1 << 16;
constexpr int k_max_nproc = 1 << 14;   // with k_max_nnodes, world sizes fit in an int
constexpr double k_max_seconds = 1e7;  // longer is a typo; keeps milliseconds in range
constexpr std::string_view k_default_signals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// Where a flag not given on the command line finds its default.
enum class EnvDefault {
    None,
    Torchrun,  // DDPRUN_<NAME>, then PET_<NAME> (what torchrun and Kubeflow set)
    Ddprun,    // DDPRUN_<NAME> only
};

struct OptionSpec {
    std::string_view name;        // canonical long spelling, without "--"
    char short_name;              // '\0': none
    std::string_view value_name;  // empty: a flag, which takes no value
    EnvDefault env;
    std::string_view section;  // help section; empty: accepted but not shown
    std::string_view help;
};

constexpr std::string_view k_torchrun = "torchrun flags (- and _ spellings both work):";
constexpr std::string_view k_ddprun = "ddprun flags:";

// The one list of options: scanning, CLI11, environment names, suggestions and
// --help all come from it.
constexpr OptionSpec k_options[] = {
    {"nnodes", 0, "N", EnvDefault::Torchrun, k_torchrun,
     "number of nodes; MIN:MAX only with MIN == MAX [1]"},
    {"nproc_per_node", 0, "N|gpu|cpu|auto", EnvDefault::Torchrun, k_torchrun,
     "workers on this node [1]"},
    {"node_rank", 0, "RANK", EnvDefault::Torchrun, k_torchrun, "this node, 0..nnodes-1"},
    {"master_addr", 0, "ADDR", EnvDefault::Torchrun, k_torchrun,
     "MASTER_ADDR: where node 0's store listens [127.0.0.1]"},
    {"master_port", 0, "PORT", EnvDefault::Torchrun, k_torchrun,
     "MASTER_PORT; 0 picks a free port [a free port]"},
    {"local_addr", 0, "ADDR", EnvDefault::Torchrun, k_torchrun,
     "this node's address as the others reach it [hostname]"},
    {"rdzv_backend", 0, "static|c10d", EnvDefault::Torchrun, k_torchrun,
     "how the nodes meet [static]"},
    {"rdzv_endpoint", 0, "HOST[:PORT]", EnvDefault::Torchrun, k_torchrun,
     "the rendezvous store [MASTER_ADDR:29400]"},
    {"rdzv_id", 0, "ID", EnvDefault::Torchrun, k_torchrun, "job id, the same on every node [none]"},
    {"rdzv_conf", 0, "KEY=VAL,...", EnvDefault::Torchrun, k_torchrun,
     "e.g. join_timeout=600,is_host=1"},
    {"standalone", 0, "", EnvDefault::Torchrun, k_torchrun,
     "one node with its own store (c10d, --nnodes=1)"},
    {"max_restarts", 0, "N", EnvDefault::Torchrun, k_torchrun,
     "restarts of the whole job after a failure [0]"},
    {"shutdown_timeout", 0, "SECS", EnvDefault::Torchrun, k_torchrun,
     "grace between SIGTERM and SIGKILL [30]"},
    {"signals_to_handle", 0, "SIG,...", EnvDefault::Torchrun, k_torchrun,
     "signals that stop the job [SIGTERM,SIGINT,SIGHUP,SIGQUIT]"},
    {"monitor_interval", 0, "SECS", EnvDefault::Torchrun, k_torchrun,
     "accepted; ddprun sees worker exits at once"},
    {"start_method", 0, "spawn|fork|forkserver", EnvDefault::Torchrun, k_torchrun,
     "accepted; workers are always exec'd"},
    {"role", 0, "NAME", EnvDefault::Torchrun, k_torchrun, "ROLE_NAME of the workers [default]"},
    {"module", 'm', "", EnvDefault::Torchrun, k_torchrun, "run PROGRAM as a Python module"},
    {"no_python", 0, "", EnvDefault::Torchrun, k_torchrun,
     "run PROGRAM directly even if it ends in .py"},
    {"virtual_local_rank", 0, "", EnvDefault::Torchrun, k_torchrun, "LOCAL_RANK=0 in every worker"},
    {"log_dir", 0, "DIR", EnvDefault::Torchrun, k_torchrun, "also write worker output under DIR"},
    {"redirects", 'r', "0-3|LR:0-3,...", EnvDefault::Torchrun, k_torchrun,
     "streams to files only: 1 out, 2 err, 3 both [0]"},
    {"tee", 't', "0-3|LR:0-3,...", EnvDefault::Torchrun, k_torchrun,
     "streams to files and the console [0]"},
    {"local_ranks_filter", 0, "LR,...", EnvDefault::Torchrun, k_torchrun,
     "show only these local ranks on the console [all]"},
    {"numa-binding", 0, "node|socket|exclusive", EnvDefault::Torchrun, k_torchrun,
     "pin each worker to the CPUs near its GPU [none]"},
    {"run_path", 0, "", EnvDefault::Torchrun, k_torchrun,
     "not supported: run the program directly"},
    // torch.distributed.launch's switch to environment variables, which is all
    // ddprun does: accepted so old launch lines keep working.
    {"use_env", 0, "", EnvDefault::None, "", ""},
    {"dry-run", 0, "", EnvDefault::Ddprun, k_ddprun,
     "print the whole job's rank plan, start nothing"},
    {"all-devices", 0, "", EnvDefault::Ddprun, k_ddprun,
     "every worker sees every device (torchrun's way)"},
    {"cpu-binding", 0, "", EnvDefault::Ddprun, k_ddprun,
     "pin workers to equal shares of the allowed CPUs"},
    {"broadcast-signals", 0, "", EnvDefault::Ddprun, k_ddprun,
     "a SIGUSR1/SIGUSR2 to one agent reaches every node's workers"},
    {"log-prefix", 0, "TEMPLATE", EnvDefault::Ddprun, k_ddprun,
     "{rank} {local_rank} {node_rank} {role}; '' none [\"[{rank}]: \"]"},
    {"verbose", 'v', "", EnvDefault::None, k_ddprun, "more output (-vv: even more)"},
    {"quiet", 'q', "", EnvDefault::None, k_ddprun, "errors only"},
    {"version", 0, "", EnvDefault::None, k_ddprun, "print the version"},
    {"help", 'h', "", EnvDefault::None, k_ddprun, "print this help"},
};

bool is_flag(const OptionSpec& spec) {
    return spec.value_name.empty();
}

// The other spelling: nproc_per_node <-> nproc-per-node.
std::string alternate_spelling(std::string_view name) {
    std::string other(name);
    bool dashed = other.find('-') != std::string::npos;
    std::replace(other.begin(), other.end(), dashed ? '-' : '_', dashed ? '_' : '-');
    return other;
}

std::string env_suffix(std::string_view name) {
    std::string upper;
    for (char c : name) upper += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    return upper;
}

std::string lower(std::string_view text) {
    std::string out;
    for (char c : text) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    while (true) {
        auto at = text.find(separator);
        parts.push_back(text.substr(0, at));
        if (at == std::string_view::npos) return parts;
        text.remove_prefix(at + 1);
    }
}

std::optional<long long> to_flag_integer(std::string_view text) {
    text = trim(text);
    if (text.starts_with('+')) text.remove_prefix(1);
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return value;
}

// An optional sign and one or more digits: an integer, if perhaps too large for one.
bool is_digits(std::string_view text) {
    if (text.starts_with('+') || text.starts_with('-')) text.remove_prefix(1);
    return !text.empty() && std::ranges::all_of(text, [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<double> to_number(std::string_view text) {
    text = trim(text);
    if (text.starts_with('+')) text.remove_prefix(1);
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
        !std::isfinite(value))
        return std::nullopt;
    return value;
}

std::optional<bool> to_bool(std::string_view text) {
    std::string word = lower(trim(text));
    if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
    if (word == "0" || word == "false" || word == "no" || word == "off") return false;
    return std::nullopt;
}

// Optimal string alignment distance: a swapped pair of letters costs 1.
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    }
    return d[a.size()][b.size()];
}

UsageError unknown_flag(const std::string& typed) {
    std::string suggestion = closest_flag(typed);
    if (!suggestion.empty())
        return {fmt::format("unknown flag {} (did you mean {}?)", typed, suggestion)};
    return {fmt::format(
        "unknown flag {} (see ddprun --help; the program's own flags go after the program)",
        typed)};
}

// A long name as typed (without "--"): exact in either spelling, else a unique
// prefix, as torchrun's argparse accepts "--nproc" for "--nproc_per_node".
std::expected<const OptionSpec*, UsageError> find_long(std::string_view name) {
    std::vector<const OptionSpec*> prefixed;
    for (const OptionSpec& spec : k_options) {
        std::string other = alternate_spelling(spec.name);
        if (name == spec.name || name == other) return &spec;
        if (!name.empty() && (spec.name.starts_with(name) || other.starts_with(name)))
            prefixed.push_back(&spec);
    }
    if (prefixed.size() == 1) return prefixed.front();
    if (prefixed.empty()) return std::unexpected(unknown_flag("--" + std::string(name)));
    std::string candidates;
    for (const OptionSpec* spec : prefixed)
        candidates += fmt::format("{}--{}", candidates.empty() ? "" : ", ", spec->name);
    return std::unexpected(UsageError{
        fmt::format("ambiguous flag --{} (could be {}; spell it out)", name, candidates)});
}

const OptionSpec* find_short(char letter) {
    for (const OptionSpec& spec : k_options)
        if (spec.short_name != 0 && spec.short_name == letter) return &spec;
    return nullptr;
}

std::string example_for(const OptionSpec& spec) {
    if (spec.name == "nnodes" || spec.name == "nproc_per_node") return "2";
    if (spec.name == "redirects" || spec.name == "tee") return "3";
    if (spec.name == "master_port") return "29500";
    if (spec.name == "rdzv_conf") return "join_timeout=600";
    if (spec.name == "shutdown_timeout") return "30";
    return "VALUE";
}

// ddprun's own options, split off the program and its arguments.
struct Scanned {
    std::vector<std::string> options;  // canonical spellings, values as separate items
    std::map<std::string_view, std::string> spelling;  // canonical name -> as typed
    std::optional<std::size_t> program_index;
    std::optional<UsageError> error;  // the first unknown, ambiguous or malformed flag
};

// Walks the options the way argparse (and CLI11) would, stopping at the first
// argument that is not an option (or after "--"). Knowing exactly where the
// options end is what keeps the program's arguments untouched; an unknown
// flag is reported, never mistaken for the program.
Scanned scan(const std::vector<std::string>& args) {
    Scanned out;
    auto fail = [&out](UsageError error) {
        if (!out.error) out.error = std::move(error);
    };
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") {
            if (i + 1 < args.size()) out.program_index = i + 1;
            return out;
        }
        if (arg.starts_with("--")) {
            auto equals = arg.find('=');
            std::string typed = arg.substr(0, equals);
            auto spec = find_long(std::string_view(typed).substr(2));
            if (!spec) {
                fail(spec.error());
                continue;
            }
            out.spelling[(*spec)->name] = typed;
            std::string canonical = "--" + std::string((*spec)->name);
            if (is_flag(**spec)) {
                if (equals != std::string::npos)
                    fail({fmt::format("{}: takes no value (write just {})", arg, typed)});
                out.options.push_back(canonical);
            } else if (equals != std::string::npos || i + 1 < args.size()) {
                out.options.push_back(canonical);
                out.options.push_back(equals != std::string::npos ? arg.substr(equals + 1)
                                                                  : args[++i]);
            } else {
                fail({fmt::format("{}: missing value (e.g. {}={})", typed, typed,
                                  example_for(**spec))});
            }
            continue;
        }
        if (arg.size() > 1 && arg[0] == '-') {
            // A cluster of short options, like -vv or -r3.
            for (std::size_t j = 1; j < arg.size(); ++j) {
                std::string typed = {'-', arg[j]};
                const OptionSpec* spec = find_short(arg[j]);
                if (spec == nullptr) {
                    // "-master_addr" is a long flag with one dash, not -m -a...
                    bool long_typo = j == 1 || !closest_flag(arg).empty();
                    fail(unknown_flag(long_typo ? arg : typed));
                    break;
                }
                out.spelling[spec->name] = typed;
                out.options.push_back(typed);
                if (is_flag(*spec)) continue;
                std::string_view rest = std::string_view(arg).substr(j + 1);
                if (rest.starts_with('=')) rest.remove_prefix(1);
                if (!rest.empty()) {
                    out.options.emplace_back(rest);
                } else if (i + 1 < args.size()) {
                    out.options.push_back(args[++i]);
                } else {
                    out.options.pop_back();
                    fail({fmt::format("{}: missing value (e.g. {} {})", typed, typed,
                                      example_for(*spec))});
                }
                break;
            }
            continue;
        }
        out.program_index = i;
        return out;
    }
    return out;
}

// One option's value and where it came from, for messages that name both.
struct Setting {
    std::string label;  // "--nnodes", "-r", "PET_NNODES", ...
    std::string value;
    bool bare_flag = false;  // a flag on the command line: it has no value to show

    std::string shown() const {
        if (bare_flag) return label;
        bool plain = !value.empty() && value.find_first_of(" \t'\"") == std::string::npos;
        return fmt::format("{}={}", label, plain ? value : "'" + value + "'");
    }
    UsageError error(std::string_view problem, std::string_view example) const {
        return {fmt::format("{}: {} (e.g. {}={})", shown(), problem, label, example)};
    }
    UsageError error_hint(std::string_view problem, std::string_view hint) const {
        return {fmt::format("{}: {} ({})", shown(), problem, hint)};
    }
};

using Settings = std::map<std::string_view, Setting>;

// What was given on the command line, else in DDPRUN_<NAME>, else in PET_<NAME>.
// An empty variable counts as unset (job templates often export empty ones),
// except for the log prefix, where empty means "no prefix".
Settings gather_settings(const std::vector<CLI::Option*>& parsed, const Scanned& scanned,
                         const Environment& env) {
    Settings settings;
    for (std::size_t i = 0; i < std::size(k_options); ++i) {
        const OptionSpec& spec = k_options[i];
        if (parsed[i]->count() > 0) {
            Setting setting{scanned.spelling.at(spec.name), "", is_flag(spec)};
            if (!is_flag(spec)) setting.value = parsed[i]->results().back();
            settings.emplace(spec.name, std::move(setting));
            continue;
        }
        std::vector<std::string> variables;
        if (spec.env != EnvDefault::None) variables.push_back("DDPRUN_" + env_suffix(spec.name));
        if (spec.env == EnvDefault::Torchrun) variables.push_back("PET_" + env_suffix(spec.name));
        for (const std::string& variable : variables) {
            auto it = env.find(variable);
            if (it != env.end() && (!it->second.empty() || spec.name == "log-prefix")) {
                settings.emplace(spec.name, Setting{variable, it->second, false});
                break;
            }
        }
    }
    return settings;
}

template <typename T>
using Parsed = std::expected<T, UsageError>;

Parsed<bool> parse_switch(const Setting& s) {
    if (s.bare_flag) return true;
    if (auto value = to_bool(s.value)) return *value;
    return std::unexpected(s.error("expected 1 or 0", "1"));
}

Parsed<int> parse_int(const Setting& s, long long min, long long max, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("missing value", example));
    auto value = to_flag_integer(s.value);
    if (!value && is_digits(trim(s.value)))  // beyond 64 bits
        value = trim(s.value).starts_with('-') ? LLONG_MIN : LLONG_MAX;
    if (!value) return std::unexpected(s.error("not a number", example));
    if (*value < min)
        return std::unexpected(s.error(fmt::format("must be at least {}", min), example));
    if (*value > max)
        return std::unexpected(s.error(fmt::format("must be at most {}", max), example));
    return static_cast<int>(*value);
}

Parsed<int> parse_nnodes(const Setting& s) {
    auto colon = s.value.find(':');
    if (colon == std::string::npos) return parse_int(s, 1, k_max_nnodes, "2");
    auto min = to_flag_integer(std::string_view(s.value).substr(0, colon));
    auto max = to_flag_integer(std::string_view(s.value).substr(colon + 1));
    if (!min || !max) return std::unexpected(s.error("expected N or MIN:MAX", "2"));
    if (*min < 1) return std::unexpected(s.error("MIN must be at least 1", "2"));
    if (*min > *max)
        return std::unexpected(s.error("MIN is greater than MAX", fmt::format("{}", *min)));
    if (*min < *max)
        return std::unexpected(
            s.error("elastic --nnodes=MIN:MAX is not supported; use a fixed --nnodes=N",
                    fmt::format("{}", *max)));
    if (*max > k_max_nnodes)
        return std::unexpected(s.error(fmt::format("must be at most {}", k_max_nnodes), "2"));
    return static_cast<int>(*min);
}

Parsed<NprocSpec> parse_nproc(const Setting& s) {
    std::string word = lower(trim(s.value));
    if (word == "gpu") return NprocSpec{NprocKind::Gpu, 1};
    if (word == "cpu") return NprocSpec{NprocKind::Cpu, 1};
    if (word == "auto") return NprocSpec{NprocKind::Auto, 1};
    if (!word.empty() && !is_digits(word))
        return std::unexpected(s.error("expected a number, gpu, cpu or auto", "8"));
    auto count = parse_int(s, 1, k_max_nproc, "8");
    if (!count) return std::unexpected(count.error());
    return NprocSpec{NprocKind::Count, *count};
}

Parsed<int> parse_port(const Setting& s) {
    auto value = to_flag_integer(s.value);
    if (value && (*value < 0 || *value > 65535))
        return std::unexpected(
            s.error_hint("must be a port number 0-65535",
                         fmt::format("0 picks a free one; e.g. {}=29500", s.label)));
    return parse_int(s, 0, 65535, "29500");
}

Parsed<double> parse_seconds(const Setting& s, bool zero_ok, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("missing value", example));
    auto value = to_number(s.value);
    if (!value) return std::unexpected(s.error("not a number of seconds", example));
    if (*value < 0 || (*value == 0 && !zero_ok))
        return std::unexpected(
            s.error(zero_ok ? "must not be negative" : "must be more than 0", example));
    if (*value > k_max_seconds) return std::unexpected(s.error("too large", example));
    return *value;
}

Parsed<std::string> parse_nonempty(const Setting& s, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("must not be empty", example));
    return s.value;
}

// A host name or address: what other nodes and messages will use verbatim. Empty
// only where `empty_ok` (then the default applies, as in torchrun).
Parsed<std::string> parse_host(const Setting& s, std::string_view example, bool empty_ok = false) {
    if (s.value.empty()) {
        if (empty_ok) return s.value;
        return std::unexpected(s.error("must not be empty", example));
    }
    std::string host(trim(s.value));
    if (host.empty()) return std::unexpected(s.error("must not be blank", example));
    if (std::ranges::any_of(host, [](unsigned char c) { return std::isspace(c) || c < 0x20; }))
        return std::unexpected(s.error("a host name or address has no spaces", example));
    return host;
}

Parsed<std::string> parse_backend(const Setting& s) {
    if (s.value == "static" || s.value == "c10d") return s.value;
    if (s.value == "etcd" || s.value == "etcd-v2")
        return std::unexpected(
            s.error("etcd is not supported; ddprun hosts its own store", "c10d"));
    return std::unexpected(s.error("unknown backend (use static or c10d)", "c10d"));
}

Parsed<std::string> parse_endpoint(const Setting& s) {
    std::string_view value = trim(s.value);
    if (value.empty()) return std::string{};
    std::string_view host = value;
    std::optional<std::string_view> port;
    if (value.starts_with('[')) {  // [::1]:29400
        auto close = value.find(']');
        if (close == std::string_view::npos)
            return std::unexpected(s.error("unclosed [ in IPv6 address", "[::1]:29400"));
        host = value.substr(1, close - 1);
        std::string_view rest = value.substr(close + 1);
        if (!rest.empty() && !rest.starts_with(':'))
            return std::unexpected(s.error("expected :PORT after ]", "[::1]:29400"));
        if (!rest.empty()) port = rest.substr(1);
    } else if (std::count(value.begin(), value.end(), ':') == 1) {
        auto colon = value.find(':');
        host = value.substr(0, colon);
        port = value.substr(colon + 1);
    }  // more colons: a bare IPv6 address without a port
    if (host.empty()) return std::unexpected(s.error("missing host", "node0:29400"));
    if (port) {
        auto number = to_flag_integer(*port);
        if (!number || *number < 0 || *number > 65535)
            return std::unexpected(
                s.error(fmt::format("port {} is not 0-65535", *port), "node0:29400"));
    }
    return std::string(value);
}

constexpr std::string_view k_conf_timeouts[] = {"join_timeout",         "heartbeat_timeout",
                                                "exit_barrier_timeout", "read_timeout",
                                                "last_call_timeout",    "close_timeout"};

Parsed<std::map<std::string, std::string>> parse_rdzv_conf(const Setting& s) {
    std::map<std::string, std::string> conf;
    for (std::string_view pair : split(s.value, ',')) {
        if (trim(pair).empty()) continue;  // torchrun skips empty pairs ("a=1,")
        auto equals = pair.find('=');
        if (equals == std::string_view::npos)
            return std::unexpected(
                s.error(fmt::format("'{}' is not KEY=VALUE", trim(pair)), "join_timeout=600"));
        std::string key(trim(pair.substr(0, equals)));
        std::string value(trim(pair.substr(equals + 1)));
        if (key.empty() || value.empty())
            return std::unexpected(
                s.error(fmt::format("'{}' is not KEY=VALUE", trim(pair)), "join_timeout=600"));
        bool timeout = std::find(std::begin(k_conf_timeouts), std::end(k_conf_timeouts), key) !=
                       std::end(k_conf_timeouts);
        auto seconds = to_number(value);
        if (timeout && (!seconds || *seconds <= 0 || *seconds > k_max_seconds))
            return std::unexpected(
                s.error(fmt::format("{} must be a positive number of seconds", key),
                        fmt::format("{}=600", key)));
        if (key == "is_host" && !to_bool(value))
            return std::unexpected(s.error("is_host must be 1 or 0", "is_host=1"));
        conf[key] = value;
    }
    return conf;
}

// torchrun's Std syntax: "3" for every local rank, or "0:3,1:2" per local rank.
Parsed<StreamSelection> parse_streams(const Setting& s) {
    auto bad = [&s] {
        return std::unexpected(s.error_hint(
            "expected 0-3 or LOCAL_RANK:0-3 pairs",
            fmt::format("0 none, 1 stdout, 2 stderr, 3 both; e.g. {0}=3 or {0}=0:3,1:2", s.label)));
    };
    StreamSelection selection;
    std::string_view value = trim(s.value);
    if (value.find(':') == std::string_view::npos) {
        auto mask = to_flag_integer(value);
        if (!mask || *mask < 0 || *mask > 3) return bad();
        selection.all = static_cast<unsigned>(*mask);
        return selection;
    }
    for (std::string_view pair : split(value, ',')) {
        auto colon = pair.find(':');
        if (colon == std::string_view::npos) return bad();
        auto rank = to_flag_integer(pair.substr(0, colon));
        auto mask = to_flag_integer(pair.substr(colon + 1));
        if (!rank || !mask || *rank < 0 || *rank > INT_MAX || *mask < 0 || *mask > 3) return bad();
        if (!selection.per_rank.emplace(static_cast<int>(*rank), static_cast<unsigned>(*mask))
                 .second)
            return std::unexpected(
                s.error(fmt::format("local rank {} is listed twice", *rank), "0:3,1:2"));
    }
    return selection;
}

Parsed<std::optional<std::set<int>>> parse_rank_filter(const Setting& s) {
    if (trim(s.value).empty()) return std::optional<std::set<int>>{};
    std::set<int> ranks;
    for (std::string_view item : split(s.value, ',')) {
        auto rank = to_flag_integer(item);
        if (!rank || *rank < 0 || *rank > INT_MAX)
            return std::unexpected(s.error("expected local ranks separated by commas", "0,2"));
        ranks.insert(static_cast<int>(*rank));
    }
    return ranks;
}

Parsed<std::vector<int>> parse_signals(const Setting& s) {
    auto signals = parse_signal_list(s.value);
    if (!signals) return std::unexpected(UsageError{s.shown() + ": " + signals.error().message});
    return *signals;
}

Parsed<std::string> parse_start_method(const Setting& s) {
    if (s.value == "spawn" || s.value == "fork" || s.value == "forkserver") return s.value;
    return std::unexpected(
        s.error("unknown start method (use spawn, fork or forkserver)", "spawn"));
}

// torchrun's --numa-binding modes, but core-complex (L3 groups), which
// needs cache topology ddprun does not read.
Parsed<NumaBinding> parse_numa_binding(const Setting& s) {
    std::string word = lower(trim(s.value));
    if (word == "node") return NumaBinding::Node;
    if (word == "socket") return NumaBinding::Socket;
    if (word == "exclusive") return NumaBinding::Exclusive;
    if (word == "none") return NumaBinding::None;
    if (word == "core-complex" || word == "core_complex")
        return std::unexpected(
            s.error("core-complex is not supported (use node, socket or exclusive)", "node"));
    return std::unexpected(s.error("unknown mode (use node, socket or exclusive)", "node"));
}

Parsed<std::string> parse_log_prefix(const Setting& s) {
    std::string problem = validate_prefix_template(s.value);
    if (!problem.empty()) return std::unexpected(s.error(problem, "'[{rank}]: '"));
    return s.value;
}

// Fills a LaunchConfig field by field; the first bad value wins and the rest
// are skipped, so the user sees one line.
class ConfigBuilder {
  public:
    explicit ConfigBuilder(const Settings& settings) : m_settings(settings) {}

    const Setting* find(std::string_view name) const {
        auto it = m_settings.find(name);
        return it == m_settings.end() ? nullptr : &it->second;
    }

    template <typename T, typename Parse>
    void set(std::string_view name, T& field, Parse parse) {
        const Setting* setting = find(name);
        if (m_error || setting == nullptr) return;
        auto value = parse(*setting);
        if (value)
            field = std::move(*value);
        else
            m_error = std::move(value.error());
    }

    void fail(UsageError error) {
        if (!m_error) m_error = std::move(error);
    }
    const std::optional<UsageError>& error() const { return m_error; }

  private:
    const Settings& m_settings;
    std::optional<UsageError> m_error;
};

// LOGLEVEL as Python's logging spells it; WARNING and above leave only errors.
std::optional<int> verbosity_for_level(std::string_view level) {
    std::string word = lower(trim(level));
    if (word == "trace") return 2;
    if (word == "debug") return 1;
    if (word == "info") return 0;
    if (word == "warning" || word == "warn" || word == "error" || word == "critical" ||
        word == "fatal")
        return -1;
    return std::nullopt;
}

void resolve_verbosity(const std::vector<CLI::Option*>& parsed, const Environment& env,
                       ConfigBuilder& builder, LaunchConfig& config) {
    auto count_of = [&parsed](std::string_view name) {
        for (std::size_t i = 0; i < std::size(k_options); ++i)
            if (k_options[i].name == name) return parsed[i]->count();
        return std::size_t{0};
    };
    std::size_t verbose = count_of("verbose");
    std::size_t quiet = count_of("quiet");
    if (verbose > 0 && quiet > 0) {
        builder.fail({"-q/--quiet with -v/--verbose: pick one"});
    } else if (quiet > 0) {
        config.verbosity = -1;
    } else if (verbose > 0) {
        config.verbosity = static_cast<int>(std::min<std::size_t>(verbose, 2));
    } else if (auto it = env.find("LOGLEVEL"); it != env.end() && !trim(it->second).empty()) {
        if (auto level = verbosity_for_level(it->second))
            config.verbosity = *level;
        else
            builder.fail(Setting{"LOGLEVEL", it->second}.error_hint(
                "unknown level", "use DEBUG, INFO, WARNING, ERROR or CRITICAL"));
    }
}

std::expected<LaunchConfig, UsageError> build_config(const Settings& settings,
                                                     const std::vector<CLI::Option*>& parsed,
                                                     const std::vector<std::string>& args,
                                                     const Scanned& scanned,
                                                     const Environment& env) {
    LaunchConfig config;
    ConfigBuilder b(settings);
    bool standalone = false, module = false, no_python = false, run_path = false;
    bool use_env = false;
    double monitor_interval = config.monitor_interval;
    double shutdown_seconds = 30;
    config.stop_signals = *parse_signal_list(std::string(k_default_signals));

    b.set("run_path", run_path, parse_switch);
    if (run_path)
        b.fail(b.find("run_path")
                   ->error_hint("not supported by ddprun",
                                "run the program directly, e.g. ddprun ./train.py"));
    b.set("nnodes", config.nnodes, parse_nnodes);
    b.set("nproc_per_node", config.nproc_per_node, parse_nproc);
    b.set("standalone", standalone, parse_switch);
    if (standalone && config.nnodes != 1 && b.find("nnodes") != nullptr)
        b.fail(b.find("nnodes")->error_hint(
            fmt::format("conflicts with {}", b.find("standalone")->shown()),
            "standalone runs one node; drop one of them"));
    b.set("master_addr", config.master_addr,
          [](const Setting& s) { return parse_host(s, "10.0.0.1"); });
    b.set("master_port", config.master_port, parse_port);
    b.set("local_addr", config.local_addr,
          [](const Setting& s) { return parse_host(s, "10.0.0.2", true); });
    b.set("rdzv_backend", config.rdzv_backend, parse_backend);
    b.set("rdzv_endpoint", config.rdzv_endpoint, parse_endpoint);
    b.set("rdzv_id", config.rdzv_id, [](const Setting& s) { return parse_nonempty(s, "job42"); });
    b.set("rdzv_conf", config.rdzv_conf, parse_rdzv_conf);
    if (standalone) {
        config.standalone = true;
        config.rdzv_backend = "c10d";
        config.nnodes = 1;
        config.master_addr = "127.0.0.1";
    }
    b.set("node_rank", config.node_rank,
          [](const Setting& s) { return parse_int(s, 0, k_max_nnodes - 1, "0"); });
    if (!b.error() && config.node_rank && *config.node_rank >= config.nnodes)
        b.fail(b.find("node_rank")
                   ->error(fmt::format("must be less than the number of nodes ({})", config.nnodes),
                           "0"));
    if (!config.node_rank && config.nnodes == 1) config.node_rank = 0;

    b.set("max_restarts", config.max_restarts,
          [](const Setting& s) { return parse_int(s, 0, INT_MAX, "3"); });
    b.set("monitor_interval", monitor_interval,
          [](const Setting& s) { return parse_seconds(s, false, "0.1"); });
    config.monitor_interval = monitor_interval;
    b.set("shutdown_timeout", shutdown_seconds,
          [](const Setting& s) { return parse_seconds(s, true, "30"); });
    config.shutdown_timeout = std::chrono::milliseconds(std::llround(shutdown_seconds * 1000));
    b.set("signals_to_handle", config.stop_signals, parse_signals);
    // Checked so a typo fails as it would in torchrun, then unused: workers are
    // always fork+exec'd, which is what every start method amounts to here.
    std::string start_method;
    b.set("start_method", start_method, parse_start_method);

    b.set("role", config.role, [](const Setting& s) { return parse_nonempty(s, "trainer"); });
    b.set("module", module, parse_switch);
    b.set("no_python", no_python, parse_switch);
    if (module && no_python)
        b.fail(
            b.find("no_python")
                ->error_hint(fmt::format("cannot be combined with {}", b.find("module")->shown()),
                             "a module needs Python; drop one of them"));
    b.set("virtual_local_rank", config.virtual_local_rank, parse_switch);
    b.set("use_env", use_env, parse_switch);
    b.set("all-devices", config.all_devices, parse_switch);
    b.set("broadcast-signals", config.broadcast_signals, parse_switch);
    b.set("numa-binding", config.numa_binding, parse_numa_binding);
    b.set("cpu-binding", config.cpu_binding, parse_switch);
    if (config.cpu_binding && config.numa_binding != NumaBinding::None)
        b.fail(b.find("cpu-binding")
                   ->error_hint(fmt::format("conflicts with {}", b.find("numa-binding")->shown()),
                                "numa binding already pins each worker near its GPU; drop one"));
    b.set("dry-run", config.dry_run, parse_switch);

    b.set("log_dir", config.log_dir, [](const Setting& s) { return Parsed<std::string>(s.value); });
    b.set("redirects", config.redirects, parse_streams);
    b.set("tee", config.tee, parse_streams);
    b.set("local_ranks_filter", config.local_ranks_filter, parse_rank_filter);
    b.set("log-prefix", config.log_prefix, parse_log_prefix);
    resolve_verbosity(parsed, env, b, config);

    if (!b.error() && !scanned.program_index)
        b.fail(
            {"no program to run (usage: ddprun [options] PROGRAM [ARGS...]; see ddprun --help)"});
    if (b.error()) return std::unexpected(*b.error());

    std::size_t at = *scanned.program_index;
    config.program = args[at];
    config.args.assign(args.begin() + static_cast<std::ptrdiff_t>(at) + 1, args.end());
    if (config.program.empty())
        return std::unexpected(
            UsageError{"the program name is empty (usage: ddprun [options] PROGRAM [ARGS...])"});
    config.forward_signals.clear();
    for (int signal : {SIGUSR1, SIGUSR2})
        if (std::find(config.stop_signals.begin(), config.stop_signals.end(), signal) ==
            config.stop_signals.end())
            config.forward_signals.push_back(signal);
    if (module)
        config.program_kind = ProgramKind::PythonModule;
    else if (config.program.ends_with(".py") && !no_python)
        config.program_kind = ProgramKind::PythonFile;
    return config;
}

// Fills what the user left open from the scheduler's environment (Slurm,
// mpirun, Kubeflow): flag > DDPRUN_<NAME> > PET_<NAME> > scheduler > default.
// A detected value goes through the same parsers and checks as a flag, under
// the name of the variable it came from, so a bad one reads e.g.
// "SLURM_NODEID=3: must be less than the number of nodes (2)". `detected`
// gets each filled option's source for the log and --dry-run.
std::expected<LaunchDefaults, UsageError> add_scheduler_values(
    Settings& settings, const Environment& env, std::map<std::string_view, std::string>& detected) {
    GivenValues given;
    for (const auto& [name, setting] : settings)
        given.emplace(std::string(name), setting.bare_flag ? std::string("1") : setting.value);
    auto defaults = detect_launch_environment(env, given);
    if (!defaults) return std::unexpected(defaults.error());
    const std::pair<std::string_view, const std::optional<DetectedValue>*> values[] = {
        {"nnodes", &defaults->nnodes},
        {"node_rank", &defaults->node_rank},
        {"nproc_per_node", &defaults->nproc_per_node},
        {"master_addr", &defaults->master_addr},
        {"master_port", &defaults->master_port},
    };
    for (const auto& [name, value] : values) {
        if (!*value || settings.contains(name)) continue;
        settings.emplace(name, Setting{(*value)->variable, (*value)->value, false});
        detected.emplace(name, (*value)->source);
    }
    return defaults;
}

std::string nproc_text(const NprocSpec& spec) {
    switch (spec.kind) {
        case NprocKind::Gpu:
            return "gpu";
        case NprocKind::Cpu:
            return "cpu";
        case NprocKind::Auto:
            return "auto";
        case NprocKind::Count:
            break;
    }
    return std::to_string(spec.count);
}

// "value (source)" for the values that place this node in the job.
std::vector<std::pair<std::string, std::string>> describe_sources(
    const LaunchConfig& config, const Settings& settings,
    const std::map<std::string_view, std::string>& detected) {
    auto source = [&](std::string_view name) -> std::string {
        if (auto it = detected.find(name); it != detected.end()) return it->second;
        if (auto it = settings.find(name); it != settings.end())
            return it->second.label.starts_with('-') ? "flag " + it->second.label
                                                     : it->second.label;
        return "default";
    };
    // --standalone overrides the node count and the master address.
    auto shaped = [&](std::string_view name) {
        return config.standalone && !settings.contains(name) ? source("standalone") : source(name);
    };
    auto entry = [](std::string_view name, const std::string& value, const std::string& from) {
        return std::pair{std::string(name), fmt::format("{} ({})", value, from)};
    };
    int port = config.master_port.value_or(0);
    return {
        entry("nnodes", std::to_string(config.nnodes), shaped("nnodes")),
        entry("node_rank",
              config.node_rank ? std::to_string(*config.node_rank) : "assigned at rendezvous",
              source("node_rank")),
        entry("nproc_per_node", nproc_text(config.nproc_per_node), source("nproc_per_node")),
        entry("master_addr", config.master_addr,
              config.standalone ? source("standalone") : source("master_addr")),
        entry("master_port", port == 0 ? "free port" : std::to_string(port), source("master_port")),
    };
}

std::string help_text() {
    std::string text =
        "usage: ddprun [options] PROGRAM [ARGS...]\n"
        "       ddprun [options] -m MODULE [ARGS...]\n"
        "\n"
        "Starts --nproc_per_node workers of PROGRAM with torchrun's environment (RANK,\n"
        "WORLD_SIZE, ...), prefixes their output and stops the whole job when one fails.\n"
        "Everything after PROGRAM is passed to it untouched. *.py runs under $PYTHON_EXEC\n"
        "(default python3).\n";
    std::string_view section;
    for (const OptionSpec& spec : k_options) {
        if (spec.section.empty()) continue;
        if (spec.section != section) {
            section = spec.section;
            text += fmt::format("\n{}\n", section);
        }
        std::string names = spec.short_name != 0 ? fmt::format("-{}, ", spec.short_name) : "";
        names += fmt::format("--{}", spec.name);
        if (!is_flag(spec)) names += fmt::format(" {}", spec.value_name);
        if (names.size() > 34)
            text += fmt::format("  {}\n  {:34} {}\n", names, "", spec.help);
        else
            text += fmt::format("  {:34} {}\n", names, spec.help);
    }
    text +=
        "\nA flag not given is read from DDPRUN_<NAME>, then PET_<NAME> (e.g. PET_NNODES=2),\n"
        "then takes the default in [brackets]. LOGLEVEL=DEBUG|INFO|WARNING|ERROR|CRITICAL\n"
        "sets the verbosity when neither -v nor -q is given.\n"
        "\nUnder a scheduler, started once per node (srun --ntasks-per-node=1, mpirun -N 1, a\n"
        "Kubeflow PyTorchJob), the values not given come from its environment: nnodes, node_rank,\n"
        "master address and port, and under Slurm the step's GPUs. --dry-run shows each source.\n"
        "\nWith --numa-binding or --cpu-binding, each worker's OMP_NUM_THREADS defaults to the\n"
        "number of CPUs it is given; --dry-run shows them.\n";
    return text;
}

struct SignalName {
    std::string_view name;
    int number;
};

constexpr SignalName k_signal_names[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},     {"IOT", SIGIOT},   {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD},     {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},         {"POLL", SIGPOLL},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
};

std::string signal_name(int number) {
    for (const SignalName& entry : k_signal_names)
        if (entry.number == number) return fmt::format("SIG{}", entry.name);
    return fmt::format("signal {}", number);
}

}  // namespace

std::expected<std::vector<int>, UsageError> parse_signal_list(const std::string& value) {
    std::vector<int> signals;
    if (trim(value).empty())
        return std::unexpected(UsageError{"no signals listed (e.g. SIGTERM,SIGINT)"});
    for (std::string_view item : split(value, ',')) {
        item = trim(item);
        std::optional<int> number;
        if (auto integer = to_flag_integer(item)) {
            if (*integer >= 1 && *integer <= SIGRTMAX) number = static_cast<int>(*integer);
        } else {
            std::string upper = env_suffix(item);
            std::string_view name = upper;
            if (name.starts_with("SIG")) name.remove_prefix(3);
            for (const SignalName& entry : k_signal_names)
                if (entry.name == name) number = entry.number;
        }
        if (!number)
            return std::unexpected(UsageError{
                fmt::format("unknown signal '{}' (use names like SIGTERM or TERM, or numbers 1-{})",
                            item, SIGRTMAX)});
        if (*number == SIGKILL || *number == SIGSTOP)
            return std::unexpected(UsageError{
                fmt::format("{} cannot be handled (use e.g. SIGTERM)", signal_name(*number))});
        if (*number == SIGCHLD)
            return std::unexpected(UsageError{
                "SIGCHLD is how ddprun learns that workers exit; it cannot stop the job"});
        if (std::find(signals.begin(), signals.end(), *number) == signals.end())
            signals.push_back(*number);
    }
    return signals;
}

std::string closest_flag(const std::string& unknown) {
    std::string wanted = lower(unknown.substr(0, unknown.find('=')));
    wanted.erase(0, wanted.find_first_not_of('-'));
    std::replace(wanted.begin(), wanted.end(), '-', '_');
    if (wanted.size() < 2) return "";
    const OptionSpec* best = nullptr;
    std::size_t best_distance = 0;
    for (const OptionSpec& spec : k_options) {
        std::string name(spec.name);
        std::replace(name.begin(), name.end(), '-', '_');
        std::size_t distance = edit_distance(wanted, name);
        std::size_t allowed = std::clamp<std::size_t>(name.size() / 4, 1, 3);
        if (distance <= allowed && (best == nullptr || distance < best_distance)) {
            best = &spec;
            best_distance = distance;
        }
    }
    return best == nullptr ? "" : "--" + std::string(best->name);
}

std::expected<CommandLine, UsageError> parse_command_line(const std::vector<std::string>& args,
                                                          const Environment& env) {
    Scanned scanned = scan(args);

    CLI::App app{"ddprun"};
    app.set_help_flag();  // ours is a plain flag: CLI11's prints its own help and throws
    std::vector<CLI::Option*> parsed;
    for (const OptionSpec& spec : k_options) {
        std::string names = fmt::format("--{},--{}", spec.name, alternate_spelling(spec.name));
        if (spec.short_name != 0) names += fmt::format(",-{}", spec.short_name);
        CLI::Option* option = is_flag(spec) ? app.add_flag(names) : app.add_option(names);
        option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        parsed.push_back(option);
    }
    std::vector<std::string> reversed(scanned.options.rbegin(), scanned.options.rend());
    try {
        app.parse(reversed);
    } catch (const CLI::ParseError& error) {
        // scan() hands CLI11 only well-formed options, so this means the two
        // disagree: still one line, never CLI11's help.
        return std::unexpected(
            UsageError{fmt::format("cannot parse the options: {}", error.what())});
    }

    auto given = [&](std::string_view name) {
        for (std::size_t i = 0; i < std::size(k_options); ++i)
            if (k_options[i].name == name) return parsed[i]->count() > 0;
        return false;
    };
    CommandLine command_line;
    if (given("help")) {
        command_line.action = CommandLine::Action::PrintHelp;
        command_line.text = help_text();
        return command_line;
    }
    if (given("version")) {
        command_line.action = CommandLine::Action::PrintVersion;
        command_line.text = "ddprun " DDPRUN_VERSION;
        return command_line;
    }
    if (scanned.error) return std::unexpected(*scanned.error);

    Settings settings = gather_settings(parsed, scanned, env);
    std::map<std::string_view, std::string> detected;
    auto defaults = add_scheduler_values(settings, env, detected);
    if (!defaults) return std::unexpected(defaults.error());
    auto config = build_config(settings, parsed, args, scanned, env);
    if (!config) return std::unexpected(config.error());
    config->scheduler = defaults->scheduler;
    config->value_sources = describe_sources(*config, settings, detected);
    command_line.config = std::move(*config);
    return command_line;
}

Environment environment_from(char** envp) {
    Environment env;
    for (char** entry = envp; entry != nullptr && *entry != nullptr; ++entry) {
        std::string_view text = *entry;
        auto equals = text.find('=');
        if (equals == std::string_view::npos) continue;
        env.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
    }
    return env;
}

}  // namespace ddprun
