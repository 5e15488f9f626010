// The rank plan (see rank_plan.hpp): pure arithmetic and environment
// construction, so that every rule of the worker contract is unit-tested.
#include "ddprun/plan/rank_plan.hpp"

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/python_template.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/devices/topology.hpp"

#include <algorithm>
#include <numeric>

namespace ddprun {
namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += sep;
        out += items[i];
    }
    return out;
}

// Quotes a word for display when it holds anything a shell would split on.
std::string shell_word(const std::string& word) {
    if (!word.empty() && word.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~!") == std::string::npos)
        return word;
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

}  // namespace

std::expected<int, Error> resolve_nproc(const NprocSpec& spec, const NodeResources& resources) {
    const int ndevices = static_cast<int>(resources.devices.size());
    const std::string where =
        resources.devices_inherited ? "in the inherited CUDA_VISIBLE_DEVICES" : "on this machine";
    switch (spec.kind) {
        case NprocKind::Count:
            if (ndevices > 0 && spec.count > ndevices)
                return std::unexpected(usage_error(fmt::format(
                    "--nproc_per_node={}: more workers than the {} GPU{} {}; lower it, or use "
                    "--all-devices to give every worker every GPU",
                    spec.count, ndevices, ndevices == 1 ? "" : "s", where)));
            return spec.count;
        case NprocKind::Gpu:
            if (ndevices == 0)
                return std::unexpected(usage_error(
                    "--nproc_per_node=gpu: no GPU found (no CUDA_VISIBLE_DEVICES and no NVIDIA "
                    "driver); give a number, or use --nproc_per_node=cpu"));
            return ndevices;
        case NprocKind::Cpu:
            return std::max(1, resources.cpus);
        case NprocKind::Auto:
            return ndevices > 0 ? ndevices : std::max(1, resources.cpus);
    }
    return 1;
}

std::vector<std::string> worker_command(const LaunchConfig& config, const Environment& env) {
    std::vector<std::string> argv;
    if (config.program_kind != ProgramKind::Executable) {
        auto it = env.find("PYTHON_EXEC");
        argv.push_back(it != env.end() && !it->second.empty() ? it->second : "python3");
        argv.push_back("-u");
        if (config.program_kind == ProgramKind::PythonModule) argv.push_back("-m");
    }
    argv.push_back(config.program);
    argv.insert(argv.end(), config.args.begin(), config.args.end());
    return argv;
}

namespace {

// torchrun's one macro (torch.distributed.elastic.utils.macros): ${local_rank} in
// any argument after the command's first word, with Template.safe_substitute's rules
// (python_template.hpp), so "$$" is one "$" there as under torchrun.
void substitute_local_rank(std::vector<std::string>& argv, int local_rank) {
    const std::string value = std::to_string(local_rank);
    for (std::size_t i = 1; i < argv.size(); ++i)
        if (has_template_delimiter(argv[i]))
            argv[i] = substitute_python_template(
                argv[i], [&value](std::string_view name) -> std::optional<std::string> {
                    if (name == "local_rank") return value;
                    return std::nullopt;
                });
}

}  // namespace

int rank_offset(const std::vector<int>& nproc_per_node, int node_rank) {
    auto end =
        nproc_per_node.begin() + std::min<std::ptrdiff_t>(node_rank, std::ssize(nproc_per_node));
    return std::accumulate(nproc_per_node.begin(), end, 0);
}

std::vector<WorkerSpec> plan_node(const LaunchConfig& config, const NodeResources& resources,
                                  const RoundInfo& round, const Environment& inherited,
                                  const std::string& error_file_dir,
                                  const std::vector<BindingPlan>& bindings) {
    const int nnodes = static_cast<int>(round.nproc_per_node.size());
    const int local_world_size = round.nproc_per_node.at(static_cast<std::size_t>(round.node_rank));
    const int world_size =
        std::accumulate(round.nproc_per_node.begin(), round.nproc_per_node.end(), 0);
    const int offset = rank_offset(round.nproc_per_node, round.node_rank);
    const auto argv = worker_command(config, inherited);
    std::string signals_text;
    for (int signal : config.stop_signals)
        signals_text += (signals_text.empty() ? "" : ",") + signal_name(signal);
    const bool per_worker_device = !config.all_devices || config.virtual_local_rank;

    auto unless_set = [&](std::vector<std::pair<std::string, std::string>>& env,
                          const std::string& name, const std::string& value) {
        if (!inherited.contains(name)) env.emplace_back(name, value);
    };

    std::vector<WorkerSpec> workers;
    for (int local = 0; local < local_world_size; ++local) {
        WorkerSpec w;
        w.node_rank = round.node_rank;
        w.local_rank = local;
        w.rank = offset + local;
        w.world_size = world_size;
        w.local_world_size = local_world_size;
        w.argv = argv;
        substitute_local_rank(w.argv, local);
        if (local < std::ssize(bindings)) w.binding = bindings[static_cast<std::size_t>(local)];
        if (!resources.devices.empty()) {
            w.sets_devices = true;
            std::size_t index = static_cast<std::size_t>(local) % resources.devices.size();
            w.devices = per_worker_device ? resources.devices[index] : join(resources.devices, ",");
        }

        auto& env = w.env;
        env.emplace_back("RANK", std::to_string(w.rank));
        env.emplace_back("LOCAL_RANK", std::to_string(config.virtual_local_rank ? 0 : local));
        env.emplace_back("WORLD_SIZE", std::to_string(world_size));
        env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(local_world_size));
        env.emplace_back("GROUP_RANK", std::to_string(round.node_rank));
        env.emplace_back("NODE_RANK", std::to_string(round.node_rank));
        env.emplace_back("GROUP_WORLD_SIZE", std::to_string(nnodes));
        env.emplace_back("NNODES", std::to_string(nnodes));
        env.emplace_back("ROLE_NAME", config.role);
        env.emplace_back("ROLE_RANK", std::to_string(w.rank));
        env.emplace_back("ROLE_WORLD_SIZE", std::to_string(world_size));
        env.emplace_back("MASTER_ADDR", round.master_addr);
        env.emplace_back("MASTER_PORT", std::to_string(round.master_port));
        if (w.sets_devices) env.emplace_back("CUDA_VISIBLE_DEVICES", w.devices);
        env.emplace_back("TORCHELASTIC_RESTART_COUNT", std::to_string(round.restart_count));
        env.emplace_back("DDPRUN_ROUND", std::to_string(round.round));
        env.emplace_back("TORCHELASTIC_MAX_RESTARTS", std::to_string(config.max_restarts));
        env.emplace_back("TORCHELASTIC_RUN_ID", config.rdzv_id);
        // True: every rank is a client of node 0's agent's store there; False: rank 0 hosts.
        env.emplace_back("TORCHELASTIC_USE_AGENT_STORE", round.agent_store ? "True" : "False");
        if (!error_file_dir.empty())
            env.emplace_back("TORCHELASTIC_ERROR_FILE",
                             fmt::format("{}/{}/error.json", error_file_dir, local));
        // OpenMP threads follow the cores a worker is pinned to; unpinned workers share the
        // machine, so one each (as torchrun).
        if (!w.binding.cpus.empty())
            unless_set(env, "OMP_NUM_THREADS", std::to_string(w.binding.cpus.size()));
        else if (local_world_size > 1)
            unless_set(env, "OMP_NUM_THREADS", "1");
        unless_set(env, "PYTHONUNBUFFERED", "1");
        // A hung Python worker's tracebacks: faulthandler prints them on the SIGABRT
        // ddprun sends at a hang (agent_hang.cpp).
        if (config.hang_timeout.count() > 0) unless_set(env, "PYTHONFAULTHANDLER", "1");
        // As torchrun 2.14: the current name only. torch 2.2 and later warn on every rank
        // about NCCL_ASYNC_ERROR_HANDLING; a torch < 2.2 user exports it (docs/environment.md).
        unless_set(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
        // torchrun 2.x tells workers which signals stop the job (its --signals_to_handle).
        env.emplace_back("TORCHELASTIC_SIGNALS_TO_HANDLE", signals_text);
        workers.push_back(std::move(w));
    }
    return workers;
}

std::string format_plan(const LaunchConfig& config, const std::vector<WorkerSpec>& all_workers,
                        const std::string& master) {
    std::string out;
    const int world = all_workers.empty() ? 0 : all_workers.front().world_size;
    int nnodes = 0;
    for (const auto& w : all_workers) nnodes = std::max(nnodes, w.node_rank + 1);
    out += fmt::format(
        "ddprun plan: {} node{} x {} worker{} per node = world_size {} (world_size counts "
        "processes, not machines)\n",
        nnodes, nnodes == 1 ? "" : "s",
        all_workers.empty() ? 0 : all_workers.front().local_world_size,
        all_workers.empty() || all_workers.front().local_world_size == 1 ? "" : "s", world);
    out += "rank = node_rank * nproc_per_node + local_rank; MASTER_ADDR:MASTER_PORT = " + master +
           "\n\n";

    std::vector<std::string> command;
    if (!all_workers.empty())
        for (const auto& word : all_workers.front().argv) command.push_back(shell_word(word));

    // Pinned workers get a column with their CPUs (and memory node) before the command.
    auto cpus_of = [](const WorkerSpec& w) {
        if (w.binding.cpus.empty()) return std::string("(any)");
        std::string text = format_cpu_list(w.binding.cpus);
        if (w.binding.memory_node) text += fmt::format(" (mem {})", *w.binding.memory_node);
        return text;
    };
    const bool pinned = std::any_of(all_workers.begin(), all_workers.end(),
                                    [](const WorkerSpec& w) { return !w.binding.cpus.empty(); });
    std::size_t dev_width = std::string("CUDA_VISIBLE_DEVICES").size();
    std::size_t cpu_width = std::string("cpus").size();
    for (const auto& w : all_workers) {
        dev_width =
            std::max(dev_width, (w.sets_devices ? w.devices : std::string("(unset)")).size());
        cpu_width = std::max(cpu_width, cpus_of(w).size());
    }
    auto row = [&](const std::string& node, const std::string& local, const std::string& rank,
                   const std::string& size, const std::string& devices, const std::string& cpus,
                   const std::string& cmd) {
        std::string line = fmt::format("{:>9}  {:>10}  {:>5}  {:>10}  {:<{}}  ", node, local, rank,
                                       size, devices, dev_width);
        if (pinned) line += fmt::format("{:<{}}  ", cpus, cpu_width);
        return line + cmd + "\n";
    };
    out += row("node_rank", "local_rank", "rank", "world_size", "CUDA_VISIBLE_DEVICES", "cpus",
               "command");
    for (const auto& w : all_workers) {
        out += row(std::to_string(w.node_rank),
                   config.virtual_local_rank ? fmt::format("{} (0)", w.local_rank)
                                             : std::to_string(w.local_rank),
                   std::to_string(w.rank), std::to_string(w.world_size),
                   w.sets_devices ? w.devices : "(unset)", cpus_of(w), join(command, " "));
    }
    if (config.hang_timeout.count() > 0) {
        out += fmt::format(
            "\nhangs: a rank that wrote to DDPRUN_PROGRESS_FD and then stays silent for {} is "
            "hung{}: every node dumps its workers' stacks (Python: PYTHONFAULTHANDLER=1), the job "
            "stops with exit code 124{}\n",
            duration_text(config.hang_timeout),
            config.hang_timeout_first
                ? fmt::format(", and so is one that has not written within {} of its start",
                              duration_text(*config.hang_timeout_first))
                : std::string(),
            config.max_restarts > 0 ? fmt::format(" after {} restart(s)", config.max_restarts)
                                    : std::string());
    }
    if (config.max_no_progress_restarts > 0) {
        out += fmt::format(
            "\nprogress: a failed round made progress when a rank wrote to "
            "DDPRUN_PROGRESS_FD{}; after {} restart(s) in a row without it the job stops with exit "
            "code 78{}\n",
            config.progress_file.empty()
                ? std::string()
                : fmt::format(" or {} changed on a node", config.progress_file),
            config.max_no_progress_restarts,
            config.max_restarts > 0 ? std::string()
                                    : " (no restarts: --max_restarts is 0, so this never applies)");
    }
    if (!config.health_check.empty())
        out += fmt::format(
            "\nhealth check: each node runs `{}` before each join (at most {}); a node whose "
            "check fails stays out: {}\n",
            config.health_check, duration_text(config.health_check_timeout),
            config.elastic() ? "the others go on without it"
                             : "the job fails on every node with exit code 69");
    if (config.metrics_port)
        out += fmt::format(
            "\nmetrics: each node serves /metrics and /healthz on {}, port {}\n",
            config.local_addr.empty() ? std::string("every address") : config.local_addr,
            *config.metrics_port == 0 ? std::string("a free port")
                                      : std::to_string(*config.metrics_port));
    return out;
}

}  // namespace ddprun
