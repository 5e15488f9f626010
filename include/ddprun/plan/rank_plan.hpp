// RankPlan: who runs where. A pure function from the validated config, the
// node's resources and the round's membership to one WorkerSpec per local
// worker. --dry-run prints it for the whole job.
#pragma once

#include <expected>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/devices/binding.hpp"

namespace ddprun {

// What a rendezvous round decided (single node: trivially filled in).
struct RoundInfo {
    int node_rank = 0;
    std::vector<int> nproc_per_node;  // indexed by node rank; its size is nnodes
    std::string master_addr;
    int master_port = 0;
    // Node 0's agent hosts the workers' store at MASTER_ADDR:MASTER_PORT (worker_store.hpp):
    // TORCHELASTIC_USE_AGENT_STORE=True. Else rank 0 hosts it.
    bool agent_store = false;
    int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: rounds started by a failure
    int round = 0;          // DDPRUN_ROUND: every restart and membership change counts
    // How the membership changed since the previous round (elastic), for the log.
    std::string change;
};

struct WorkerSpec {
    int node_rank = 0;
    int local_rank = 0;  // the real local rank (LOCAL_RANK may be 0 with --virtual_local_rank)
    int rank = 0;
    int world_size = 0;
    int local_world_size = 0;
    std::string devices;  // the CUDA_VISIBLE_DEVICES value set, empty: left as inherited
    bool sets_devices = false;
    std::vector<std::string> argv;                         // program and arguments
    std::vector<std::pair<std::string, std::string>> env;  // variables ddprun sets
    BindingPlan binding;  // CPUs / NUMA node it is pinned to; empty cpus: not pinned
};

// Resolves --nproc_per_node (a count, gpu, cpu, auto) on this node.
// Errors: "gpu" with no device; more workers than devices.
std::expected<int, Error> resolve_nproc(const NprocSpec& spec, const NodeResources& resources);

// The command to execute: [program, args...], [python, -u, file.py, args...]
// or [python, -u, -m, module, args...]; python is $PYTHON_EXEC or "python3".
std::vector<std::string> worker_command(const LaunchConfig& config, const Environment& env);

// One node's workers. `error_file_dir`: TORCHELASTIC_ERROR_FILE of local rank
// i is <error_file_dir>/<i>/error.json. `inherited` is the agent's environment
// (OMP_NUM_THREADS, PYTHONUNBUFFERED, ... are only set when absent there).
// `bindings`: by local rank, from plan_node_binding (empty: nobody pinned).
std::vector<WorkerSpec> plan_node(const LaunchConfig& config, const NodeResources& resources,
                                  const RoundInfo& round, const Environment& inherited,
                                  const std::string& error_file_dir,
                                  const std::vector<BindingPlan>& bindings = {});

// The first rank on `node_rank`: the prefix sum of nproc_per_node.
int rank_offset(const std::vector<int>& nproc_per_node, int node_rank);

// The --dry-run table for every node of the job. Nodes other than this one
// are assumed to have the same nproc_per_node and devices.
std::string format_plan(const LaunchConfig& config, const std::vector<WorkerSpec>& all_workers,
                        const std::string& master);

}  // namespace ddprun
