// --numa-binding=core-complex: last-level caches read from fake sysfs trees
// (AMD EPYC-like core complexes, Intel-like one L3 per socket, machines that
// list no caches) and the plans made from them, as torch 2.14 places
// workers; then this machine's own /sys, checked against shared_cpu_list.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ddprun/devices/binding.hpp"
#include "devices/fake_sysfs.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;
using testing::Cpus;
using testing::describe;
using testing::FakeSysfsTree;
using testing::range;
using testing::Strings;

class CoreComplexBinding : public FakeSysfsTree {
  protected:
    // Two EPYC-like sockets of one NUMA node each (NPS1), 8 cores with SMT
    // (siblings i, i+16), two core complexes of 4 cores per node: node 0 =
    // 0-7,16-23 with L3s 0-3,16-19 and 4-7,20-23; node 1 = 8-15,24-31. Two
    // GPUs per node.
    void epyc_machine() {
        node(0, "0-7,16-23");
        node(1, "8-15,24-31");
        for (int i = 0; i < 32; ++i) {
            int core = i % 16;
            std::string threads = fmt::format("{},{}", core, core + 16);
            cpu(i, core / 8, threads);
            int first = core / 4 * 4;
            x86_caches(i, threads,
                       fmt::format("{}-{},{}-{}", first, first + 3, first + 16, first + 19));
        }
        pci("0000:01:00.0", 0);
        pci("0000:41:00.0", 0);
        pci("0000:81:00.0", 1);
        pci("0000:c1:00.0", 1);
    }
    // Two Intel-like sockets, 4 cores with SMT each (siblings i, i+8) and one
    // L3 per socket; one NUMA node per socket, or two (sub-NUMA clustering:
    // nodes of 2 cores that still share the socket's L3).
    void intel_machine(bool sub_numa) {
        if (sub_numa) {
            for (int n = 0; n < 4; ++n)
                node(n, fmt::format("{}-{},{}-{}", 2 * n, 2 * n + 1, 2 * n + 8, 2 * n + 9));
        } else {
            node(0, "0-3,8-11");
            node(1, "4-7,12-15");
        }
        for (int i = 0; i < 16; ++i) {
            int core = i % 8;
            std::string threads = fmt::format("{},{}", core, core + 8);
            cpu(i, core / 4, threads);
            x86_caches(i, threads, core < 4 ? "0-3,8-11" : "4-7,12-15");
        }
    }
};

TEST_F(CoreComplexBinding, ReadsTheLastLevelCacheOfEachCpu) {
    epyc_machine();
    Topology t = topology();
    ASSERT_EQ(t.last_level_cache.size(), 32u);
    const std::pair<int, int> cases[] = {{0, 0},  {3, 0}, {17, 0},  {4, 4},
                                         {21, 4}, {8, 8}, {15, 12}, {31, 12}};
    for (const auto& [cpu, lowest] : cases) EXPECT_EQ(t.last_level_cache.at(cpu), lowest) << cpu;
}

// What counts as a CPU's last-level cache, one CPU per case.
TEST_F(CoreComplexBinding, TheLastLevelIsTheHighestDataOrUnifiedCache) {
    node(0, "0-5");
    struct Cache {
        int index;
        int level;
        std::string type;
        std::string shared;
    };
    struct Case {
        const char* name;
        std::vector<Cache> caches;
        std::optional<int> lowest;
    };
    const Case cases[] = {
        {"x86", {{0, 1, "Data", "0"}, {1, 1, "Instruction", "0"}, {2, 3, "Unified", "0-5"}}, 0},
        // No L3 (some Arm and VM layouts): the L2 then, as torch takes it.
        {"l2 last", {{0, 1, "Data", "1"}, {1, 2, "Unified", "0-1"}}, 0},
        {"instruction ignored", {{0, 2, "Unified", "2-3"}, {1, 3, "Instruction", "0-5"}}, 2},
        // Indices out of level order.
        {"order", {{0, 3, "Unified", "0-5"}, {1, 1, "Data", "3"}, {2, 2, "Unified", "3"}}, 0},
        {"instruction only", {{0, 1, "Instruction", "4"}}, std::nullopt},
        {"no cache dir", {}, std::nullopt},
    };
    for (std::size_t i = 0; i < std::size(cases); ++i)
        for (const Cache& c : cases[i].caches)
            cache(static_cast<int>(i), c.index, c.level, c.type, c.shared);
    Topology t = topology();
    for (std::size_t i = 0; i < std::size(cases); ++i) {
        auto it = t.last_level_cache.find(static_cast<int>(i));
        std::optional<int> got;
        if (it != t.last_level_cache.end()) got = it->second;
        EXPECT_EQ(got, cases[i].lowest) << cases[i].name;
    }
}

