// --hosts / --hostfile and their companions, from the settings to
// LaunchConfig::fan_out (see config_builder.hpp): what they conflict with, and
// which of the options given the agents on the hosts get.
//
// Why this file exists: a launcher of agents reads the same command line as an
// agent, but keeps some options to itself and passes the rest on; that split
// is one decision, made here next to the list it is made from.

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "config_builder.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/fanout/fan_out.hpp"

namespace ddprun::cli {
namespace {

// Options the launcher keeps to itself, or sets per host, and so never passes
// on as given (see FanOutSettings::agent_options).
constexpr std::string_view k_launcher_options[] = {
    "hosts",       "hostfile",      "include",   "exclude",   "ssh-command",    "remote-ddprun",
    "env",         "lifeline",      "preflight", "dry-run",   "verbose",        "quiet",
    "help",        "version",       "nnodes",    "node_rank", "nproc_per_node", "local_addr",
    "master_addr", "rdzv_endpoint", "rdzv_id",   "config",    "write-config",
};

}  // namespace

// The hosts themselves are planned later (fan_out.cpp): a hostfile is read only then.
void resolve_fan_out(const GivenOptions& parsed, const Settings& settings, ConfigBuilder& b,
                     LaunchConfig& config) {
    FanOutSettings& fan = config.fan_out;
    b.set("hosts", fan.hosts, [](const Setting& s) { return parse_nonempty(s, "gpu[01-04]:8"); });
    b.set("hostfile", fan.hostfile,
          [](const Setting& s) { return parse_nonempty(s, "hostfile.txt"); });
    b.set("include", fan.include, [](const Setting& s) { return Parsed<std::string>(s.value); });
    b.set("exclude", fan.exclude, [](const Setting& s) { return Parsed<std::string>(s.value); });
    b.set("ssh-command", fan.ssh_command,
          [](const Setting& s) { return parse_nonempty(s, "'ssh -p 2222'"); });
    b.set("remote-ddprun", fan.remote_ddprun,
          [](const Setting& s) { return parse_nonempty(s, "/opt/ddprun/bin/ddprun"); });
    std::string env_origin;  // the job file's line, if it gave --env
    for (std::size_t i = 0; i < std::size(k_options); ++i) {
        if (k_options[i].name != "env") continue;
        env_origin = parsed[i].origin;
        for (const std::string& value : parsed[i].values) {
            std::string_view name = std::string_view(value).substr(0, value.find('='));
            if (!is_variable_name(name))
                b.fail(Setting{parsed[i].origin.empty() ? "--env" : "env", value, false,
                               parsed[i].origin}
                           .error_hint("not a variable name",
                                       "write NAME or NAME=VALUE, e.g. --env WANDB_API_KEY"));
            fan.env.push_back(value);
        }
    }
    if (b.error()) return;
    const char* const companions[] = {"include", "exclude", "ssh-command", "remote-ddprun"};
    if (!fan.given()) {
        for (const char* name : companions)
            if (const Setting* s = b.find(name))
                return b.fail(s->error_hint("is for a job started with --hosts or --hostfile",
                                            "add one, or drop it"));
        if (!fan.env.empty())
            return b.fail(usage_error(fmt::format(
                "{}: is for a job started with --hosts or --hostfile (add one, or drop it; "
                "a local job's workers inherit ddprun's environment)",
                env_origin.empty() ? "--env" : env_origin + ": env")));
        return;
    }
    const Setting* list = b.find(fan.hosts.empty() ? "hostfile" : "hosts");
    auto conflict = [&](std::string_view name, std::string_view hint) {
        if (const Setting* s = b.find(name))
            b.fail(s->error_hint(fmt::format("conflicts with {}", list->shown()), hint));
    };
    if (!fan.hosts.empty()) conflict("hostfile", "give the hosts one way: --hosts or --hostfile");
    conflict("node_rank", "the hosts are nodes 0, 1, ... in the order listed; drop the node rank");
    conflict("standalone", "standalone runs one node; drop one of them");
    conflict("lifeline", "--lifeline is what the launcher gives its agents; drop it");
    conflict("preflight", "--preflight is what the launcher gives its agents; drop it");
    if (!b.error() && config.elastic())
        b.fail(b.find("nnodes")->error_hint(
            fmt::format("an elastic job cannot be started with {}", list->shown()),
            "drop --nnodes: the host list sets it"));
    if (b.error()) return;
    fan.nnodes_given = settings.contains("nnodes");
    fan.master_addr_given = settings.contains("master_addr");
    fan.rdzv_endpoint_given = settings.contains("rdzv_endpoint");
    fan.rdzv_id_given = settings.contains("rdzv_id");
    for (const auto& [name, setting] : settings) {
        if (std::find(std::begin(k_launcher_options), std::end(k_launcher_options), name) !=
            std::end(k_launcher_options))
            continue;
        std::string flag = "--" + std::string(name);
        if (name == "report-lines") {
            for (const std::string& pattern : config.report_lines)
                fan.agent_options.push_back(flag + "=" + pattern);
            continue;
        }
        if (is_flag(*find_option(name))) {
            // A flag from the environment (DDPRUN_ALL_DEVICES=0) may be off.
            if (!setting.bare_flag && !parse_switch(setting).value_or(false)) continue;
            fan.agent_options.push_back(flag);
        } else {
            fan.agent_options.push_back(flag + "=" + setting.value);
        }
    }
}

}  // namespace ddprun::cli
