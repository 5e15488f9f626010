// ddprun's entry point: parse, check what can be checked before anything
// starts, then hand over to the supervisor and agent. Maps every outcome to
// one of the documented exit codes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ddprun/agent.hpp"
#include "ddprun/binding.hpp"
#include "ddprun/cli.hpp"
#include "ddprun/devices.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/logging.hpp"
#include "ddprun/program.hpp"
#include "ddprun/rank_plan.hpp"
#include "ddprun/scheduler_env.hpp"
#include "ddprun/supervisor.hpp"

extern char** environ;

namespace {

using namespace ddprun;

int report_usage(const std::string& message) {
    std::fprintf(stderr, "ddprun: error: %s\n", message.c_str());
    return exit_code::kUsage;
}

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
    return name;
}

// A private directory for error files (and -r/-t logs without --log_dir).
std::string make_temp_dir(const Environment& env, const char* stem) {
    auto it = env.find("TMPDIR");
    std::string tmpl = (it != env.end() && !it->second.empty() ? it->second : "/tmp");
    tmpl += std::string("/") + stem + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) return {};
    return buf.data();
}

int dry_run(const LaunchConfig& config, const NodeResources& resources, int nproc,
            const Environment& env, const std::vector<BindingPlan>& bindings) {
    std::vector<WorkerSpec> all;
    RoundInfo round;
    round.nproc_per_node.assign(static_cast<std::size_t>(config.nnodes), nproc);
    round.master_addr = config.master_addr;
    round.master_port = config.master_port.value_or(0);
    for (int node = 0; node < config.nnodes; ++node) {
        round.node_rank = node;
        auto specs = plan_node(config, resources, round, env, "", bindings);
        all.insert(all.end(), specs.begin(), specs.end());
    }
    std::string master =
        config.master_addr + ":" +
        (round.master_port ? std::to_string(round.master_port) : std::string("<free port>"));
    std::printf("ddprun: %s\n", describe_value_sources(config).c_str());
    std::fputs(format_plan(config, all, master).c_str(), stdout);
    return exit_code::kSuccess;
}

}  // namespace

int main(int argc, char** argv) {
    Environment env = environment_from(environ);
    std::vector<std::string> args(argv + 1, argv + argc);
    auto command_line = parse_command_line(args, env);
    if (!command_line) return report_usage(command_line.error().message);
    if (command_line->action != CommandLine::Action::Run) {
        std::fputs(command_line->text.c_str(), stdout);
        return exit_code::kSuccess;
    }
    const LaunchConfig& config = command_line->config;
    setup_logging(config.verbosity);
    // Where the job's shape came from (flag, DDPRUN_/PET_, scheduler, default).
    if (!config.dry_run) {
        if (!config.scheduler.empty() || config.nnodes > 1)
            spdlog::info("{}", describe_value_sources(config));
        else
            spdlog::debug("{}", describe_value_sources(config));
    }

    AgentContext ctx;
    ctx.config = config;
    ctx.env = env;
    DeviceSources sources;
    // Binding needs each device's PCI bus id, which may cost an NVML start-up.
    sources.locate_inherited = config.numa_binding != NumaBinding::None;
    ctx.resources = node_resources(env, sources);
    ctx.host = config.local_addr.empty() ? host_name() : config.local_addr;
    if (ctx.resources.devices.empty())
        spdlog::debug("no GPU found and no CUDA_VISIBLE_DEVICES: leaving it unset for workers");
    auto nproc = resolve_nproc(config.nproc_per_node, ctx.resources);
    if (!nproc) return report_usage(nproc.error().message);
    ctx.nproc = *nproc;
    auto bindings = plan_node_binding(config, ctx.resources, ctx.nproc);
    if (!bindings) return report_usage(bindings.error());
    ctx.bindings = std::move(*bindings);

    if (config.dry_run) return dry_run(config, ctx.resources, ctx.nproc, env, ctx.bindings);

    auto command = worker_command(config, env);
    auto executable = resolve_command(command, config, env);
    if (!executable) {
        std::fprintf(stderr, "ddprun: error: %s\n", executable.error().message.c_str());
        return executable.error().exit_code;
    }
    ctx.executable = *executable;

    ctx.log_dir = config.log_dir;
    bool wants_files = config.redirects.all || !config.redirects.per_rank.empty() ||
                       config.tee.all || !config.tee.per_rank.empty();
    if (ctx.log_dir.empty() && wants_files) {
        // As torchrun: redirected output must land somewhere; keep it in a temp dir.
        ctx.log_dir = make_temp_dir(env, "ddprun_logs_");
        spdlog::info("--redirects/--tee without --log_dir: worker logs go to {}", ctx.log_dir);
    }
    if (!ctx.log_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(ctx.log_dir, ec);
        if (ec || ::access(ctx.log_dir.c_str(), W_OK) != 0)
            return report_usage("--log_dir=" + ctx.log_dir + ": " +
                                (ec ? ec.message() : std::string("not writable")) +
                                "; choose a writable directory");
    }
    ctx.scratch_dir = make_temp_dir(env, "ddprun-");
    if (ctx.scratch_dir.empty()) {
        spdlog::error("cannot create a temporary directory (set TMPDIR to a writable one)");
        return exit_code::kInternal;
    }

    std::vector<int> forwarded = config.stop_signals;
    forwarded.insert(forwarded.end(), config.forward_signals.begin(), config.forward_signals.end());
    const std::string scratch = ctx.scratch_dir;
    auto remove_scratch = [&scratch] {
        std::error_code ec;
        std::filesystem::remove_all(scratch, ec);
    };
    // Both processes remove the scratch dir: the agent outlives a SIGKILLed supervisor, the
    // supervisor outlives a SIGKILLed agent.
    return supervise(
        [&] {
            int code = Agent(std::move(ctx)).run();
            remove_scratch();
            return code;
        },
        forwarded, remove_scratch);
}
