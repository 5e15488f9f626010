// Preparing and running one node's part of the job (see launch.hpp).
#include "ddprun/launch/launch.hpp"

#include <unistd.h>

#include <filesystem>

#include "ddprun/agent/agent.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/ports.hpp"
#include "ddprun/base/scratch_dir.hpp"
#include "ddprun/cluster/job_store.hpp"
#include "ddprun/devices/devices.hpp"
#include "ddprun/fanout/fan_out.hpp"
#include "ddprun/fanout/job_secret.hpp"
#include "ddprun/launch/supervisor.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/scheduler/scheduler_env.hpp"
#include "ddprun/workers/program.hpp"

namespace fs = std::filesystem;

namespace ddprun {
namespace {

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
    return name;
}

// A private directory under $TMPDIR (or /tmp): "" if none can be made.
std::string make_temp_dir(const Environment& env, const char* stem) {
    std::string tmpl = scratch_base(env) + "/" + stem + "XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) return {};
    return buf.data();
}

// --dry-run: every node's workers, assuming the others look like this one; an
// elastic job's at MIN and at MAX nodes.
std::string dry_run_plan(const LaunchContext& ctx) {
    const LaunchConfig& config = ctx.config;
    const int port = config.master_port.value_or(0);
    const std::string master =
        config.master_addr + ":" + (port ? std::to_string(port) : std::string("<free port>"));
    auto plan_at = [&](int nnodes) {
        std::vector<WorkerSpec> all;
        RoundInfo round;
        round.nproc_per_node.assign(static_cast<std::size_t>(nnodes), ctx.nproc);
        round.master_addr = config.master_addr;
        round.master_port = port;
        for (int node = 0; node < nnodes; ++node) {
            round.node_rank = node;
            auto specs = plan_node(config, ctx.resources, round, ctx.env, "", ctx.bindings);
            all.insert(all.end(), specs.begin(), specs.end());
        }
        return format_plan(config, all, master);
    };
    std::string plan = fmt::format("ddprun: {}\n", describe_value_sources(config));
    if (!config.elastic()) return plan + plan_at(config.nnodes);
    return plan +
           fmt::format(
               "elastic job (--nnodes={}): node ranks are assigned at every round; the plan at "
               "MIN and at MAX nodes follows\n\nat MIN: ",
               nnodes_text(config.min_nnodes, config.nnodes)) +
           plan_at(config.min_nnodes) + "\nat MAX: " + plan_at(config.nnodes);
}

Status prepare_log_dir(LaunchContext& ctx) {
    const LaunchConfig& config = ctx.config;
    ctx.log_dir = config.log_dir;
    bool wants_files = config.redirects.all || !config.redirects.per_rank.empty() ||
                       config.tee.all || !config.tee.per_rank.empty();
    if (ctx.log_dir.empty() && wants_files) {
        // As torchrun: redirected output must land somewhere; keep it in a temp dir.
        ctx.log_dir = make_temp_dir(ctx.env, "ddprun_logs_");
        if (ctx.log_dir.empty())
            return std::unexpected(usage_error(
                "--redirects/--tee without --log_dir: cannot create a temporary directory for "
                "the logs (set TMPDIR to a writable one, or pass --log_dir)"));
        spdlog::info("--redirects/--tee without --log_dir: worker logs go to {}", ctx.log_dir);
    }
    if (ctx.log_dir.empty()) return {};
    std::error_code ec;
    fs::create_directories(ctx.log_dir, ec);
    if (ec || ::access(ctx.log_dir.c_str(), W_OK) != 0)
        return std::unexpected(usage_error("--log_dir=" + ctx.log_dir + ": " +
                                           (ec ? ec.message() : std::string("not writable")) +
                                           "; choose a writable directory"));
    return {};
}

// The etcd backend's TLS files and password file, read now so that a wrong
// path is a usage error before anything starts, not a rendezvous failure later.
Status prepare_etcd_access(LaunchContext& ctx) {
    auto password = read_etcd_access(ctx.config.rdzv_backend, ctx.config.rendezvous.etcd);
    if (!password) return std::unexpected(password.error());
    ctx.etcd_password = std::move(*password);
    return {};
}

}  // namespace

