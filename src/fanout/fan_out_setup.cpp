// The plan of `ddprun --hosts` (fan_out_setup.hpp): the host list (--hosts or
// --hostfile, --include/--exclude), each host's .ddprunenv and worker count,
// the job's run id and store, read before anything starts.
#include "fan_out_setup.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/fanout/job_secret.hpp"
#include "ddprun/workers/program.hpp"

namespace ddprun {
namespace {

std::string read_file(const std::string& path, std::string& error) {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        error = std::strerror(errno);
        return "";
    }
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

std::string fresh_run_id() {
    std::random_device random;
    return fmt::format("hosts-{:08x}{:04x}", random(), random() & 0xffff);
}

// A port for node 0's store, below Linux's ephemeral range (32768 and up) so that
// no outgoing connection holds it; node 0's preflight checks it is free.
int random_store_port() {
    std::random_device random;
    return 20000 + static_cast<int>(random() % 12000);
}

std::expected<std::vector<PlannedHost>, PlanError> plan_hosts(const LaunchConfig& config) {
    const FanOutSettings& fan = config.fan_out;
    std::expected<std::vector<PlannedHost>, std::string> hosts;
    if (!fan.hostfile.empty()) {
        std::string error;
        std::string text = read_file(fan.hostfile, error);
        if (!error.empty())
            return std::unexpected(
                PlanError{exit_code::kUsage,
                          fmt::format("--hostfile {}: cannot read it ({})", fan.hostfile, error)});
        hosts = parse_hostfile(text);
        if (!hosts)
            return std::unexpected(
                PlanError{exit_code::kUsage, fmt::format("{}: {}", fan.hostfile, hosts.error())});
    } else {
        hosts = parse_hosts_flag(fan.hosts);
        if (!hosts) return std::unexpected(PlanError{exit_code::kUsage, hosts.error()});
    }
    // Excluding single slots needs each host's count: a numeric --nproc_per_node gives it.
    if (config.nproc_per_node.kind == NprocKind::Count)
        for (PlannedHost& host : *hosts)
            if (!host.slots) host.slots = config.nproc_per_node.count;
    auto selected = select_hosts(std::move(*hosts), fan.include, fan.exclude);
    if (!selected) return std::unexpected(PlanError{exit_code::kUsage, selected.error()});
    if (fan.nnodes_given && config.nnodes != static_cast<int>(selected->size()))
        return std::unexpected(PlanError{
            exit_code::kUsage,
            fmt::format("--nnodes={}: the job has {} host{} (drop --nnodes: the host list sets it)",
                        config.nnodes, selected->size(), selected->size() == 1 ? "" : "s")});
    return std::move(*selected);
}

std::string command_text(const std::vector<std::string>& argv) {
    std::string text;
    for (const std::string& word : argv) text += (text.empty() ? "" : " ") + shell_quote(word);
    return text;
}

}  // namespace

std::expected<FanOutPlan, PlanError> make_plan(const LaunchConfig& config, const Environment& env) {
    const FanOutSettings& fan = config.fan_out;
    FanOutPlan plan;
    auto hosts = plan_hosts(config);
    if (!hosts) return std::unexpected(hosts.error());
    plan.hosts = std::move(*hosts);
    for (const PlannedHost& host : plan.hosts)
        plan.nproc.push_back(host.devices.empty() && !host.slots
                                 ? nproc_text(config.nproc_per_node)
                                 : std::to_string(workers_on(host, 1)));

    const std::string ssh = fan.ssh_command.empty() ? "ssh" : fan.ssh_command;
    auto words = split_words(ssh);
    if (!words)
        return std::unexpected(PlanError{
            exit_code::kUsage, fmt::format("--ssh-command '{}': {}", ssh, words.error())});
    plan.launcher = std::move(*words);
    auto path = env.find("PATH");
    if (auto found = resolve_executable(plan.launcher[0],
                                        path == env.end() ? "/usr/bin:/bin" : path->second);
        !found)
        return std::unexpected(PlanError{
            exit_code::kUsage, fmt::format("--ssh-command '{}': {} (install the OpenSSH client: "
                                           "apt-get install openssh-client)",
                                           ssh, found.error().message)});

    std::error_code ec;
    plan.remote_ddprun = fan.remote_ddprun;
    // By default the same path as this one: a shared file system, or the same package
    // installed everywhere.
    if (plan.remote_ddprun.empty())
        plan.remote_ddprun = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (plan.remote_ddprun.empty())
        return std::unexpected(PlanError{
            exit_code::kUsage,
            fmt::format("cannot tell where this ddprun is ({}): give --remote-ddprun PATH",
                        ec.message())});
    plan.cwd = std::filesystem::current_path(ec).string();
    if (ec)
        return std::unexpected(
            PlanError{exit_code::kInternal,
                      fmt::format("cannot read the current directory: {}", ec.message())});

    // .ddprunenv: the home directory's, then the current directory's (it wins).
    std::vector<Variables> files;
    std::vector<std::string> paths;
    if (auto home = env.find("HOME"); home != env.end() && !home->second.empty())
        paths.push_back(home->second + "/.ddprunenv");
    paths.push_back(plan.cwd + "/.ddprunenv");
    if (paths.size() == 2 && std::filesystem::equivalent(paths[0], paths[1], ec)) paths.pop_back();
    for (const std::string& file : paths) {
        if (!std::filesystem::exists(file, ec)) continue;
        std::string error;
        std::string text = read_file(file, error);
        if (!error.empty())
            return std::unexpected(
                PlanError{exit_code::kUsage, fmt::format("{}: cannot read it ({})", file, error)});
        auto variables = parse_env_file(text, file);
        if (!variables) return std::unexpected(PlanError{exit_code::kUsage, variables.error()});
        files.push_back(std::move(*variables));
    }
    auto variables = remote_environment(env, files, fan.env);
    if (!variables) return std::unexpected(PlanError{exit_code::kUsage, variables.error()});
    plan.env = std::move(*variables);
    for (const auto& [name, value] : plan.env)
        if (name == k_secret_variable || name == k_secret_on_stdin_variable)
            return std::unexpected(PlanError{
                exit_code::kUsage,
                fmt::format("{} (--env or .ddprunenv) would put the job's secret on every "
                            "host's command line: the launcher hands the agents the secret "
                            "on their standard input; set it in the launcher's environment "
                            "or --rdzv_conf secret_file=PATH",
                            name)});
    plan.secret_on_stdin = true;

    plan.flags = fan.agent_options;
    plan.program.push_back(config.program);
    plan.program.insert(plan.program.end(), config.args.begin(), config.args.end());
    plan.master_addr = fan.master_addr_given ? config.master_addr : plan.hosts[0].name;
    plan.endpoint = fan.rdzv_endpoint_given
                        ? config.rdzv_endpoint
                        : fmt::format("{}:{}", plan.master_addr, random_store_port());
    plan.run_id = fan.rdzv_id_given ? config.rdzv_id : fresh_run_id();
    plan.verbosity = config.verbosity;
    return plan;
}

std::string dry_run_text(const FanOutPlan& plan) {
    std::string text = fmt::format("ddprun --hosts: {} host{}, run id {}, store at {}, master {}\n",
                                   plan.hosts.size(), plan.hosts.size() == 1 ? "" : "s",
                                   plan.run_id, plan.endpoint, plan.master_addr);
    for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
        text += fmt::format("node {} on {}: --nproc_per_node={}\n  {}\n", i, plan.hosts[i].name,
                            plan.nproc[i], command_text(host_argv(plan, i, RemoteMode::Run)));
    }
    text +=
        "Before they start, each host runs the same command with --preflight in place of "
        "--lifeline.\n";
    return text;
}

}  // namespace ddprun
