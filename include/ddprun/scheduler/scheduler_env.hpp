// The job's shape from the scheduler's environment. Why it exists: most
// multi-node runs start under Slurm, mpirun or the Kubeflow operator, which
// already know the node count, this node's rank and node 0's host; ddprun
// started the same way on every node finds its place from them, with no shim
// script. Pure: the environment comes in as a map, so every variable and
// every refusal is table-tested.
//
// Precedence, per value: flag > DDPRUN_<NAME> > PET_<NAME> (cli.cpp) >
// what this file detects > the default. Detected, in this order:
//   Slurm (SLURM_JOB_ID and SLURM_NODEID set; one ddprun per node):
//     nnodes          SLURM_STEP_NUM_NODES in a step, else SLURM_NNODES, else
//                     SLURM_JOB_NUM_NODES
//     node_rank       SLURM_NODEID (else SLURM_PROCID)
//     nproc_per_node  the step's GPUs: "gpu" (one worker per entry of the
//                     CUDA_VISIBLE_DEVICES Slurm set, indices relative to the
//                     cgroup, kept verbatim), else SLURM_GPUS_ON_NODE, else the
//                     count of SLURM_STEP_GPUS (SLURM_JOB_GPUS outside a step)
//     master_addr     first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST,
//                     SLURM_NODELIST)
//     master_port     the even port of the job step's slot (see job_ports below)
//     rdzv_endpoint   master_addr and the odd port of the slot: the store's
//     rdzv_id         "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>"
//   mpirun (OMPI_COMM_WORLD_SIZE/_RANK, else PMI_SIZE/PMI_RANK; one per node):
//     nnodes, node_rank from them; master_addr/master_port from a plain
//     MASTER_ADDR/MASTER_PORT (mpirun -x MASTER_ADDR=...), required on more
//     than one node since MPI does not tell where rank 0 runs. rdzv_id
//     "mpi-<job id>" and the store's port from Open MPI's job id
//     (OMPI_MCA_ess_base_jobid, else PMIX_NAMESPACE); MASTER_PORT stays a free
//     port that node 0 reserves, which never collides.
//   Kubeflow PyTorchJob (PET_NNODES and a plain MASTER_ADDR, as the operator
//   sets them): master_addr, master_port from MASTER_ADDR, MASTER_PORT; node_rank
//   from RANK (the pod's rank; PET_NODE_RANK wins when set). WORLD_SIZE counts
//   processes there and is never read. rdzv_id "kubeflow-<job>" and the
//   store's port from the job's name, which the operator puts in MASTER_ADDR
//   ("<job>-master-0").
// Why the ids and ports are derived: two jobs (or two steps of one allocation)
// whose node 0 is the same host would otherwise meet in one store on 29400.
// master_addr and master_port are only filled for a job of more than one node:
// a single node keeps 127.0.0.1 and a free port.
#pragma once

#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun {

// A job's ports: slot s of k_job_slots gives MASTER_PORT k_job_port_base + 2s
// and the store k_job_port_base + 2s + 1, so one job's store never lands on
// another's MASTER_PORT. 20000-28999: below the store's default 29400 and
// torchrun's 29500, and below Linux's ephemeral ports (32768 up). The same on
// every node of a job. Jobs whose slots coincide and share node 0 fail to
// start (the port is taken), never join each other (the run ids differ); pass
// --rdzv_endpoint and --master_port to rule it out.
constexpr int k_job_port_base = 20000;
constexpr int k_job_slots = 4500;

struct JobPorts {
    int master_port;
    int store_port;
};
// Slurm: slot (job * 31 + step) % k_job_slots, so the steps of one job and
// consecutive jobs get different slots; other schedulers: id % k_job_slots.
JobPorts job_ports(long long job_id, long long step_id = 0);
JobPorts job_ports(std::string_view name);  // a job known by name: its FNV-1a hash

// One value read from the scheduler's environment.
struct DetectedValue {
    std::string value;     // in the flag's syntax: "2", "node01", "gpu"
    std::string variable;  // the variable a usage error about the value names
    std::string source;    // for people: "SLURM_NODEID", "first host of SLURM_STEP_NODELIST"

    bool operator==(const DetectedValue&) const = default;
};

// What the environment says about the values the user left open. A value the
// user gave is never detected (it stays empty here).
struct LaunchDefaults {
    std::string scheduler;  // "slurm", "mpi", "kubeflow", or "" when none is recognised
    std::optional<DetectedValue> nnodes;
    std::optional<DetectedValue> node_rank;
    std::optional<DetectedValue> nproc_per_node;
    std::optional<DetectedValue> master_addr;
    std::optional<DetectedValue> master_port;
    std::optional<DetectedValue> rdzv_endpoint;
    std::optional<DetectedValue> rdzv_id;
};

// Values the user chose (a flag, DDPRUN_<NAME> or PET_<NAME>), by option name
// ("nnodes", "standalone", ...), as given; a flag without a value is "1".
using GivenValues = std::map<std::string, std::string, std::less<>>;

// Errors, one line naming the variable and its value: a malformed scheduler
// variable; more than one ddprun per node (ddprun starts the per-GPU workers
// itself); a multi-node Slurm allocation seen from its batch script, which
// runs on the first node only; mpirun on several nodes without MASTER_ADDR.
// Each is raised only when the value it concerns is not given by the user.
std::expected<LaunchDefaults, Error> detect_launch_environment(const Environment& env,
                                                               const GivenValues& given = {});

// One line for the log and --dry-run from config.scheduler and
// config.value_sources: "slurm detected: nnodes=2 (SLURM_NNODES), node_rank=1
// (SLURM_NODEID), ...".
std::string describe_value_sources(const LaunchConfig& config);

}  // namespace ddprun
