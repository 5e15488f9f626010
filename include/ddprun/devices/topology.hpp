// Topology: this machine's NUMA nodes, sockets, physical cores, last-level
// caches and where a PCI device (a GPU) sits, as sysfs tells it, for
// --numa-binding and --cpu-binding (binding.hpp). Everything reads under a
// root path, so tests build fake 1-, 2- and 8-node machines in a temp dir.
#pragma once

#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

struct NumaNode {
    int id = 0;
    std::vector<int> cpus;  // sorted; empty for a memory-only node
};

// What the kernel says about this machine's CPUs. Any part may be missing
// (containers with a partial /sys, VMs without NUMA tables).
struct Topology {
    std::vector<NumaNode> nodes;  // by id; empty: no <sysfs>/devices/system/node/node*
    std::map<int, int> socket;    // cpu -> physical_package_id
    std::map<int, int> core;      // cpu -> lowest cpu of its physical core (thread siblings)
    // cpu -> lowest cpu sharing its last-level cache: the shared_cpu_list of the
    // highest-level data or unified cache under cpu<N>/cache/index*/ (L3 on x86
    // servers; one per core complex on AMD EPYC, one per socket on most Intel).
    std::map<int, int> last_level_cache;
    std::string sysfs_root = "/sys";  // where it was read, for messages
};

Topology read_topology(const std::string& sysfs_root = "/sys");

// "00000000:3B:00.0" (NVML), "3b:00.0" or "0000:3b:00.0" -> "0000:3b:00.0",
// the name of the device's directory under /sys/bus/pci/devices. Text that is
// not a bus id comes back lower-cased.
std::string normalize_pci_bus_id(std::string_view bus_id);

// The NUMA node of the PCI device `bus_id`, from
// <sysfs>/bus/pci/devices/<bus>/numa_node. On a machine with one NUMA node the
// kernel often says -1 ("no affinity"): that is then the one node. Errors name
// the device and the file.
std::expected<int, std::string> pci_numa_node(const std::string& bus_id, const Topology& topology);

// The kernel's cpu list syntax, "0-3,8-11" (sorted, deduplicated); nullopt
// for text that is not one. "" is the empty list.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
// The reverse, with ranges: {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity): taskset, a cgroup
// cpuset or Slurm's binding narrow it, and every plan stays inside it.
std::vector<int> allowed_cpus();

}  // namespace ddprun
