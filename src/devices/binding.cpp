// Plans each worker's CPUs and memory node from the topology, and applies
// them in the child between fork and exec (see binding.hpp). The child side is
// two raw syscalls on masks built beforehand: nothing that allocates may run
// there.
#include "ddprun/devices/binding.hpp"

#include <fmt/format.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <iterator>
#include <map>
#include <set>

namespace ddprun {
namespace {

constexpr std::size_t k_mask_bits = sizeof(unsigned long) * CHAR_BIT;

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<int> out;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
    return out;
}

std::map<int, int> node_of_cpu(const Topology& topology) {
    std::map<int, int> nodes;
    for (const NumaNode& node : topology.nodes)
        for (int cpu : node.cpus) nodes.emplace(cpu, node.id);
    return nodes;
}

// Splits `cpus` into `parts` contiguous shares whose sizes differ by at most
// one unit, the first shares taking the remainder. A unit is a physical core
// (all its hyperthreads) when there are enough cores, else a single CPU, so
// two workers never share a core if it can be helped. Units are ordered by
// NUMA node first: machines that number CPUs alternately across sockets
// (0 on socket 0, 1 on socket 1, ...) still get node-local shares.
std::optional<std::vector<std::vector<int>>> split_evenly(const std::vector<int>& cpus, int parts,
                                                          const Topology& topology) {
    if (parts <= 0) return std::vector<std::vector<int>>{};
    auto nodes = node_of_cpu(topology);
    auto node = [&nodes](int cpu) {
        auto it = nodes.find(cpu);
        return it == nodes.end() ? INT_MAX : it->second;
    };
    std::map<std::pair<int, int>, std::vector<int>> cores;  // (node, core) -> cpus
    for (int cpu : cpus) {
        auto it = topology.core.find(cpu);
        int core = it == topology.core.end() ? cpu : it->second;
        cores[{node(cpu), core}].push_back(cpu);
    }
    std::vector<std::vector<int>> units;
    if (std::ssize(cores) >= parts) {
        for (auto& [key, members] : cores) units.push_back(std::move(members));
    } else {
        for (auto& [key, members] : cores)
            for (int cpu : members) units.push_back({cpu});
    }
    if (std::ssize(units) < parts) return std::nullopt;

    std::vector<std::vector<int>> shares(static_cast<std::size_t>(parts));
    std::size_t base = units.size() / shares.size();
    std::size_t extra = units.size() % shares.size();
    std::size_t next = 0;
    for (std::size_t i = 0; i < shares.size(); ++i) {
        std::size_t count = base + (i < extra ? 1 : 0);
        for (std::size_t j = 0; j < count; ++j, ++next)
            shares[i].insert(shares[i].end(), units[next].begin(), units[next].end());
        std::sort(shares[i].begin(), shares[i].end());
    }
    return shares;
}

std::string cpu_count_text(std::size_t count) {
    return fmt::format("{} CPU{}", count, count == 1 ? "" : "s");
}

std::string no_numa_message(const Topology& topology, NumaBinding numa) {
    return fmt::format(
        "--numa-binding={}: this machine reports no NUMA nodes (nothing under "
        "{}/devices/system/node; a container may hide them); drop --numa-binding, or use "
        "--cpu-binding to split the CPUs without it",
        numa_binding_name(numa), topology.sysfs_root);
}

const NumaNode* find_node(const Topology& topology, int id) {
    for (const NumaNode& node : topology.nodes)
        if (node.id == id) return &node;
    return nullptr;
}

// The node's allowed CPUs (`cpus`) grouped by the last-level cache they share,
// in the order torch 2.14's _core_complex_get_logical_cpus_to_bind_to picks
// from: the groups with the most CPUs first (a complex that the allowed set
// cuts down is the last choice), then by the lowest CPU of the cache. The
// error names the first CPU whose caches sysfs does not list.
std::expected<std::vector<std::vector<int>>, std::string> core_complexes(
    const std::vector<int>& cpus, const Topology& topology) {
    std::map<int, std::vector<int>> by_cache;  // lowest cpu of the cache -> allowed cpus
    for (int cpu : cpus) {
        auto it = topology.last_level_cache.find(cpu);
        if (it == topology.last_level_cache.end())
            return std::unexpected(fmt::format(
                "--numa-binding=core-complex: sysfs lists no cache of CPU {} (no "
                "{}/devices/system/cpu/cpu{}/cache/index*/ of a data or unified cache; a VM or "
                "container may hide them); use --numa-binding=node or --numa-binding=exclusive",
                cpu, topology.sysfs_root, cpu));
        by_cache[it->second].push_back(cpu);
    }
    std::vector<std::vector<int>> groups;
    for (auto& [lowest, members] : by_cache) groups.push_back(std::move(members));
    // Stable: equal sizes keep the map's order, the lowest cache first.
    std::stable_sort(groups.begin(), groups.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    return groups;
}

std::string join_ranks(const std::vector<int>& ranks) {
    std::string out;
    for (int rank : ranks) out += fmt::format("{}{}", out.empty() ? "" : ",", rank);
    return out;
}

}  // namespace

BindingPlan make_binding(std::vector<int> cpus, std::optional<int> memory_node) {
    BindingPlan plan;
    plan.cpus = std::move(cpus);
    std::sort(plan.cpus.begin(), plan.cpus.end());
    plan.memory_node = memory_node;
    if (!plan.cpus.empty()) {
        plan.cpu_mask.assign(static_cast<std::size_t>(plan.cpus.back()) / k_mask_bits + 1, 0);
        for (int cpu : plan.cpus) {
            auto bit = static_cast<std::size_t>(cpu);
            plan.cpu_mask[bit / k_mask_bits] |= 1UL << (bit % k_mask_bits);
        }
    }
    if (memory_node && *memory_node >= 0) {
        auto bit = static_cast<std::size_t>(*memory_node);
        plan.node_mask.assign(bit / k_mask_bits + 1, 0);
        plan.node_mask[bit / k_mask_bits] |= 1UL << (bit % k_mask_bits);
    }
    return plan;
}

std::expected<std::vector<BindingPlan>, std::string> plan_binding(
    NumaBinding numa, bool cpu_split, int workers, const std::vector<int>& gpu_nodes,
    const Topology& topology, const std::vector<int>& allowed_unsorted) {
    if (numa != NumaBinding::None && cpu_split)
        return std::unexpected(fmt::format(
            "--cpu-binding with --numa-binding={}: pick one (numa binding already gives each "
            "worker the CPUs near its GPU)",
            numa_binding_name(numa)));
    std::vector<BindingPlan> plans;
    if ((numa == NumaBinding::None && !cpu_split) || workers <= 0) return plans;

    std::vector<int> allowed = allowed_unsorted;
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    const bool several_nodes = topology.nodes.size() > 1;
    const auto nodes = node_of_cpu(topology);

    if (cpu_split) {
        auto shares = split_evenly(allowed, workers, topology);
        if (!shares)
            return std::unexpected(fmt::format(
                "--cpu-binding: {} workers but only {} to share ({}); lower --nproc_per_node or "
                "drop --cpu-binding",
                workers, cpu_count_text(allowed.size()), format_cpu_list(allowed)));
        for (auto& share : *shares) {
            std::optional<int> memory_node;
            if (several_nodes && !share.empty()) {
                auto first = nodes.find(share.front());
                bool one_node =
                    first != nodes.end() && std::all_of(share.begin(), share.end(), [&](int cpu) {
                        auto it = nodes.find(cpu);
                        return it != nodes.end() && it->second == first->second;
                    });
                if (one_node) memory_node = first->second;
            }
            plans.push_back(make_binding(std::move(share), memory_node));
        }
        return plans;
    }

    if (topology.nodes.empty()) return std::unexpected(no_numa_message(topology, numa));
    if (std::ssize(gpu_nodes) < workers)
        return std::unexpected(fmt::format(
            "--numa-binding={}: local rank {} has no GPU to bind near; use --cpu-binding, or as "
            "many workers as GPUs",
            numa_binding_name(numa), gpu_nodes.size()));

    // The CPUs each worker may use before any splitting.
    std::vector<std::vector<int>> near(static_cast<std::size_t>(workers));
    for (int rank = 0; rank < workers; ++rank) {
        int id = gpu_nodes[static_cast<std::size_t>(rank)];
        const NumaNode* node = find_node(topology, id);
        if (node == nullptr)
            return std::unexpected(
                fmt::format("--numa-binding={}: local rank {}'s GPU is on NUMA node {}, which "
                            "{}/devices/system/node does not list",
                            numa_binding_name(numa), rank, id, topology.sysfs_root));
        std::vector<int> cpus = node->cpus;
        if (numa == NumaBinding::Socket) {
            std::set<int> sockets;
            for (int cpu : node->cpus) {
                auto it = topology.socket.find(cpu);
                if (it == topology.socket.end())
                    return std::unexpected(fmt::format(
                        "--numa-binding=socket: the socket of CPU {} is unknown (no "
                        "{}/devices/system/cpu/cpu{}/topology/physical_package_id); use "
                        "--numa-binding=node",
                        cpu, topology.sysfs_root, cpu));
                sockets.insert(it->second);
            }
            cpus.clear();
            for (const auto& [cpu, socket] : topology.socket)
                if (sockets.contains(socket)) cpus.push_back(cpu);
        }
        auto& mine = near[static_cast<std::size_t>(rank)];
        mine = intersect(cpus, allowed);
        if (mine.empty())
            return std::unexpected(fmt::format(
                "--numa-binding={}: local rank {}'s GPU is on NUMA node {}, whose {} ({}) this "
                "process may not use (allowed: {}); widen the CPU set (taskset, cgroup cpuset, "
                "srun --cpu-bind) or use --cpu-binding",
                numa_binding_name(numa), rank, id,
                numa == NumaBinding::Socket ? "socket's CPUs" : "CPUs",
                cpus.empty() ? "none" : format_cpu_list(cpus), format_cpu_list(allowed)));
    }

    plans.resize(static_cast<std::size_t>(workers));
    auto memory = [&](int rank) -> std::optional<int> {
        if (!several_nodes) return std::nullopt;
        return gpu_nodes[static_cast<std::size_t>(rank)];
    };
    if (numa != NumaBinding::Exclusive && numa != NumaBinding::CoreComplex) {
        for (int rank = 0; rank < workers; ++rank)
            plans[static_cast<std::size_t>(rank)] =
                make_binding(near[static_cast<std::size_t>(rank)], memory(rank));
        return plans;
    }
    std::map<int, std::vector<int>> sharing;  // node -> local ranks, in rank order
    for (int rank = 0; rank < workers; ++rank)
        sharing[gpu_nodes[static_cast<std::size_t>(rank)]].push_back(rank);
    for (const auto& [id, ranks] : sharing) {
        const auto& cpus = near[static_cast<std::size_t>(ranks.front())];
        if (numa == NumaBinding::CoreComplex) {
            auto complexes = core_complexes(cpus, topology);
            if (!complexes) return std::unexpected(complexes.error());
            // The i-th worker on the node takes complex i, wrapping round when the
            // node has more workers than complexes, as torch 2.14 does: workers then
            // share a complex rather than fail. Torch counts a GPU's place among
            // all the node's GPUs; workers use the GPUs in order, so its place
            // among the workers' GPUs is the same.
            for (std::size_t i = 0; i < ranks.size(); ++i)
                plans[static_cast<std::size_t>(ranks[i])] =
                    make_binding((*complexes)[i % complexes->size()], memory(ranks[i]));
            continue;
        }
        auto shares = split_evenly(cpus, static_cast<int>(ranks.size()), topology);
        if (!shares)
            return std::unexpected(fmt::format(
                "--numa-binding=exclusive: local ranks {} share NUMA node {}, which has only {} "
                "this process may use ({}); use --numa-binding=node to let them share",
                join_ranks(ranks), id, cpu_count_text(cpus.size()), format_cpu_list(cpus)));
        for (std::size_t i = 0; i < ranks.size(); ++i)
            plans[static_cast<std::size_t>(ranks[i])] =
                make_binding(std::move((*shares)[i]), memory(ranks[i]));
    }
    return plans;
}

std::expected<std::vector<int>, std::string> worker_gpu_nodes(NumaBinding numa,
                                                              const NodeResources& resources,
                                                              int workers,
                                                              const Topology& topology) {
    if (resources.devices.empty())
        return std::unexpected(fmt::format(
            "--numa-binding={} binds each worker near its GPU, but {}; use --cpu-binding to split "
            "the CPUs instead",
            numa_binding_name(numa),
            resources.devices_inherited
                ? "the inherited CUDA_VISIBLE_DEVICES lists none"
                : "no GPU was found (no CUDA_VISIBLE_DEVICES, NVML or /proc/driver/nvidia)"));
    if (topology.nodes.empty()) return std::unexpected(no_numa_message(topology, numa));
    std::vector<int> nodes;
    for (int rank = 0; rank < workers; ++rank) {
        std::size_t device = static_cast<std::size_t>(rank) % resources.devices.size();
        const std::string& name = resources.devices[device];
        std::string bus = device < resources.device_pci_bus_ids.size()
                              ? resources.device_pci_bus_ids[device]
                              : std::string();
        std::string which =
            fmt::format("--numa-binding={}: local rank {}'s GPU {}", numa_binding_name(numa), rank,
                        resources.devices_inherited ? "'" + name + "'" : name);
        if (bus.empty())
            return std::unexpected(fmt::format(
                "{}: its PCI bus id is unknown ({}); give GPU indices or GPU-<uuid>s the driver "
                "reports, or drop --numa-binding",
                which,
                resources.devices_inherited
                    ? "no GPU that NVML or /proc/driver/nvidia/gpus reports matches this "
                      "CUDA_VISIBLE_DEVICES entry"
                    : "neither NVML nor /proc/driver/nvidia/gpus gave it"));
        auto node = pci_numa_node(bus, topology);
        if (!node) return std::unexpected(fmt::format("{}: {}", which, node.error()));
        nodes.push_back(*node);
    }
    return nodes;
}

std::expected<std::vector<BindingPlan>, std::string> plan_node_binding(
    const LaunchConfig& config, const NodeResources& resources, int workers,
    const std::string& sysfs_root) {
    if (config.numa_binding == NumaBinding::None && !config.cpu_binding)
        return std::vector<BindingPlan>{};
    Topology topology = read_topology(sysfs_root);
    std::vector<int> gpu_nodes;
    if (config.numa_binding != NumaBinding::None && !config.cpu_binding) {
        auto nodes = worker_gpu_nodes(config.numa_binding, resources, workers, topology);
        if (!nodes) return std::unexpected(nodes.error());
        gpu_nodes = std::move(*nodes);
    }
    return plan_binding(config.numa_binding, config.cpu_binding, workers, gpu_nodes, topology,
                        allowed_cpus());
}

int apply_binding(const BindingPlan& plan) noexcept {
    if (!plan.cpu_mask.empty() &&
        ::syscall(SYS_sched_setaffinity, 0, plan.cpu_mask.size() * sizeof(unsigned long),
                  plan.cpu_mask.data()) != 0)
        return errno;
    if (plan.memory_node && !plan.node_mask.empty()) {
        int saved = errno;
        // maxnode counts one more than the bits the kernel reads.
        ::syscall(SYS_set_mempolicy, MPOL_PREFERRED, plan.node_mask.data(),
                  plan.node_mask.size() * k_mask_bits + 1);
        errno = saved;
    }
    return 0;
}

std::string_view numa_binding_name(NumaBinding mode) {
    switch (mode) {
        case NumaBinding::Node:
            return "node";
        case NumaBinding::Socket:
            return "socket";
        case NumaBinding::Exclusive:
            return "exclusive";
        case NumaBinding::CoreComplex:
            return "core-complex";
        case NumaBinding::None:
            break;
    }
    return "none";
}

}  // namespace ddprun
