// Reads the job's shape from Slurm's, mpirun's or the Kubeflow operator's
// environment (see scheduler_env.hpp for the variables and the precedence).
//
// Why it is strict: a wrong guess does not fail fast, it makes every node wait
// for a rendezvous that never completes while the allocation burns. So a
// scheduler variable that does not parse is a usage error naming it, and the
// two ways to start ddprun wrongly under a scheduler (several copies per node;
// a multi-node allocation's batch script) are refused with the fix.

#include "ddprun/scheduler/scheduler_env.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/base/text.hpp"

#include <arpa/inet.h>

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "ddprun/devices/devices.hpp"
#include "ddprun/scheduler/hostlist.hpp"

namespace ddprun {
namespace {

using Failure = std::unexpected<Error>;

// Slurm's ids for steps that are not an srun step: the batch script (…294),
// the extern step (…295) and an interactive salloc shell (…290) and above.
constexpr long long k_first_special_step_id = 4294967290LL;

// A variable as set; empty counts as unset, as for DDPRUN_ and PET_ variables
// (job templates often export empty ones).
struct Variable {
    std::string name;
    std::string value;
};

std::optional<Variable> lookup(const Environment& env, std::string_view name) {
    auto it = env.find(std::string(name));
    if (it == env.end() || trim(it->second).empty()) return std::nullopt;
    return Variable{std::string(name), std::string(trim(it->second))};
}

std::optional<Variable> first_set(const Environment& env,
                                  std::initializer_list<std::string_view> names) {
    for (std::string_view name : names)
        if (auto variable = lookup(env, name)) return variable;
    return std::nullopt;
}

Error bad_variable(const Variable& variable, std::string_view problem, std::string_view hint) {
    return usage_error(fmt::format("{}={}: {} ({})", variable.name, variable.value, problem, hint));
}

// A count or id the scheduler wrote: anything else means the environment is
// not what it seems, and guessing would strand the other nodes.
std::expected<long long, Error> read_integer(const Variable& variable, long long min,
                                             std::string_view hint) {
    auto value = to_integer(variable.value);
    if (!value || *value < min)
        return Failure(bad_variable(
            variable, min == 0 ? "expected a whole number" : "expected a whole number from 1",
            hint));
    return *value;
}

DetectedValue detected(const Variable& variable, std::string source = {}) {
    return {variable.value, variable.name, source.empty() ? variable.name : std::move(source)};
}

// Slurm's tasks-per-node syntax, "2(x3),1": the most tasks on any node.
std::optional<long long> most_tasks_per_node(std::string_view text) {
    long long most = 0;
    while (true) {
        auto comma = text.find(',');
        std::string_view item = trim(text.substr(0, comma));
        if (auto open = item.find("(x"); open != std::string_view::npos) {
            if (!item.ends_with(')')) return std::nullopt;
            auto repeat = to_integer(item.substr(open + 2, item.size() - open - 3));
            if (!repeat || *repeat < 1) return std::nullopt;
            item = item.substr(0, open);
        }
        auto count = to_integer(item);
        if (!count || *count < 1) return std::nullopt;
        most = std::max(most, *count);
        if (comma == std::string_view::npos) return most;
        text.remove_prefix(comma + 1);
    }
}

// Slurm's GPU id lists ("0,1,2,3", possibly "0-3"): only how many, never the
// ids themselves, which are physical and wrong inside the step's cgroup.
std::optional<long long> count_ids(std::string_view text) {
    long long count = 0;
    bool parsed = for_each_id_range(text, [&count](long long first, long long last) {
        count += last - first + 1;
        return true;
    });
    if (!parsed) return std::nullopt;
    return count;
}

bool is_ip_address(const std::string& text) {
    in6_addr address{};
    return ::inet_pton(AF_INET, text.c_str(), &address) == 1 ||
           ::inet_pton(AF_INET6, text.c_str(), &address) == 1;
}

constexpr std::string_view k_one_per_node =
    "ddprun starts one worker per GPU itself; start one ddprun per node";

class Detector {
  public:
    Detector(const Environment& env, const GivenValues& given) : m_env(env), m_given(given) {
        // --standalone decides the shape: one node, its own store on 127.0.0.1.
        if (auto it = given.find("standalone"); it != given.end())
            m_standalone = to_bool(it->second).value_or(false);
    }

    std::expected<LaunchDefaults, Error> run() {
        if (auto error = check_one_launcher_per_node()) return Failure(*error);
        auto found = slurm();
        if (!found) return Failure(found.error());
        if (!*found) {
            found = mpi();
            if (!found) return Failure(found.error());
        }
        if (!*found) kubeflow();
        return std::move(m_out);
    }