struct PlanCase {
    const char* name;
    Cpus gpu_nodes;  // one per worker
    Cpus allowed;
    Strings expected;  // "cpus@node" per worker
};

template <std::size_t N>
void expect_plans(const PlanCase (&cases)[N], const Topology& t) {
    for (const PlanCase& c : cases) {
        auto plans = plan_binding(NumaBinding::CoreComplex, false,
                                  static_cast<int>(c.gpu_nodes.size()), c.gpu_nodes, t, c.allowed);
        ASSERT_TRUE(plans) << c.name << ": " << plans.error();
        EXPECT_EQ(describe(*plans), c.expected) << c.name;
    }
}

TEST_F(CoreComplexBinding, PlansOnEpycComplexes) {
    epyc_machine();
    const Cpus all = range(0, 31);
    const PlanCase cases[] = {
        {"2 gpus, one per node", {0, 1}, all, {"0-3,16-19@0", "8-11,24-27@1"}},
        {"2 gpus on one node", {0, 0}, all, {"0-3,16-19@0", "4-7,20-23@0"}},
        {"4 gpus",
         {0, 0, 1, 1},
         all,
         {"0-3,16-19@0", "4-7,20-23@0", "8-11,24-27@1", "12-15,28-31@1"}},
        // The node's order of workers decides, not the nodes' order.
        {"4 gpus, node 1 first",
         {1, 1, 0, 0},
         all,
         {"8-11,24-27@1", "12-15,28-31@1", "0-3,16-19@0", "4-7,20-23@0"}},
        {"1 gpu", {1}, all, {"8-11,24-27@1"}},
        // More workers than complexes: they wrap round and share, as torch does.
        {"3 workers on a node of 2 complexes",
         {0, 0, 0},
         all,
         {"0-3,16-19@0", "4-7,20-23@0", "0-3,16-19@0"}},
    };
    expect_plans(cases, topology());
}

TEST_F(CoreComplexBinding, PlansOnOneL3PerSocket) {
    intel_machine(false);
    const PlanCase cases[] = {
        // One complex per node: the workers share it, as with --numa-binding=node.
        {"2 gpus per node",
         {0, 0, 1, 1},
         range(0, 15),
         {"0-3,8-11@0", "0-3,8-11@0", "4-7,12-15@1", "4-7,12-15@1"}},
    };
    expect_plans(cases, topology());
}

TEST_F(CoreComplexBinding, AnL3WiderThanTheNodeIsCutToTheNode) {
    intel_machine(true);
    const PlanCase cases[] = {
        {"sub-numa nodes",
         {0, 1, 2, 3},
         range(0, 15),
         {"0-1,8-9@0", "2-3,10-11@1", "4-5,12-13@2", "6-7,14-15@3"}},
    };
    expect_plans(cases, topology());
}

TEST_F(CoreComplexBinding, PlansStayInsideTheAllowedCpus) {
    epyc_machine();
    Cpus without_cpu_0 = range(1, 7);
    for (int cpu : range(16, 23)) without_cpu_0.push_back(cpu);
    const PlanCase cases[] = {
        {"no hyperthreads", {0, 0}, range(0, 7), {"0-3@0", "4-7@0"}},
        // A complex cut down by the allowed set comes after the whole ones, as
        // torch orders them (the most allowed CPUs first).
        {"cpu 0 taken away", {0, 0}, without_cpu_0, {"4-7,20-23@0", "1-3,16-19@0"}},
        {"cpu 0 taken away, one worker", {0}, without_cpu_0, {"4-7,20-23@0"}},
        // Only one complex of the node left: both workers share it.
        {"one complex allowed", {0, 0}, range(4, 7), {"4-7@0", "4-7@0"}},
        {"one cpu of each complex", {0, 0}, {2, 5}, {"2@0", "5@0"}},
    };
    expect_plans(cases, topology());
}

