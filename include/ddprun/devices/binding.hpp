// Binding: which CPUs each worker runs on (--cpu-binding, --numa-binding)
// and the memory node it prefers. Planned by a pure function over the
// topology (topology.hpp), applied in the child between fork and exec. With
// binding on, a worker's OMP_NUM_THREADS defaults to the number of its CPUs.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/config/config.hpp"
#include "ddprun/devices/topology.hpp"

namespace ddprun {

// One worker's placement, ready for apply_binding.
struct BindingPlan {
    std::vector<int> cpus;           // sorted; empty: not pinned
    std::optional<int> memory_node;  // MPOL_PREFERRED node; empty: default policy
    // The same as kernel bitmasks, built in the parent because the child may
    // not allocate between fork and exec.
    std::vector<unsigned long> cpu_mask;
    std::vector<unsigned long> node_mask;
};

BindingPlan make_binding(std::vector<int> cpus, std::optional<int> memory_node);

// Pure planning for `workers` local workers.
// - cpu_split: the allowed CPUs split evenly (sizes differ by at most one
//   core) and contiguously, whole physical cores per worker when there are at
//   least as many cores as workers; ordered by NUMA node so a worker's share
//   straddles nodes only when it must.
// - numa (needs gpu_nodes[i], the NUMA node of worker i's GPU): Node, the
//   node's allowed CPUs; Socket, the allowed CPUs of the socket holding the
//   node; Exclusive, the node's allowed cores split as above among the
//   workers whose GPUs are on that node; CoreComplex, the node's allowed CPUs
//   that share one last-level (L3) cache, the workers on a node taking its
//   complexes in turn, the fullest first (torch 2.14's order), and sharing
//   them when there are more workers than complexes.
// Memory prefers the GPU's node (numa), or the one node a worker's CPUs lie
// on (cpu_split); nothing is set on a single-node machine. Both at once is an
// error, as are nodes or sockets the topology lacks and shares that would be
// empty, and CPUs whose caches sysfs does not list (CoreComplex); messages
// say what is missing and what to do.
std::expected<std::vector<BindingPlan>, std::string> plan_binding(NumaBinding numa, bool cpu_split,
                                                                  int workers,
                                                                  const std::vector<int>& gpu_nodes,
                                                                  const Topology& topology,
                                                                  const std::vector<int>& allowed);

// The NUMA node of each worker's GPU (worker i uses resources.devices[i] and
// its bus id resources.device_pci_bus_ids[i]). Errors: no GPU, no NUMA
// information, a bus id unknown or without a node.
std::expected<std::vector<int>, std::string> worker_gpu_nodes(NumaBinding numa,
                                                              const NodeResources& resources,
                                                              int workers,
                                                              const Topology& topology);

// The agent's entry point: the plan for this node's `workers` workers (worker
// i uses GPU resources.devices[i], its bus id resources.device_pci_bus_ids[i]),
// read from `sysfs_root` and this process's affinity. Empty when the config
// asks for no binding.
std::expected<std::vector<BindingPlan>, std::string> plan_node_binding(
    const LaunchConfig& config, const NodeResources& resources, int workers,
    const std::string& sysfs_root = "/sys");

// For the child between fork and exec: only raw syscalls, no allocation.
// Pins the calling process to plan.cpus and sets its memory policy. Returns 0,
// or the errno of sched_setaffinity (the CPUs are no longer allowed). The
// memory policy is best effort: containers often forbid set_mempolicy, and a
// worker is still correct without it.
int apply_binding(const BindingPlan& plan) noexcept;

// "node", "socket", "exclusive", "core-complex", "none": the --numa-binding
// spelling.
std::string_view numa_binding_name(NumaBinding mode);

}  // namespace ddprun