  private:
    // The user's value (a flag, DDPRUN_ or PET_) wins; --standalone fixes the shape.
    bool open(std::string_view option) const {
        if (m_standalone && option != "nproc_per_node") return false;
        return !m_given.contains(option);
    }

    // The job's node count as it will be: the user's, else the detected one.
    long long nnodes() const {
        if (m_standalone) return 1;
        if (auto it = m_given.find("nnodes"); it != m_given.end()) {
            std::string_view text = it->second;
            // "N", or "MIN:MAX": an elastic job is a multi-node one as soon as MAX > 1.
            auto colon = text.find(':');
            return to_integer(colon == std::string_view::npos ? text : text.substr(colon + 1))
                .value_or(1);
        }
        if (m_out.nnodes) return to_integer(m_out.nnodes->value).value_or(1);
        return 1;
    }

    bool shape_open() const { return open("nnodes") || open("node_rank"); }

    // mpirun and srun both start as many copies as asked; several per node would
    // each start a full set of workers on the same GPUs.
    std::optional<Error> check_one_launcher_per_node() const {
        if (!shape_open()) return std::nullopt;
        for (std::string_view name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
            auto variable = lookup(m_env, name);
            if (!variable) continue;
            auto local = read_integer(*variable, 1, "set by mpirun: copies on this node");
            if (!local) return local.error();
            if (*local > 1)
                return bad_variable(
                    *variable,
                    fmt::format("mpirun started {} copies of ddprun on this node", *local),
                    fmt::format("{} (Open MPI: mpirun -N 1; MPICH, Intel MPI: mpiexec -ppn 1)",
                                k_one_per_node));
        }
        return std::nullopt;
    }