TEST_F(CoreComplexBinding, GpusPlacedThroughSysfs) {
    epyc_machine();
    Topology t = topology();
    auto gpu_nodes = worker_gpu_nodes(
        NumaBinding::CoreComplex,
        gpus({"0000:01:00.0", "0000:41:00.0", "0000:81:00.0", "0000:c1:00.0"}), 4, t);
    ASSERT_TRUE(gpu_nodes) << gpu_nodes.error();
    auto plans = plan_binding(NumaBinding::CoreComplex, false, 4, *gpu_nodes, t, range(0, 31));
    ASSERT_TRUE(plans) << plans.error();
    EXPECT_EQ(describe(*plans),
              (Strings{"0-3,16-19@0", "4-7,20-23@0", "8-11,24-27@1", "12-15,28-31@1"}));
}

// Caches are only needed on the nodes the workers use.
TEST_F(CoreComplexBinding, CachesMissingOnAnUnusedNodeDoNotMatter) {
    epyc_machine();
    for (int cpu : {8, 15, 27})
        fs::remove_all(m_root / fmt::format("devices/system/cpu/cpu{}/cache", cpu));
    auto plans = plan_binding(NumaBinding::CoreComplex, false, 1, {0}, topology(), range(0, 31));
    ASSERT_TRUE(plans) << plans.error();
    EXPECT_EQ(describe(*plans), (Strings{"0-3,16-19@0"}));
}

// Each case: a plan that must fail, and a phrase its message must hold.
TEST_F(CoreComplexBinding, ErrorsSayWhatIsMissing) {
    epyc_machine();
    Topology t = topology();
    Topology no_caches = t;
    no_caches.last_level_cache.clear();
    Topology none;
    none.sysfs_root = "/fake";
    Topology one_missing = t;
    one_missing.last_level_cache.erase(5);
    struct Case {
        const char* name;
        Cpus gpu_nodes;
        int workers;
        const Topology* topology;
        Cpus allowed;
        std::string phrase;
    };
    const std::string root = m_root.string();
    const Case cases[] = {
        {"no caches",
         {0},
         1,
         &no_caches,
         range(0, 31),
         fmt::format("--numa-binding=core-complex: sysfs lists no cache of CPU 0 (no "
                     "{}/devices/system/cpu/cpu0/cache/index*/ of a data or unified cache",
                     root)},
        {"no caches: what to use", {0}, 1, &no_caches, range(0, 31), "use --numa-binding=node"},
        {"one cpu without", {0, 0}, 2, &one_missing, range(0, 31), "no cache of CPU 5 "},
        {"no numa",
         {0},
         1,
         &none,
         range(0, 31),
         "--numa-binding=core-complex: this machine reports no NUMA nodes"},
        {"node not listed",
         {3},
         1,
         &t,
         range(0, 31),
         "local rank 0's GPU is on NUMA node 3, which"},
        {"worker without gpu", {0}, 2, &t, range(0, 31), "local rank 1 has no GPU"},
        {"node not allowed",
         {1},
         1,
         &t,
         range(0, 7),
         "--numa-binding=core-complex: local rank 0's GPU is on NUMA node 1, whose CPUs "
         "(8-15,24-31) this process may not use (allowed: 0-7)"},
    };
    for (const Case& c : cases) {
        auto plans = plan_binding(NumaBinding::CoreComplex, false, c.workers, c.gpu_nodes,
                                  *c.topology, c.allowed);
        ASSERT_FALSE(plans) << c.name;
        EXPECT_NE(plans.error().find(c.phrase), std::string::npos)
            << c.name << ": " << plans.error();
        EXPECT_EQ(plans.error().find('\n'), std::string::npos) << c.name << ": one line";
    }
    auto both = plan_binding(NumaBinding::CoreComplex, true, 1, {0}, t, range(0, 31));
    ASSERT_FALSE(both);
    EXPECT_NE(both.error().find("--cpu-binding with --numa-binding=core-complex: pick one"),
              std::string::npos)
        << both.error();
}

TEST(CoreComplexBindingName, IsTorchrunsSpelling) {
    EXPECT_EQ(numa_binding_name(NumaBinding::CoreComplex), "core-complex");
}

// --- This machine ---------------------------------------------------------
// Read with code of its own rather than ddprun's, so the check does not
// repeat the implementation.

std::set<int> parse_list(std::string text) {
    std::set<int> cpus;
    std::replace(text.begin(), text.end(), ',', ' ');
    std::istringstream words(text);
    std::string word;
    while (words >> word) {
        auto dash = word.find('-');
        int first = std::stoi(word.substr(0, dash));
        int last = dash == std::string::npos ? first : std::stoi(word.substr(dash + 1));
        for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
    }
    return cpus;
}

