// The command line, the job file and environment defaults -> a validated
// LaunchConfig.
//
// Why this file exists: torchrun users must be able to switch to ddprun
// without changing a flag, and a mistake must come back as one line that
// names the flag (or variable, or job file line), the value and a fix, never
// as a parser dump. The work is in three steps: scan() (cli_options.cpp)
// finds where ddprun's options end (the program and everything after it are
// never looked at, let alone changed) and puts them in canonical form,
// parse_options() (cli_parse.cpp: CLI11) keeps each option's values and
// reads the job file, and the rest, here, resolves environment defaults
// (DDPRUN_<NAME>, PET_<NAME>, then what a scheduler's variables say, see
// scheduler_env.hpp) and validates every value with the parsers of
// cli_values.cpp. The environment comes in as a map.

#include "ddprun/cli/cli.hpp"
#include "ddprun/base/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <iterator>
#include <optional>
#include <utility>

#include "cli_options.hpp"
#include "cli_parse.hpp"
#include "cli_values.hpp"
#include "config_builder.hpp"
#include "ddprun/fanout/fan_out.hpp"
#include "ddprun/scheduler/scheduler_env.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "unknown"
#endif

namespace ddprun::cli {
namespace {

constexpr std::string_view k_default_signals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// What was given on the command line, else in the job file, else in
// DDPRUN_<NAME>, else in PET_<NAME>, else in the torch variable torchrun 2.14
// reads for it (OptionSpec::torch_variable). An empty variable counts as unset (job
// templates often export empty ones), except for the log prefix, where empty
// means "no prefix".
Settings gather_settings(const GivenOptions& parsed, const Scanned& scanned,
                         const Environment& env) {
    Settings settings;
    for (std::size_t i = 0; i < std::size(k_options); ++i) {
        const OptionSpec& spec = k_options[i];
        if (!parsed[i].origin.empty()) {  // a job file's `all-devices = false` still counts
            settings.emplace(spec.name, Setting{std::string(spec.name), parsed[i].values.back(),
                                                false, parsed[i].origin});
            continue;
        }
        if (parsed[i].count > 0 && scanned.spelling.contains(spec.name)) {
            Setting setting{scanned.spelling.at(spec.name), "", is_flag(spec)};
            if (!is_flag(spec)) setting.value = parsed[i].values.back();
            settings.emplace(spec.name, std::move(setting));
            continue;
        }
        std::vector<std::string> variables;
        if (spec.env != EnvDefault::None) variables.push_back("DDPRUN_" + env_suffix(spec.name));
        if (spec.env == EnvDefault::Torchrun) variables.push_back("PET_" + env_suffix(spec.name));
        if (!spec.torch_variable.empty()) variables.emplace_back(spec.torch_variable);
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

void resolve_verbosity(const GivenOptions& parsed, const Environment& env, ConfigBuilder& builder,
                       LaunchConfig& config) {
    auto count_of = [&parsed](std::string_view name) {
        for (std::size_t i = 0; i < std::size(k_options); ++i)
            if (k_options[i].name == name) return parsed[i].count;
        return std::size_t{0};
    };
    std::size_t verbose = count_of("verbose");
    std::size_t quiet = count_of("quiet");
    if (verbose > 0 && quiet > 0) {
        builder.fail(usage_error("-q/--quiet with -v/--verbose: pick one"));
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

std::expected<LaunchConfig, Error> build_config(const Settings& settings,
                                                const GivenOptions& parsed,
                                                const std::vector<std::string>& args,
                                                const Scanned& scanned, const Environment& env) {
    LaunchConfig config;
    ConfigBuilder b(settings);
    bool standalone = false, module = false, no_python = false, run_path = false;
    bool use_env = false;
    double monitor_interval = config.monitor_interval;
    double shutdown_seconds = 30;
    config.stop_signals = *parse_signal_list(std::string(k_default_signals));

    b.set("run_path", run_path, parse_switch);
    NnodesRange nnodes;
    b.set("nnodes", nnodes, parse_nnodes);
    config.min_nnodes = nnodes.min;
    config.nnodes = nnodes.max;
    // Before --node_rank is checked against --nnodes: with --hosts, the host list sets both.
    std::vector<std::string> report_patterns;  // --report-lines: every value, not the last
    for (std::size_t i = 0; i < std::size(k_options); ++i)
        if (k_options[i].name == "report-lines") report_patterns = parsed[i].values;
    resolve_report_lines(report_patterns, b, config);  // before the agents' options are written
    resolve_fan_out(parsed, settings, b, config);
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
    b.set("rdzv_conf", config.rendezvous, parse_rdzv_conf);
    if (!b.error() && config.rdzv_backend != "etcd" &&
        config.rdzv_endpoint.find(',') != std::string::npos)
        b.fail(b.find("rdzv_endpoint")
                   ->error_hint("several endpoints are the members of an etcd cluster",
                                "add --rdzv_backend=etcd, or give one HOST:PORT"));
    if (!b.error() && config.rdzv_backend != "etcd" && config.rendezvous.etcd.given())
        b.fail(b.find("rdzv_conf")
                   ->error_hint("protocol=https, ca_cert, ssl_cert, ssl_cert_key, user and "
                                "password_file are for the etcd backend",
                                "add --rdzv_backend=etcd, or drop them"));
    if (standalone) {
        config.standalone = true;
        config.rdzv_backend = "c10d";
        config.nnodes = config.min_nnodes = 1;
        config.master_addr = "127.0.0.1";
    }
    b.set("node_rank", config.node_rank,
          [](const Setting& s) { return parse_int(s, 0, k_max_nnodes - 1, "0"); });
    if (!b.error() && config.node_rank && *config.node_rank >= config.nnodes)
        b.fail(b.find("node_rank")
                   ->error(fmt::format("must be less than the number of nodes ({})", config.nnodes),
                           "0"));
    if (!config.node_rank && config.nnodes == 1) config.node_rank = 0;
    // As torchrun's c10d rendezvous: an elastic job assigns node ranks at every round, so a
    // given one (a flag, PET_NODE_RANK, a scheduler's) is ignored; --dry-run says so.
    if (config.elastic()) config.node_rank.reset();

    b.set("max_restarts", config.max_restarts,
          [](const Setting& s) { return parse_int(s, 0, INT_MAX, "3"); });
    b.set("monitor_interval", monitor_interval,
          [](const Setting& s) { return parse_seconds(s, false, "0.1"); });
    config.monitor_interval = monitor_interval;
    b.set("shutdown_timeout", shutdown_seconds,
          [](const Setting& s) { return parse_seconds(s, true, "30"); });
    config.shutdown_timeout = std::chrono::milliseconds(std::llround(shutdown_seconds * 1000));
    b.set("signals_to_handle", config.stop_signals, parse_signals);
    resolve_supervision(b, config);  // hangs, progress, the console (cli_supervision.cpp)
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
    // torchrun's --run_path runs the program as a Python file (runpy.run_path in each
    // worker) whatever its name: a worker `python3 -u PROGRAM` does the same.
    const std::pair<const char*, bool> python_kinds[] = {{"module", module},
                                                         {"no_python", no_python}};
    for (const auto& [other, on] : python_kinds)
        if (run_path && on)
            b.fail(b.find(other)->error_hint(
                fmt::format("cannot be combined with {}", b.find("run_path")->shown()),
                "--run_path runs the program as a Python file; drop one of them"));
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
    b.set("lifeline", config.lifeline, parse_switch);
    b.set("preflight", config.preflight, parse_switch);

    b.set("log_dir", config.log_dir, [](const Setting& s) { return Parsed<std::string>(s.value); });
    b.set("redirects", config.redirects, parse_streams);
    b.set("tee", config.tee, parse_streams);
    b.set("local_ranks_filter", config.local_ranks_filter, parse_rank_filter);
    b.set("log-prefix", config.log_prefix, parse_log_prefix);
    b.set("event-log", config.event_log,
          [](const Setting& s) { return parse_nonempty(s, "/var/log/ddprun/events.jsonl"); });
    b.set("metrics-port", config.metrics_port, parse_port);
    resolve_torchrun_options(b, config);  // after --log-prefix and --event-log
    resolve_verbosity(parsed, env, b, config);

    if (scanned.status) {
        if (b.error()) return std::unexpected(*b.error());
        if (scanned.program_index)
            return std::unexpected(usage_error(fmt::format(
                "ddprun status takes no program ('{}'): it reads a job that runs already; drop "
                "it (usage: ddprun status [rendezvous options] [--watch] [--json])",
                args[*scanned.program_index])));
        return config;
    }
    for (std::string_view name : {"watch", "json"})
        if (scanned.spelling.contains(name))
            return std::unexpected(usage_error(fmt::format(
                "--{} is for `ddprun status` (e.g. ddprun status --rdzv_id=ID --{})", name, name)));
    // --write-config alone writes the job file: a program is not part of it.
    const bool write_only = b.find("write-config") != nullptr && !config.dry_run;
    if (!b.error() && !scanned.program_index && write_only) return config;
    if (!b.error() && !scanned.program_index)
        b.fail(
            usage_error("no program to run (usage: ddprun [options] PROGRAM [ARGS...]; see ddprun "
                        "--help)"));
    if (b.error()) return std::unexpected(*b.error());

    std::size_t at = *scanned.program_index;
    config.program = args[at];
    config.args.assign(args.begin() + static_cast<std::ptrdiff_t>(at) + 1, args.end());
    if (config.program.empty())
        return std::unexpected(
            usage_error("the program name is empty (usage: ddprun [options] PROGRAM [ARGS...])"));
    config.forward_signals.clear();
    for (int signal : {SIGUSR1, SIGUSR2})
        if (std::find(config.stop_signals.begin(), config.stop_signals.end(), signal) ==
            config.stop_signals.end())
            config.forward_signals.push_back(signal);
    if (module)
        config.program_kind = ProgramKind::PythonModule;
    else if (run_path || (config.program.ends_with(".py") && !no_python))
        config.program_kind = ProgramKind::PythonFile;
    return config;
}

// Fills what the user left open from the scheduler's environment (Slurm,
// mpirun, Kubeflow): flag > DDPRUN_<NAME> > PET_<NAME> > scheduler > default.
// A detected value goes through the same parsers and checks as a flag, under
// the name of the variable it came from, so a bad one reads e.g.
// "SLURM_NODEID=3: must be less than the number of nodes (2)". `detected`
// gets each filled option's source for the log and --dry-run.
std::expected<LaunchDefaults, Error> add_scheduler_values(
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
        {"rdzv_endpoint", &defaults->rdzv_endpoint},
        {"rdzv_id", &defaults->rdzv_id},
    };
    for (const auto& [name, value] : values) {
        if (!*value || settings.contains(name)) continue;
        settings.emplace(name, Setting{(*value)->variable, (*value)->value, false});
        detected.emplace(name, (*value)->source);
    }
    return defaults;
}

// "value (source)" for the values that place this node in the job.
std::vector<std::pair<std::string, std::string>> describe_sources(
    const LaunchConfig& config, const Settings& settings,
    const std::map<std::string_view, std::string>& detected) {
    auto source = [&](std::string_view name) -> std::string {
        if (auto it = detected.find(name); it != detected.end()) return it->second;
        if (auto it = settings.find(name); it != settings.end()) {
            const Setting& setting = it->second;
            if (!setting.origin.empty()) return setting.origin;
            return setting.label.starts_with('-') ? "flag " + setting.label : setting.label;
        }
        return "default";
    };
    // --standalone overrides the node count and the master address.
    auto standalone = [&] {
        auto it = settings.find("standalone");
        return it != settings.end() && !it->second.origin.empty()
                   ? "standalone at " + it->second.origin
                   : source("standalone");
    };
    auto shaped = [&](std::string_view name) {
        return config.standalone && !settings.contains(name) ? standalone() : source(name);
    };
    auto entry = [](std::string_view name, const std::string& value, const std::string& from) {
        return std::pair{std::string(name), fmt::format("{} ({})", value, from)};
    };
    int port = config.master_port.value_or(0);
    std::vector<std::pair<std::string, std::string>> sources = {
        entry("nnodes", nnodes_text(config.min_nnodes, config.nnodes), shaped("nnodes")),
        entry("node_rank",
              config.node_rank ? std::to_string(*config.node_rank) : "assigned at rendezvous",
              config.elastic() && settings.contains("node_rank")
                  ? source("node_rank") + ", ignored: an elastic job assigns node ranks"
                  : source("node_rank")),
        entry("nproc_per_node", nproc_text(config.nproc_per_node), source("nproc_per_node")),
        entry("master_addr", config.master_addr,
              config.standalone ? standalone() : source("master_addr")),
        entry("master_port", port == 0 ? "free port" : std::to_string(port), source("master_port")),
    };
    // What keeps concurrent jobs apart, when the scheduler's ids chose it.
    if (detected.contains("rdzv_endpoint"))
        sources.push_back(entry("rdzv_endpoint", config.rdzv_endpoint, source("rdzv_endpoint")));
    if (detected.contains("rdzv_id"))
        sources.push_back(entry("rdzv_id", config.rdzv_id, source("rdzv_id")));
    // Everything else the job file set, so that --dry-run shows what it changed.
    if (const auto file = settings.find("config"); file != settings.end()) {
        std::string set;
        using Source = std::pair<std::string, std::string>;
        for (const auto& [name, setting] : settings)
            if (!setting.origin.empty() &&
                std::ranges::find(sources, name, &Source::first) == sources.end())
                set += fmt::format("{}{}", set.empty() ? "" : " ", name);
        sources.push_back(entry("config", file->second.value,
                                source("config") + (set.empty() ? "" : "; also sets " + set)));
    }
    return sources;
}

}  // namespace
}  // namespace ddprun::cli

namespace ddprun {

std::expected<CommandLine, Error> parse_command_line(const std::vector<std::string>& args,
                                                     const Environment& env, bool (*ignored)(int)) {
    using namespace cli;
    // `ddprun status`: the rest are the job's options (its rendezvous), and no program.
    // (A launch reads `args` as they are: no copy on the start-up path.)
    const bool status = !args.empty() && args.front() == "status";
    const std::vector<std::string> after_status =
        status ? std::vector<std::string>(args.begin() + 1, args.end())
               : std::vector<std::string>{};
    const std::vector<std::string>& options = status ? after_status : args;
    Scanned scanned = scan(options);
    scanned.status = status;
    // Not read for --help or --version, nor after a malformed flag.
    const bool asks_for_text =
        std::any_of(scanned.options.begin(), scanned.options.end(), [](const std::string& item) {
            return item == "--help" || item == "-h" || item == "--version";
        });
    auto parsed_options = parse_options(
        scanned, scanned.error || asks_for_text ? std::nullopt : job_file_of(scanned, env));
    if (!parsed_options) return std::unexpected(parsed_options.error());
    const GivenOptions& parsed = parsed_options->given;
    auto given = [&](std::string_view name) {
        for (std::size_t i = 0; i < std::size(k_options); ++i)
            if (k_options[i].name == name) return parsed[i].count > 0;
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
    // torchrun's --print-completion prints and exits, whatever else the line says.
    if (const auto* shell = last_value(parsed, "print_completion")) {
        auto script = completion_script(*shell);
        if (!script) return std::unexpected(script.error());
        command_line.action = CommandLine::Action::PrintHelp;
        command_line.text = std::move(*script);
        return command_line;
    }

    Settings settings = gather_settings(parsed, scanned, env);
    if (status) {
        // A reader is no node: the job's shape is not its to detect (a scheduler's
        // variables describe the reader's own step), only where the job's store is.
        command_line.rendezvous_given = settings.contains("rdzv_endpoint") ||
                                        settings.contains("rdzv_id") ||
                                        settings.contains("master_addr");
        for (std::string_view name : {"nnodes", "node_rank", "nproc_per_node"})
            settings.erase(name);
        settings.emplace("nnodes", Setting{"nnodes", "1"});
    }
    std::map<std::string_view, std::string> detected;
    auto defaults = add_scheduler_values(settings, env, detected);
    if (!defaults) return std::unexpected(defaults.error());
    auto config = build_config(settings, parsed, options, scanned, env);
    if (!config) return std::unexpected(config.error());
    if (status) {
        command_line.action = CommandLine::Action::ShowStatus;
        command_line.watch = given("watch");
        command_line.json = given("json");
    }
    if (!settings.contains("signals_to_handle")) leave_ignored_signals(*config, ignored);
    config->scheduler = defaults->scheduler;
    config->value_sources = describe_sources(*config, settings, detected);
    command_line.config = std::move(*config);
    if (auto write = settings.find("write-config"); write != settings.end()) {
        command_line.write_config = write->second.value;
        command_line.job_file = std::move(parsed_options->job_file_text);
    }
    return command_line;
}

}  // namespace ddprun