    std::optional<Error> check_one_slurm_task_per_node() const {
        std::string_view fix = "srun --ntasks-per-node=1 ddprun ...";
        if (auto variable =
                first_set(m_env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
            auto most = most_tasks_per_node(variable->value);
            if (!most)
                return bad_variable(*variable, "expected Slurm's tasks per node, e.g. 1(x4)",
                                    "is this a Slurm job step?");
            if (*most > 1)
                return bad_variable(*variable,
                                    fmt::format("srun started {} tasks on a node", *most),
                                    fmt::format("{}: {}", k_one_per_node, fix));
        }
        if (auto variable = lookup(m_env, "SLURM_LOCALID")) {
            auto local = read_integer(*variable, 0, "set by srun: the task's index on its node");
            if (!local) return local.error();
            if (*local > 0)
                return bad_variable(*variable, "this is not the first task on its node",
                                    fmt::format("{}: {}", k_one_per_node, fix));
        }
        return std::nullopt;
    }

    // An srun step, where every node runs a copy; the batch script (or an
    // salloc shell on a compute node) runs once, on the first node.
    bool in_slurm_step() const {
        if (lookup(m_env, "SLURM_STEP_NUM_NODES")) return true;
        auto step = first_set(m_env, {"SLURM_STEP_ID", "SLURM_STEPID"});
        if (!step) return false;
        auto id = to_integer(step->value);
        return id && *id >= 0 && *id < k_first_special_step_id;
    }

    std::expected<bool, Error> slurm() {
        auto job = first_set(m_env, {"SLURM_JOB_ID", "SLURM_JOBID"});
        auto node = first_set(m_env, {"SLURM_NODEID", "SLURM_PROCID"});
        if (!job || !node) return false;  // not a job, or an salloc shell on a login node
        m_out.scheduler = "slurm";
        bool step = in_slurm_step();

        if (shape_open() && step)
            if (auto error = check_one_slurm_task_per_node()) return Failure(*error);
        if (open("nnodes")) {
            auto count = step ? first_set(m_env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                                  "SLURM_JOB_NUM_NODES"})
                              : first_set(m_env, {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
            if (count) {
                auto n = read_integer(*count, 1, "pass --nnodes to override");
                if (!n) return Failure(n.error());
                if (!step && *n > 1)
                    return Failure(bad_variable(
                        *count,
                        "ddprun runs in the batch script, which Slurm starts on the first node "
                        "only",
                        "start one per node with srun --ntasks-per-node=1 ddprun ..., or pass "
                        "--nnodes=1 to use this node alone"));
                m_out.nnodes = detected(*count);
            }
        }
        if (open("node_rank")) {
            auto rank = read_integer(*node, 0, "pass --node_rank to override");
            if (!rank) return Failure(rank.error());
            m_out.node_rank = detected(*node);
        }
        if (open("nproc_per_node")) {
            auto gpus = slurm_gpus(step);
            if (!gpus) return Failure(gpus.error());
            m_out.nproc_per_node = *gpus;
        }
        if (nnodes() > 1 && open("master_addr")) {
            auto list = step ? first_set(m_env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                                 "SLURM_NODELIST"})
                             : first_set(m_env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
            if (!list)
                return Failure(usage_error(
                    "Slurm set no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST to find node 0 in "
                    "(pass --master_addr=HOST of node 0)"));
            auto hosts = expand_hostlist(list->value);
            if (!hosts)
                return Failure(bad_variable(*list, hosts.error(),
                                            "pass --master_addr=HOST of node 0 to override"));
            m_out.master_addr = DetectedValue{hosts->front(), list->name,
                                              fmt::format("first host of {}", list->name)};
        }
        if (nnodes() > 1 && (open("master_port") || open("rdzv_endpoint") || open("rdzv_id"))) {
            auto id = read_integer(*job, 0,
                                   "pass --master_port, --rdzv_endpoint and --rdzv_id to override");
            if (!id) return Failure(id.error());
            long long step_id = 0;
            std::string source = fmt::format("derived from {}={}", job->name, job->value);
            if (auto step_variable = first_set(m_env, {"SLURM_STEP_ID", "SLURM_STEPID"})) {
                auto n = read_integer(*step_variable, 0, "pass --rdzv_id to override");
                if (!n) return Failure(n.error());
                step_id = *n;
                source += fmt::format(", {}={}", step_variable->name, step_variable->value);
            }
            JobPorts ports = job_ports(*id, step_id);
            if (open("master_port"))
                m_out.master_port =
                    DetectedValue{std::to_string(ports.master_port), job->name, source};
            derive_run(fmt::format("slurm-{}.{}", *id, step_id), ports.store_port, *job, source);
        }
        return true;
    }

    // The run id and the store's endpoint (node 0's host, the job's store port) of a
    // job the scheduler knows; only for a job of several nodes, where a store is used.
    void derive_run(std::string run_id, int store_port, const Variable& from,
                    const std::string& source) {
        if (nnodes() <= 1) return;
        if (open("rdzv_id")) m_out.rdzv_id = DetectedValue{std::move(run_id), from.name, source};
        if (!open("rdzv_endpoint")) return;
        std::string host;
        if (auto it = m_given.find("master_addr"); it != m_given.end())
            host = it->second;
        else if (m_out.master_addr)
            host = m_out.master_addr->value;
        else
            return;
        if (host.find(':') != std::string::npos) host = "[" + host + "]";
        m_out.rdzv_endpoint =
            DetectedValue{fmt::format("{}:{}", host, store_port), from.name, source};
    }

    // The GPUs Slurm gave this node's step, as a --nproc_per_node value.
    std::expected<std::optional<DetectedValue>, Error> slurm_gpus(bool step) const {
        std::optional<long long> on_node;
        auto gpus_on_node = lookup(m_env, "SLURM_GPUS_ON_NODE");
        if (gpus_on_node) {
            auto n = read_integer(*gpus_on_node, 0, "pass --nproc_per_node to override");
            if (!n) return Failure(n.error());
            if (*n == 0) return std::nullopt;  // a CPU step: the default stays
            on_node = *n;
        }
        // The list Slurm set holds indices relative to the step's cgroup; "gpu"
        // gives worker i entry i of it, verbatim.
        if (auto visible = lookup(m_env, "CUDA_VISIBLE_DEVICES");
            visible && !split_visible_devices(visible->value).empty())
            return DetectedValue{"gpu", visible->name, "CUDA_VISIBLE_DEVICES of the Slurm step"};
        if (on_node) return detected(*gpus_on_node);
        if (auto ids = lookup(m_env, step ? "SLURM_STEP_GPUS" : "SLURM_JOB_GPUS")) {
            auto count = count_ids(ids->value);
            if (!count)
                return Failure(bad_variable(*ids, "expected GPU ids like 0,1,2,3",
                                            "pass --nproc_per_node to override"));
            return DetectedValue{std::to_string(*count), ids->name,
                                 fmt::format("count of {}", ids->name)};
        }
        return std::nullopt;
    }

    std::expected<bool, Error> mpi() {
        std::optional<Variable> size, rank;
        for (auto [size_name, rank_name] :
             {std::pair{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
              std::pair{"PMI_SIZE", "PMI_RANK"}}) {
            size = lookup(m_env, size_name);
            rank = lookup(m_env, rank_name);
            if (size && rank) break;
        }
        if (!size || !rank) return false;
        m_out.scheduler = "mpi";
        if (open("nnodes")) {
            auto n = read_integer(*size, 1, "pass --nnodes to override");
            if (!n) return Failure(n.error());
            m_out.nnodes = detected(*size);
        }
        if (open("node_rank")) {
            auto r = read_integer(*rank, 0, "pass --node_rank to override");
            if (!r) return Failure(r.error());
            m_out.node_rank = detected(*rank);
        }
        if (nnodes() > 1 && open("master_addr")) {
            auto addr = lookup(m_env, "MASTER_ADDR");
            if (!addr)
                return Failure(usage_error(fmt::format(
                    "{}={}: mpirun does not say where rank 0 runs (pass --master_addr=HOST of "
                    "rank 0, or export it: mpirun -x MASTER_ADDR=HOST ...)",
                    size->name, size->value)));
            m_out.master_addr = detected(*addr);
        }
        if (nnodes() > 1 && open("master_port"))
            if (auto port = lookup(m_env, "MASTER_PORT")) m_out.master_port = detected(*port);
        // Open MPI's job id (a number); PMIx's namespace where that is all there is.
        if (auto job = first_set(m_env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})) {
            std::string source = fmt::format("derived from {}={}", job->name, job->value);
            auto number = to_integer(job->value);
            JobPorts ports = number && *number >= 0 ? job_ports(*number) : job_ports(job->value);
            derive_run("mpi-" + job->value, ports.store_port, *job, source);
        }
        return true;
    }

    // The PyTorchJob operator sets PET_NNODES (read as a flag default) next to
    // plain MASTER_ADDR, MASTER_PORT and RANK; both together are its mark, so a
    // MASTER_ADDR left in a shell is not mistaken for it.
    void kubeflow() {
        if (!lookup(m_env, "PET_NNODES") || !lookup(m_env, "MASTER_ADDR")) return;
        m_out.scheduler = "kubeflow";
        if (open("node_rank"))
            if (auto rank = lookup(m_env, "RANK"))
                m_out.node_rank = detected(*rank, "RANK (Kubeflow: the pod's rank)");
        if (nnodes() <= 1) return;
        if (open("master_addr"))
            m_out.master_addr = detected(*lookup(m_env, "MASTER_ADDR"), "MASTER_ADDR (Kubeflow)");
        if (open("master_port"))
            if (auto port = lookup(m_env, "MASTER_PORT"))
                m_out.master_port = detected(*port, "MASTER_PORT (Kubeflow)");
        // The operator names node 0's service "<job>-master-0" (a DNS name, maybe with
        // its domain): the job's name, unique among the jobs of a namespace.
        auto addr = *lookup(m_env, "MASTER_ADDR");
        std::string_view job = addr.value;
        if (!is_ip_address(addr.value)) job = job.substr(0, job.find('.'));
        if (job.ends_with("-master-0")) job.remove_suffix(std::string_view("-master-0").size());
        derive_run(fmt::format("kubeflow-{}", job), job_ports(job).store_port, addr,
                   fmt::format("derived from the Kubeflow job name in MASTER_ADDR={}", addr.value));
    }

    const Environment& m_env;
    const GivenValues& m_given;
    bool m_standalone = false;
    LaunchDefaults m_out;
};

}  // namespace

JobPorts job_ports(long long job_id, long long step_id) {
    auto slot = static_cast<int>(
        (static_cast<unsigned long long>(job_id) * 31 + static_cast<unsigned long long>(step_id)) %
        k_job_slots);
    return {k_job_port_base + 2 * slot, k_job_port_base + 2 * slot + 1};
}

JobPorts job_ports(std::string_view name) {
    std::uint64_t hash = 14695981039346656037ULL;
    for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    auto slot = static_cast<int>(hash % k_job_slots);
    return {k_job_port_base + 2 * slot, k_job_port_base + 2 * slot + 1};
}

std::expected<LaunchDefaults, Error> detect_launch_environment(const Environment& env,
                                                               const GivenValues& given) {
    return Detector(env, given).run();
}

std::string describe_value_sources(const LaunchConfig& config) {
    std::string text = config.scheduler.empty() ? std::string("no scheduler detected")
                                                : fmt::format("{} detected", config.scheduler);
    const char* separator = ": ";
    for (const auto& [name, value] : config.value_sources) {
        text += fmt::format("{}{}={}", separator, name, value);
        separator = ", ";
    }
    if (!config.ignored_signals.empty()) {
        std::string names;
        for (int signal : config.ignored_signals)
            names += (names.empty() ? "" : ",") + signal_name(signal);
        text += fmt::format(
            "; {} ignored when ddprun started (nohup?): left ignored, for ddprun and its workers "
            "(--signals_to_handle naming {} stops the job on it)",
            names, config.ignored_signals.size() == 1 ? "it" : "them");
    }
    return text;
}

}  // namespace ddprun