std::string slurp(const fs::path& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The CPUs sharing `cpu`'s L3 by its index*/level "3" entry; empty if none.
std::set<int> l3_of(int cpu) {
    std::error_code ec;
    fs::path dir = fmt::format("/sys/devices/system/cpu/cpu{}/cache", cpu);
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().filename().string().starts_with("index") &&
            std::atoi(slurp(entry.path() / "level").c_str()) == 3)
            return parse_list(slurp(entry.path() / "shared_cpu_list"));
    return {};
}

// Two workers near each NUMA node this process may run on: each gets the
// node's allowed CPUs of one L3 exactly, the two get different L3s where the
// node has several, and a machine whose /sys lists no caches is told so.
TEST(CoreComplexBindingHere, EachWorkerGetsTheCpusOfOneL3) {
    Topology t = read_topology();
    if (t.nodes.empty()) GTEST_SKIP() << "/sys shows no NUMA nodes here";
    const Cpus allowed = allowed_cpus();
    const std::set<int> allowed_set(allowed.begin(), allowed.end());
    Cpus gpu_nodes;
    bool caches_listed = true;
    for (const NumaNode& node : t.nodes) {
        bool used = false;
        for (int cpu : node.cpus)
            if (allowed_set.contains(cpu)) {
                used = true;
                std::error_code ec;
                if (!fs::exists(fmt::format("/sys/devices/system/cpu/cpu{}/cache", cpu), ec))
                    caches_listed = false;
            }
        if (used) gpu_nodes.insert(gpu_nodes.end(), {node.id, node.id});
    }
    ASSERT_FALSE(gpu_nodes.empty()) << "no NUMA node holds an allowed CPU";
    auto plans = plan_binding(NumaBinding::CoreComplex, false, static_cast<int>(gpu_nodes.size()),
                              gpu_nodes, t, allowed);
    if (!caches_listed) {
        ASSERT_FALSE(plans) << "planned without caches";
        EXPECT_NE(plans.error().find("sysfs lists no cache of CPU"), std::string::npos)
            << plans.error();
        EXPECT_NE(plans.error().find("--numa-binding=node"), std::string::npos) << plans.error();
        GTEST_SKIP() << "/sys lists no CPU caches here; checked the error: " << plans.error();
    }
    ASSERT_TRUE(plans) << plans.error();
    ASSERT_EQ(plans->size(), gpu_nodes.size());
    for (std::size_t rank = 0; rank < plans->size(); ++rank) {
        const Cpus& cpus = (*plans)[rank].cpus;
        ASSERT_FALSE(cpus.empty()) << "rank " << rank;
        std::set<int> l3 = l3_of(cpus.front());
        if (l3.empty()) GTEST_SKIP() << "CPU " << cpus.front() << " has no L3 here";
        std::set<int> node_cpus = parse_list(
            slurp(fmt::format("/sys/devices/system/node/node{}/cpulist", gpu_nodes[rank])));
        Cpus expected;
        for (int cpu : l3)
            if (node_cpus.contains(cpu) && allowed_set.contains(cpu)) expected.push_back(cpu);
        EXPECT_EQ(format_cpu_list(cpus), format_cpu_list(expected))
            << "rank " << rank << " on node " << gpu_nodes[rank];
        for (int cpu : cpus) EXPECT_EQ(l3_of(cpu), l3) << "CPU " << cpu << " of rank " << rank;
    }
    // The node's distinct L3s among its allowed CPUs: several means two workers apart.
    for (std::size_t rank = 0; rank + 1 < plans->size(); rank += 2) {
        std::set<std::set<int>> l3s;
        for (int cpu : parse_list(
                 slurp(fmt::format("/sys/devices/system/node/node{}/cpulist", gpu_nodes[rank]))))
            if (allowed_set.contains(cpu)) l3s.insert(l3_of(cpu));
        if (l3s.size() > 1)
            EXPECT_NE((*plans)[rank].cpus, (*plans)[rank + 1].cpus) << "node " << gpu_nodes[rank];
        else
            EXPECT_EQ((*plans)[rank].cpus, (*plans)[rank + 1].cpus) << "node " << gpu_nodes[rank];
    }
}

}  // namespace
}  // namespace ddprun