std::expected<PreparedLaunch, Error> prepare_launch(const LaunchConfig& config,
                                                    const Environment& env) {
    // Where the job's shape came from (flag, DDPRUN_/PET_, scheduler, default).
    if (!config.dry_run && !config.preflight && !config.lifeline) {
        if (!config.scheduler.empty() || config.nnodes > 1)
            spdlog::info("{}", describe_value_sources(config));
        else
            spdlog::debug("{}", describe_value_sources(config));
    }
    PreparedLaunch prepared;
    LaunchContext& ctx = prepared.context;
    ctx.config = config;
    ctx.env = env;
    // Before anything else: a --hosts agent's secret is the lifeline's first line. Not
    // for the dry run, which neither needs nor shows it, nor a --hosts preflight (the
    // launcher holds the secret; a secret_file it was given may not exist on the host).
    if (!config.dry_run && !config.preflight) {
        auto secret = read_agent_secret(config, env);
        if (!secret) return std::unexpected(secret.error());
        ctx.rdzv_secret = std::move(*secret);
    }
    forget_secret_variables(ctx.env);  // never the workers'
    DeviceSources sources;
    // Binding needs each device's PCI bus id, which may cost an NVML start-up.
    sources.locate_inherited = config.numa_binding != NumaBinding::None;
    ctx.resources = node_resources(env, sources);
    ctx.host = config.local_addr.empty() ? host_name() : config.local_addr;
    // Under Slurm the node's Slurm name (n17) is what users and squeue know it by, and
    // may differ from the OS hostname; it names the node in messages and the summary.
    if (auto it = env.find("SLURMD_NODENAME"); config.local_addr.empty() &&
                                               config.scheduler == "slurm" && it != env.end() &&
                                               !it->second.empty())
        ctx.host = it->second;
    if (ctx.resources.devices.empty())
        spdlog::debug("no GPU found and no CUDA_VISIBLE_DEVICES: leaving it unset for workers");
    auto nproc = resolve_nproc(config.nproc_per_node, ctx.resources);
    if (!nproc) return std::unexpected(nproc.error());
    ctx.nproc = *nproc;
    auto bindings = plan_node_binding(config, ctx.resources, ctx.nproc);
    if (!bindings) return std::unexpected(usage_error(bindings.error()));
    ctx.bindings = std::move(*bindings);

    if (config.dry_run) {
        prepared.dry_run_plan = dry_run_plan(ctx);
        return prepared;
    }

    auto executable = resolve_command(worker_command(config, env), config, env);
    if (!executable) return std::unexpected(executable.error());
    ctx.executable = *executable;
    if (auto access = prepare_etcd_access(ctx); !access) return std::unexpected(access.error());
    if (config.preflight) return prepared;  // checked what the node needs; makes nothing
    if (auto logs = prepare_log_dir(ctx); !logs) return std::unexpected(logs.error());
    const std::string base = scratch_base(env);
    if (int removed = reclaim_scratch_dirs(base))
        spdlog::debug("removed {} scratch director{} of killed ddprun runs from {}", removed,
                      removed == 1 ? "y" : "ies", base);
    auto scratch = make_scratch_dir(base);
    if (!scratch) return std::unexpected(scratch.error());
    ctx.scratch_dir = *scratch;
    return prepared;
}

std::expected<std::string, Error> preflight_answer(const LaunchContext& ctx) {
    const LaunchConfig& config = ctx.config;
    const bool hosts_store = config.nnodes > 1 && config.rdzv_backend != "etcd" &&
                             config.node_rank == 0 && config.rendezvous.is_host.value_or(true);
    if (hosts_store) {
        auto endpoint =
            split_endpoint(config.rdzv_endpoint.empty() ? config.master_addr : config.rdzv_endpoint,
                           k_default_rdzv_port);
        if (!endpoint) return std::unexpected(endpoint.error());
        if (auto held = PortReservation::reserve(endpoint->port); !held)
            return std::unexpected(rendezvous_error(fmt::format(
                "node 0's rendezvous port {} is taken on {} ({}): give the job another with "
                "--rdzv_endpoint={}:PORT",
                endpoint->port, ctx.host, held.error().message, endpoint->host)));
    }
    return fmt::format("{}{} nproc={}\n", k_preflight_answer, DDPRUN_VERSION, ctx.nproc);
}

int run_launch(LaunchContext context) {
    const LaunchConfig& config = context.config;
    std::vector<int> forwarded = config.stop_signals;
    forwarded.insert(forwarded.end(), config.forward_signals.begin(), config.forward_signals.end());
    const std::string scratch = context.scratch_dir;
    auto remove_scratch = [&scratch] { remove_scratch_dir(scratch); };
    // Both processes remove the scratch dir: the agent outlives a SIGKILLed supervisor, the
    // supervisor outlives a SIGKILLed agent. The agent removes it as soon as the job's last
    // workers are reaped too (Agent::Impl::run_rounds), before its teardown; this is for
    // every other way out.
    return supervise(
        [&] {
            int code = Agent(std::move(context)).run();
            remove_scratch();
            return code;
        },
        forwarded, remove_scratch);
}

}  // namespace ddprun
