// ddprun's options and argv read against them: the option table, scanning
// argv the way torchrun's argparse does, suggestions for a mistyped flag, and
// --help. Pure: no I/O.
//
// Why this file exists: torchrun users must be able to switch to ddprun
// without changing a flag, and a mistake must come back as one line that
// names the flag and a fix, never as a parser dump. scan() finds where
// ddprun's options end (the program and everything after it are never looked
// at, let alone changed); cli.cpp then collects those options and
// turns them into a LaunchConfig.

#include "cli_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "cli_values.hpp"

namespace ddprun::cli {
namespace {

constexpr std::string_view k_torchrun = "torchrun flags (- and _ spellings both work):";
constexpr std::string_view k_ddprun = "ddprun flags:";
constexpr std::string_view k_status =
    "ddprun status [options]: a running job, read from its rendezvous (docs/status.md):";
constexpr std::string_view k_fan_out =
    "one command for the whole job, over ssh (docs/multi-node.md):";

// k_options (cli_options.hpp): the one list of options.
constexpr OptionSpec k_option_table[] = {
    {"nnodes", 0, "N", EnvDefault::Torchrun, k_torchrun,
     "number of nodes, or MIN:MAX for an elastic job [1]"},
    {"nproc_per_node", 0, "N|gpu|cpu|auto", EnvDefault::Torchrun, k_torchrun,
     "workers on this node [1]"},
    {"node_rank", 0, "RANK", EnvDefault::Torchrun, k_torchrun, "this node, 0..nnodes-1"},
    {"master_addr", 0, "ADDR", EnvDefault::Torchrun, k_torchrun,
     "MASTER_ADDR: where node 0's store listens [127.0.0.1]"},
    {"master_port", 0, "PORT", EnvDefault::Torchrun, k_torchrun,
     "MASTER_PORT; 0 picks a free port [a free port]"},
    {"local_addr", 0, "ADDR", EnvDefault::Torchrun, k_torchrun,
     "this node's address as the others reach it [hostname]"},
    {"rdzv_backend", 0, "static|c10d|etcd", EnvDefault::Torchrun, k_torchrun,
     "how the nodes meet [static]"},
    {"rdzv_endpoint", 0, "HOST[:PORT],...", EnvDefault::Torchrun, k_torchrun,
     "the store; etcd: its members [MASTER_ADDR:29400]"},
    {"rdzv_id", 0, "ID", EnvDefault::Torchrun, k_torchrun, "job id, the same on every node [none]"},
    {"rdzv_conf", 0, "KEY=VAL,...", EnvDefault::Torchrun, k_torchrun,
     "e.g. join_timeout=600,is_host=1 (etcd TLS, users: docs/etcd.md)"},
    {"standalone", 0, "", EnvDefault::Torchrun, k_torchrun,
     "one node with its own store (c10d, --nnodes=1)"},
    {"max_restarts", 0, "N", EnvDefault::Torchrun, k_torchrun,
     "restarts of the whole job after a failure [0]"},
    {"shutdown_timeout", 0, "SECS", EnvDefault::Torchrun, k_torchrun,
     "grace between SIGTERM and SIGKILL [30]", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
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
    {"log_line_prefix_template", 0, "TEMPLATE", EnvDefault::Torchrun, k_torchrun,
     "--log-prefix as torchrun writes it (${rank}: )", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"},
    {"duplicate_stdout_filters", 0, "TEXT,...", EnvDefault::Torchrun, k_torchrun,
     "tee'd lines holding one also go to filtered_stdout.log"},
    {"duplicate_stderr_filters", 0, "TEXT,...", EnvDefault::Torchrun, k_torchrun,
     "the same for stderr (and the failure summary)"},
    {"event_log_handler", 0, "null|console|dynamic_rendezvous", EnvDefault::Torchrun, k_torchrun,
     "console: the events as JSON lines on stderr [null]"},
    {"logs_specs", 0, "default", EnvDefault::None, k_torchrun,
     "the log files' layout: torchrun's default only"},
    {"numa-binding", 0, "node|socket|exclusive|core-complex", EnvDefault::Torchrun, k_torchrun,
     "pin each worker to the CPUs near its GPU [none]"},
    {"print_completion", 0, "bash|zsh|tcsh", EnvDefault::None, k_torchrun,
     "print a completion script for the shell"},
    {"run_path", 0, "", EnvDefault::Torchrun, k_torchrun,
     "run PROGRAM as a Python file whatever its name"},
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
    {"hang-timeout", 0, "SECS", EnvDefault::Ddprun, k_ddprun,
     "a rank silent on DDPRUN_PROGRESS_FD this long is hung [off]"},
    {"hang-timeout-first", 0, "SECS", EnvDefault::Ddprun, k_ddprun,
     "a worker must beat within SECS of its start [no bound]"},
    {"straggler-fraction", 0, "F", EnvDefault::Ddprun, k_ddprun,
     "a rank under F x the median step rate is a straggler [0.5]"},
    {"straggler-window", 0, "SECS", EnvDefault::Ddprun, k_ddprun,
     "how long a rank stays under it before it is named [60]"},
    {"max-no-progress-restarts", 0, "N", EnvDefault::Ddprun, k_ddprun,
     "stop (exit 78) after N restarts in a row without progress [off]"},
    {"progress-file", 0, "PATH", EnvDefault::Ddprun, k_ddprun,
     "a change to PATH (a checkpoint) is progress too"},
    {"health-check", 0, "CMD", EnvDefault::Ddprun, k_ddprun,
     "run CMD before each join: a node it fails stays out (exit 69)"},
    {"health-check-timeout", 0, "SECS", EnvDefault::Ddprun, k_ddprun,
     "a check running longer is killed and fails [60]"},
    {"collapse-lines", 0, "", EnvDefault::Ddprun, k_ddprun,
     "a line several ranks print alike shows once: [0-7]: ..."},
    {"collapse-window", 0, "SECS", EnvDefault::Ddprun, k_ddprun,
     "how long --collapse-lines holds a line for its twins [0.15]"},
    {"report-lines", 0, "REGEX", EnvDefault::Ddprun, k_ddprun,
     "a failed rank's matching stderr lines go in the summary"},
    {"log-prefix", 0, "TEMPLATE", EnvDefault::Ddprun, k_ddprun,
     "{rank} {local_rank} {node_rank} {host} {role} {round}"},
    {"event-log", 0, "PATH", EnvDefault::Ddprun, k_ddprun,
     "append this node's events as JSON lines (docs/events.md)"},
    {"metrics-port", 0, "PORT", EnvDefault::Ddprun, k_ddprun,
     "serve Prometheus /metrics and /healthz on PORT [off]", "TORCHELASTIC_HEALTH_CHECK_PORT"},
    {"config", 0, "FILE", EnvDefault::Ddprun, k_ddprun,
     "read options from a TOML or INI job file; a flag wins over it"},
    {"write-config", 0, "FILE", EnvDefault::None, k_ddprun,
     "write the options given as a job file, start nothing"},
    {"hosts", 0, "HOST[:SLOTS],...", EnvDefault::Ddprun, k_fan_out,
     "start an agent on each host (gpu[01-04]:8); the first is node 0"},
    {"hostfile", 0, "FILE", EnvDefault::Ddprun, k_fan_out,
     "hosts, one a line: 'host slots=N', 'host:N' or 'host'"},
    {"include", 0, "HOST[:SLOT,...]@...", EnvDefault::Ddprun, k_fan_out,
     "only these hosts or slots (DeepSpeed's syntax)"},
    {"exclude", 0, "HOST[:SLOT,...]@...", EnvDefault::Ddprun, k_fan_out,
     "every host and slot but these"},
    {"ssh-command", 0, "COMMAND", EnvDefault::Ddprun, k_fan_out,
     "how a host is reached [ssh]; with {host}: any tool (kubectl)"},
    {"remote-ddprun", 0, "PATH", EnvDefault::Ddprun, k_fan_out,
     "ddprun on the hosts [this ddprun's own path]"},
    {"env", 0, "NAME[=VALUE]", EnvDefault::None, k_fan_out,
     "pass this variable to the hosts too (repeatable)"},
    {"lifeline", 0, "", EnvDefault::None, k_fan_out,
     "an agent of --hosts: stop the job when stdin closes"},
    {"preflight", 0, "", EnvDefault::None, k_fan_out,
     "an agent of --hosts: check this node can run the job"},
    {"watch", 0, "", EnvDefault::None, k_status, "refresh every 2 s until the job ends"},
    {"json", 0, "", EnvDefault::None, k_status, "one JSON object (with --watch: a line each)"},
    {"verbose", 'v', "", EnvDefault::None, k_ddprun, "more output (-vv: even more)"},
    {"quiet", 'q', "", EnvDefault::None, k_ddprun, "errors only"},
    {"version", 0, "", EnvDefault::None, k_ddprun, "print the version"},
    {"help", 'h', "", EnvDefault::None, k_ddprun, "print this help"},
};

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

Error unknown_flag(const std::string& typed) {
    std::string suggestion = closest_flag(typed);
    if (!suggestion.empty())
        return usage_error(fmt::format("unknown flag {} (did you mean {}?)", typed, suggestion));
    return usage_error(fmt::format(
        "unknown flag {} (see ddprun --help; the program's own flags go after the program)",
        typed));
}

// A long name as typed (without "--"): exact in either spelling, else a unique
// prefix, as torchrun's argparse accepts "--nproc" for "--nproc_per_node".
std::expected<const OptionSpec*, Error> find_long(std::string_view name) {
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
    return std::unexpected(usage_error(
        fmt::format("ambiguous flag --{} (could be {}; spell it out)", name, candidates)));
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

}  // namespace

// A span, so that the table stays here next to the code that reads it.
constinit const std::span<const OptionSpec> k_options = k_option_table;

const OptionSpec* find_option(std::string_view name) {
    for (const OptionSpec& spec : k_options)
        if (spec.name == name) return &spec;
    return nullptr;
}

std::string alternate_spelling(std::string_view name) {
    std::string other(name);
    bool dashed = other.find('-') != std::string::npos;
    std::replace(other.begin(), other.end(), dashed ? '-' : '_', dashed ? '_' : '-');
    return other;
}

// Walks the options the way argparse would, stopping at the first
// argument that is not an option (or after "--"). Knowing exactly where the
// options end is what keeps the program's arguments untouched; an unknown
// flag is reported, never mistaken for the program.
Scanned scan(const std::vector<std::string>& args) {
    Scanned out;
    auto fail = [&out](Error error) {
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
                    fail(
                        usage_error(fmt::format("{}: takes no value (write just {})", arg, typed)));
                out.options.push_back(canonical);
            } else if (equals != std::string::npos || i + 1 < args.size()) {
                out.options.push_back(canonical);
                out.options.push_back(equals != std::string::npos ? arg.substr(equals + 1)
                                                                  : args[++i]);
            } else {
                fail(usage_error(fmt::format("{}: missing value (e.g. {}={})", typed, typed,
                                             example_for(**spec))));
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
                    fail(usage_error(fmt::format("{}: missing value (e.g. {} {})", typed, typed,
                                                 example_for(*spec))));
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

std::string help_text() {
    std::string text =
        "usage: ddprun [options] PROGRAM [ARGS...]\n"
        "       ddprun [options] -m MODULE [ARGS...]\n"
        "       ddprun status [rendezvous options] [--watch] [--json]\n"
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
        "then torchrun's own variable where it has one (TORCH_ELASTIC_SHUTDOWN_TIMEOUT,\n"
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; TORCHELASTIC_HEALTH_CHECK_PORT is\n"
        "--metrics-port's), then takes the default in [brackets].\n"
        "LOGLEVEL=DEBUG|INFO|WARNING|ERROR|CRITICAL sets the verbosity when neither -v nor -q\n"
        "is given.\n"
        "\nUnder a scheduler, started once per node (srun --ntasks-per-node=1, mpirun -N 1, a\n"
        "Kubeflow PyTorchJob), the values not given come from its environment: nnodes, node_rank,\n"
        "master address and port, and under Slurm the step's GPUs. --dry-run shows each source.\n"
        "\nWith --numa-binding or --cpu-binding, each worker's OMP_NUM_THREADS defaults to the\n"
        "number of CPUs it is given; --dry-run shows them.\n";
    return text;
}

}  // namespace ddprun::cli

namespace ddprun {

std::string closest_flag(const std::string& unknown) {
    using namespace cli;
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

}  // namespace ddprun
