// A /sys tree in a temp dir with just the files ddprun reads, for the
// topology and binding tests: each test builds the machine it needs (NUMA
// nodes, CPUs with their cores, caches, PCI devices) and reads it back
// through read_topology's root.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ddprun/devices/binding.hpp"

namespace ddprun::testing {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;
using Cpus = std::vector<int>;

class FakeSysfsTree : public ::testing::Test {
  protected:
    void SetUp() override {
        m_root = fs::temp_directory_path() /
                 ("ddprun-sysfs-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(m_root);
        fs::create_directories(m_root);
    }
    void TearDown() override { fs::remove_all(m_root); }

    void write(const fs::path& relative, const std::string& text) {
        fs::create_directories((m_root / relative).parent_path());
        std::ofstream(m_root / relative) << text << "\n";
    }
    void node(int id, const std::string& cpulist) {
        write(fmt::format("devices/system/node/node{}/cpulist", id), cpulist);
    }
    void cpu(int id, int socket, const std::string& siblings) {
        write(fmt::format("devices/system/cpu/cpu{}/topology/physical_package_id", id),
              std::to_string(socket));
        write(fmt::format("devices/system/cpu/cpu{}/topology/thread_siblings_list", id), siblings);
    }
    void pci(const std::string& bus, int numa_node) {
        write("bus/pci/devices/" + bus + "/numa_node", std::to_string(numa_node));
    }

    Topology topology() const { return read_topology(m_root.string()); }

    static NodeResources gpus(const Strings& bus_ids) {
        NodeResources resources;
        for (std::size_t i = 0; i < bus_ids.size(); ++i)
            resources.devices.push_back(std::to_string(i));
        resources.device_pci_bus_ids = bus_ids;
        return resources;
    }

    // One cache of `cpu`: cpu<N>/cache/index<K>/{level,type,shared_cpu_list}.
    void cache(int cpu, int index, int level, const std::string& type,
               const std::string& shared_cpu_list) {
        auto dir = fmt::format("devices/system/cpu/cpu{}/cache/index{}/", cpu, index);
        write(dir + "level", std::to_string(level));
        write(dir + "type", type);
        write(dir + "shared_cpu_list", shared_cpu_list);
    }
    // The caches of an x86 core: L1 data and instruction and L2 of its own
    // threads, L3 shared with `l3_shared`.
    void x86_caches(int cpu, const std::string& threads, const std::string& l3_shared) {
        cache(cpu, 0, 1, "Data", threads);
        cache(cpu, 1, 1, "Instruction", threads);
        cache(cpu, 2, 2, "Unified", threads);
        cache(cpu, 3, 3, "Unified", l3_shared);
    }

    fs::path m_root;
};

// "cpus@node" per worker, "cpus" when no memory node is set.
inline Strings describe(const std::vector<BindingPlan>& plans) {
    Strings out;
    for (const BindingPlan& plan : plans)
        out.push_back(format_cpu_list(plan.cpus) +
                      (plan.memory_node ? fmt::format("@{}", *plan.memory_node) : ""));
    return out;
}

inline Cpus range(int first, int last) {
    Cpus cpus;
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    return cpus;
}

}  // namespace ddprun::testing
