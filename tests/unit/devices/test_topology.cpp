// Topology reading and binding plans on fake sysfs trees of 1-, 2- and
// 8-NUMA-node machines, built in a temp dir: every mode, the CPU list syntax,
// bus id forms, and the errors of machines that lack the information.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "ddprun/devices/binding.hpp"
#include "devices/fake_sysfs.hpp"

namespace ddprun {
namespace {

using testing::Cpus;
using testing::describe;
using testing::FakeSysfsTree;
using testing::range;
using testing::Strings;

TEST(CpuList, Parses) {
    struct Case {
        std::string text;
        std::optional<Cpus> cpus;
    };
    const Case cases[] = {
        {"0-3,8-11\n", Cpus{0, 1, 2, 3, 8, 9, 10, 11}},
        {"5", Cpus{5}},
        {"", Cpus{}},
        {"\n", Cpus{}},
        {"3,1,1-2", Cpus{1, 2, 3}},
        {" 0 - 1 ", Cpus{0, 1}},
        {"a", std::nullopt},
        {"3-1", std::nullopt},
        {"-1", std::nullopt},
        {"1-", std::nullopt},
        {"1,,2", std::nullopt},
        {"0-99999999", std::nullopt},
    };
    for (const Case& c : cases) EXPECT_EQ(parse_cpu_list(c.text), c.cpus) << "'" << c.text << "'";
}

TEST(CpuList, Formats) {
    EXPECT_EQ(format_cpu_list({}), "");
    EXPECT_EQ(format_cpu_list({7}), "7");
    EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
    EXPECT_EQ(format_cpu_list({0, 2, 4}), "0,2,4");
    EXPECT_EQ(format_cpu_list({1, 2, 5, 6, 7, 9}), "1-2,5-7,9");
    for (const char* text : {"0-3,8-11", "4", "0,2-5,63-64"})
        EXPECT_EQ(format_cpu_list(*parse_cpu_list(text)), text);
}

TEST(PciBusId, Normalizes) {
    const std::pair<std::string, std::string> cases[] = {
        {"00000000:3B:00.0", "0000:3b:00.0"},  // NVML
        {"0000:3b:00.0", "0000:3b:00.0"},      // sysfs, /proc/driver/nvidia
        {"3b:00.0", "0000:3b:00.0"},           // no domain
        {"0001:AF:1F.7", "0001:af:1f.7"},
        {"10000:01:00.0", "10000:01:00.0"},  // Intel VMD domains have five digits
        {" 0000:18:00.0\n", "0000:18:00.0"},
        {"GPU-ABC", "gpu-abc"},
        {"0000:3b:00.8", "0000:3b:00.8"},  // function 8 does not exist: left as is
    };
    for (const auto& [in, out] : cases) EXPECT_EQ(normalize_pci_bus_id(in), out) << in;
}

// The 1-, 2- and 8-node machines of these tests.
class FakeSysfs : public FakeSysfsTree {
  protected:
    // A workstation: one node, 4 cores with 2 threads (siblings i, i+4); its
    // GPU's numa_node says -1, as single-node firmware often does.
    void one_node_machine() {
        node(0, "0-7");
        for (int i = 0; i < 8; ++i) cpu(i, 0, fmt::format("{},{}", i % 4, i % 4 + 4));
        pci("0000:01:00.0", -1);
        pci("0000:02:00.0", 0);
    }
    // Two Intel sockets with hyperthreads: node 0 = 0-3,8-11, node 1 =
    // 4-7,12-15 (siblings i, i+8); two GPUs per node and one without locality.
    void two_node_machine() {
        node(0, "0-3,8-11");
        node(1, "4-7,12-15");
        for (int i = 0; i < 16; ++i) cpu(i, (i % 8) / 4, fmt::format("{},{}", i % 8, i % 8 + 8));
        pci("0000:18:00.0", 0);
        pci("0000:3b:00.0", 0);
        pci("0000:86:00.0", 1);
        pci("0000:af:00.0", 1);
        pci("0000:d8:00.0", -1);
    }
    // Two AMD sockets in NPS4 mode, no SMT: node n = CPUs 4n..4n+3, nodes 0-3
    // on socket 0; one GPU per node, in the reversed order of DGX-like boards.
    void eight_node_machine() {
        for (int n = 0; n < 8; ++n) node(n, fmt::format("{}-{}", 4 * n, 4 * n + 3));
        for (int i = 0; i < 32; ++i) cpu(i, i / 16, std::to_string(i));
        for (int g = 0; g < 8; ++g) pci(eight_node_gpu(g), k_eight_node_gpu_nodes[g]);
    }
    static constexpr int k_eight_node_gpu_nodes[8] = {3, 2, 1, 0, 7, 6, 5, 4};
    static std::string eight_node_gpu(int g) {
        return fmt::format("0000:{:02x}:00.0", 0x11 * (g + 1));
    }
};

TEST_F(FakeSysfs, ReadsNodesSocketsAndCores) {
    two_node_machine();
    Topology t = topology();
    ASSERT_EQ(t.nodes.size(), 2u);
    EXPECT_EQ(t.nodes[0].id, 0);
    EXPECT_EQ(t.nodes[0].cpus, (Cpus{0, 1, 2, 3, 8, 9, 10, 11}));
    EXPECT_EQ(t.nodes[1].cpus, (Cpus{4, 5, 6, 7, 12, 13, 14, 15}));
    EXPECT_EQ(t.socket.at(3), 0);
    EXPECT_EQ(t.socket.at(12), 1);
    EXPECT_EQ(t.core.at(9), 1);  // the lowest thread of its core
    EXPECT_EQ(t.core.at(1), 1);
    EXPECT_EQ(t.socket.size(), 16u);
}

TEST_F(FakeSysfs, ReadsNodesInNumericOrder) {
    eight_node_machine();
    node(10, "");  // a memory-only node (CXL, HBM): no CPUs
    Topology t = topology();
    ASSERT_EQ(t.nodes.size(), 9u);
    for (int n = 0; n < 8; ++n) EXPECT_EQ(t.nodes[static_cast<std::size_t>(n)].id, n);
    EXPECT_EQ(t.nodes[8].id, 10);
    EXPECT_TRUE(t.nodes[8].cpus.empty());
}

TEST_F(FakeSysfs, EmptyTreeHasNoTopology) {
    Topology t = topology();
    EXPECT_TRUE(t.nodes.empty());
    EXPECT_TRUE(t.socket.empty());
    EXPECT_TRUE(t.core.empty());
}

TEST_F(FakeSysfs, PciNumaNode) {
    two_node_machine();
    Topology t = topology();
    EXPECT_EQ(pci_numa_node("0000:86:00.0", t), 1);
    EXPECT_EQ(pci_numa_node("00000000:3B:00.0", t), 0);  // as NVML spells it
    auto unknown = pci_numa_node("0000:d8:00.0", t);
    ASSERT_FALSE(unknown);
    EXPECT_NE(unknown.error().find("does not know the NUMA node of PCI device 0000:d8:00.0"),
              std::string::npos)
        << unknown.error();
    auto missing = pci_numa_node("0000:99:00.0", t);
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().find("no PCI device 0000:99:00.0 under"), std::string::npos)
        << missing.error();
}

TEST_F(FakeSysfs, NoLocalityOnASingleNodeMachineMeansThatNode) {
    one_node_machine();
    EXPECT_EQ(pci_numa_node("0000:01:00.0", topology()), 0);
}

struct PlanCase {
    const char* name;
    NumaBinding numa;
    bool cpu_split;
    int workers;
    Strings expected;
};

TEST_F(FakeSysfs, PlansOnOneNode) {
    one_node_machine();
    Topology t = topology();
    const Cpus all = range(0, 7);
    const Cpus gpu_nodes(8, 0);
    const PlanCase cases[] = {
        // One node: no memory policy is worth setting.
        {"node", NumaBinding::Node, false, 2, {"0-7", "0-7"}},
        {"socket", NumaBinding::Socket, false, 2, {"0-7", "0-7"}},
        // Whole cores (both threads) per worker.
        {"exclusive", NumaBinding::Exclusive, false, 2, {"0-1,4-5", "2-3,6-7"}},
        {"exclusive, one worker", NumaBinding::Exclusive, false, 1, {"0-7"}},
        // More workers than cores: single threads, the first workers taking the rest.
        {"exclusive, 6 workers",
         NumaBinding::Exclusive,
         false,
         6,
         {"0,4", "1,5", "2", "6", "3", "7"}},
        {"split", NumaBinding::None, true, 2, {"0-1,4-5", "2-3,6-7"}},
        {"split, 3 workers", NumaBinding::None, true, 3, {"0-1,4-5", "2,6", "3,7"}},
        {"split, 8 workers", NumaBinding::None, true, 8, {"0", "4", "1", "5", "2", "6", "3", "7"}},
        {"nothing", NumaBinding::None, false, 4, {}},
    };
    for (const PlanCase& c : cases) {
        auto plans = plan_binding(c.numa, c.cpu_split, c.workers, gpu_nodes, t, all);
        ASSERT_TRUE(plans) << c.name << ": " << plans.error();
        EXPECT_EQ(describe(*plans), c.expected) << c.name;
    }
}

TEST_F(FakeSysfs, PlansOnTwoNodes) {
    two_node_machine();
    Topology t = topology();
    const Cpus all = range(0, 15);
    const Cpus gpu_nodes = {0, 0, 1, 1};
    const PlanCase cases[] = {
        {"node",
         NumaBinding::Node,
         false,
         4,
         {"0-3,8-11@0", "0-3,8-11@0", "4-7,12-15@1", "4-7,12-15@1"}},
        {"socket",
         NumaBinding::Socket,
         false,
         4,
         {"0-3,8-11@0", "0-3,8-11@0", "4-7,12-15@1", "4-7,12-15@1"}},
        {"exclusive",
         NumaBinding::Exclusive,
         false,
         4,
         {"0-1,8-9@0", "2-3,10-11@0", "4-5,12-13@1", "6-7,14-15@1"}},
        {"split",
         NumaBinding::None,
         true,
         4,
         {"0-1,8-9@0", "2-3,10-11@0", "4-5,12-13@1", "6-7,14-15@1"}},
        // The middle share straddles the nodes, so it prefers neither.
        {"split, 3 workers",
         NumaBinding::None,
         true,
         3,
         {"0-2,8-10@0", "3-5,11-13", "6-7,14-15@1"}},
        {"split, 2 workers", NumaBinding::None, true, 2, {"0-3,8-11@0", "4-7,12-15@1"}},
    };
    for (const PlanCase& c : cases) {
        auto plans = plan_binding(c.numa, c.cpu_split, c.workers, gpu_nodes, t, all);
        ASSERT_TRUE(plans) << c.name << ": " << plans.error();
        EXPECT_EQ(describe(*plans), c.expected) << c.name;
    }
}

TEST_F(FakeSysfs, PlansOnEightNodes) {
    eight_node_machine();
    Topology t = topology();
    auto gpu_nodes = worker_gpu_nodes(
        NumaBinding::Node,
        gpus({eight_node_gpu(0), eight_node_gpu(1), eight_node_gpu(2), eight_node_gpu(3),
              eight_node_gpu(4), eight_node_gpu(5), eight_node_gpu(6), eight_node_gpu(7)}),
        8, t);
    ASSERT_TRUE(gpu_nodes) << gpu_nodes.error();
    EXPECT_EQ(*gpu_nodes, (Cpus{3, 2, 1, 0, 7, 6, 5, 4}));
    const Cpus all = range(0, 31);
    const Strings by_node = {"12-15@3", "8-11@2",  "4-7@1",   "0-3@0",
                             "28-31@7", "24-27@6", "20-23@5", "16-19@4"};
    const PlanCase cases[] = {
        {"node", NumaBinding::Node, false, 8, by_node},
        // The socket's four nodes; memory still prefers the GPU's own node.
        {"socket",
         NumaBinding::Socket,
         false,
         8,
         {"0-15@3", "0-15@2", "0-15@1", "0-15@0", "16-31@7", "16-31@6", "16-31@5", "16-31@4"}},
        {"exclusive", NumaBinding::Exclusive, false, 8, by_node},
        // Split in node order, whatever the GPUs' order.
        {"split",
         NumaBinding::None,
         true,
         8,
         {"0-3@0", "4-7@1", "8-11@2", "12-15@3", "16-19@4", "20-23@5", "24-27@6", "28-31@7"}},
        {"split, 2 workers", NumaBinding::None, true, 2, {"0-15", "16-31"}},
    };
    for (const PlanCase& c : cases) {
        auto plans = plan_binding(c.numa, c.cpu_split, c.workers, *gpu_nodes, t, all);
        ASSERT_TRUE(plans) << c.name << ": " << plans.error();
        EXPECT_EQ(describe(*plans), c.expected) << c.name;
    }
}

TEST_F(FakeSysfs, ExclusiveSplitsOnlyAmongWorkersSharingANode) {
    eight_node_machine();
    Topology t = topology();
    auto plans = plan_binding(NumaBinding::Exclusive, false, 4, {0, 5, 0, 0}, t, range(0, 31));
    ASSERT_TRUE(plans) << plans.error();
    EXPECT_EQ(describe(*plans), (Strings{"0-1@0", "20-23@5", "2@0", "3@0"}));
}

TEST_F(FakeSysfs, PlansStayInsideTheAllowedCpus) {
    two_node_machine();
    Topology t = topology();
    auto node = plan_binding(NumaBinding::Node, false, 2, {0, 1}, t, range(0, 5));
    ASSERT_TRUE(node) << node.error();
    EXPECT_EQ(describe(*node), (Strings{"0-3@0", "4-5@1"}));

    // Cores keep their threads together inside the allowed set too.
    auto exclusive = plan_binding(NumaBinding::Exclusive, false, 2, {0, 0}, t, {9, 0, 8, 1});
    ASSERT_TRUE(exclusive) << exclusive.error();
    EXPECT_EQ(describe(*exclusive), (Strings{"0,8@0", "1,9@0"}));

    auto split = plan_binding(NumaBinding::None, true, 2, {}, t, {2, 3, 10, 11});
    ASSERT_TRUE(split) << split.error();
    EXPECT_EQ(describe(*split), (Strings{"2,10@0", "3,11@0"}));

    auto outside = plan_binding(NumaBinding::Node, false, 2, {0, 1}, t, range(0, 3));
    ASSERT_FALSE(outside);
    EXPECT_NE(outside.error().find("local rank 1's GPU is on NUMA node 1, whose CPUs (4-7,12-15) "
                                   "this process may not use (allowed: 0-3)"),
              std::string::npos)
        << outside.error();
}

TEST_F(FakeSysfs, SharesDoNotOverlapAndCoverEverything) {
    two_node_machine();
    Topology t = topology();
    for (int workers = 1; workers <= 16; ++workers) {
        auto plans = plan_binding(NumaBinding::None, true, workers, {}, t, range(0, 15));
        ASSERT_TRUE(plans) << workers << ": " << plans.error();
        Cpus seen;
        std::size_t smallest = 16, largest = 0;
        for (const BindingPlan& plan : *plans) {
            seen.insert(seen.end(), plan.cpus.begin(), plan.cpus.end());
            smallest = std::min(smallest, plan.cpus.size());
            largest = std::max(largest, plan.cpus.size());
        }
        std::sort(seen.begin(), seen.end());
        EXPECT_EQ(seen, range(0, 15)) << workers << " workers";
        EXPECT_LE(largest - smallest, 2u) << workers << " workers";  // one core of two threads
    }
}

// Each case: a plan that must fail, and a phrase its message must hold.
TEST_F(FakeSysfs, PlanErrorsSayWhatIsMissing) {
    two_node_machine();
    Topology t = topology();
    Topology no_sockets = t;
    no_sockets.socket.clear();
    Topology none;
    none.sysfs_root = "/fake";
    struct Case {
        const char* name;
        NumaBinding numa;
        bool cpu_split;
        int workers;
        Cpus gpu_nodes;
        const Topology* topology;
        Cpus allowed;
        std::string phrase;
    };
    const Case cases[] = {
        {"both", NumaBinding::Node, true, 2, {0, 0}, &t, range(0, 15), "pick one"},
        {"no numa",
         NumaBinding::Node,
         false,
         1,
         {0},
         &none,
         range(0, 15),
         "--numa-binding=node: this machine reports no NUMA nodes (nothing under "
         "/fake/devices/system/node"},
        {"node not listed",
         NumaBinding::Node,
         false,
         1,
         {5},
         &t,
         range(0, 15),
         "local rank 0's GPU is on NUMA node 5, which"},
        {"worker without gpu",
         NumaBinding::Socket,
         false,
         3,
         {0, 1},
         &t,
         range(0, 15),
         "local rank 2 has no GPU"},
        {"no sockets",
         NumaBinding::Socket,
         false,
         1,
         {1},
         &no_sockets,
         range(0, 15),
         "the socket of CPU 4 is unknown"},
        {"exclusive crowded",
         NumaBinding::Exclusive,
         false,
         3,
         {1, 1, 1},
         &t,
         {4, 12},
         "local ranks 0,1,2 share NUMA node 1, which has only 2 CPUs this process may use (4,12)"},
        {"split crowded",
         NumaBinding::None,
         true,
         5,
         {},
         &t,
         {0, 1, 2, 3},
         "--cpu-binding: 5 workers but only 4 CPUs to share (0-3)"},
        {"split nothing", NumaBinding::None, true, 1, {}, &t, {}, "only 0 CPUs"},
    };
    for (const Case& c : cases) {
        auto plans =
            plan_binding(c.numa, c.cpu_split, c.workers, c.gpu_nodes, *c.topology, c.allowed);
        ASSERT_FALSE(plans) << c.name;
        EXPECT_NE(plans.error().find(c.phrase), std::string::npos)
            << c.name << ": " << plans.error();
    }
}

TEST_F(FakeSysfs, GpuNodeErrorsNameTheGpu) {
    two_node_machine();
    Topology t = topology();
    NodeResources inherited;
    inherited.devices = {"GPU-8f2a", "3"};
    inherited.devices_inherited = true;
    inherited.device_pci_bus_ids = {"0000:18:00.0", ""};
    NodeResources inherited_none;
    inherited_none.devices_inherited = true;
    const std::pair<NodeResources, std::string> cases[] = {
        {NodeResources{}, "binds each worker near its GPU, but no GPU was found"},
        {inherited_none, "the inherited CUDA_VISIBLE_DEVICES lists none"},
        {inherited, "local rank 1's GPU '3': its PCI bus id is unknown"},
        {gpus({"0000:18:00.0", "0000:d8:00.0"}),
         "local rank 1's GPU 1: the kernel does not know the NUMA node of PCI device 0000:d8:00.0"},
        {gpus({"0000:99:00.0"}), "local rank 0's GPU 0: no PCI device 0000:99:00.0"},
    };
    for (const auto& [resources, phrase] : cases) {
        auto nodes = worker_gpu_nodes(NumaBinding::Node, resources, 2, t);
        ASSERT_FALSE(nodes) << phrase;
        EXPECT_NE(nodes.error().find(phrase), std::string::npos) << nodes.error();
    }
    Topology none;
    auto no_numa = worker_gpu_nodes(NumaBinding::Exclusive, gpus({"0000:18:00.0"}), 1, none);
    ASSERT_FALSE(no_numa);
    EXPECT_NE(no_numa.error().find("--numa-binding=exclusive: this machine reports no NUMA nodes"),
              std::string::npos)
        << no_numa.error();
}

TEST_F(FakeSysfs, NodeBindingThroughTheAgentEntryPoint) {
    one_node_machine();
    LaunchConfig config;
    EXPECT_TRUE(plan_node_binding(config, gpus({"0000:01:00.0"}), 1, m_root.string())->empty());

    // The real affinity of this process bounds the plan, whatever the fake says.
    Cpus expected;
    for (int cpu : allowed_cpus())
        if (cpu < 8) expected.push_back(cpu);
    if (expected.empty()) GTEST_SKIP() << "no CPU 0-7 allowed here";
    config.numa_binding = NumaBinding::Node;
    auto plans =
        plan_node_binding(config, gpus({"0000:01:00.0", "0000:02:00.0"}), 2, m_root.string());
    ASSERT_TRUE(plans) << plans.error();
    ASSERT_EQ(plans->size(), 2u);
    EXPECT_EQ((*plans)[0].cpus, expected);
    EXPECT_EQ((*plans)[1].cpus, expected);

    config.numa_binding = NumaBinding::None;
    config.cpu_binding = true;
    auto split = plan_node_binding(config, NodeResources{}, 1, m_root.string());
    ASSERT_TRUE(split) << split.error();
    ASSERT_EQ(split->size(), 1u);
    EXPECT_EQ((*split)[0].cpus, allowed_cpus());

    config.numa_binding = NumaBinding::Node;
    config.cpu_binding = false;
    auto no_gpu = plan_node_binding(config, NodeResources{}, 1, m_root.string());
    ASSERT_FALSE(no_gpu);
    EXPECT_NE(no_gpu.error().find("no GPU was found"), std::string::npos) << no_gpu.error();
}

TEST(Topology, ThisMachinesCpusAreInItsNodes) {
    Topology t = read_topology();
    if (t.nodes.empty()) GTEST_SKIP() << "/sys shows no NUMA nodes here";
    Cpus in_nodes;
    for (const NumaNode& node : t.nodes)
        in_nodes.insert(in_nodes.end(), node.cpus.begin(), node.cpus.end());
    std::sort(in_nodes.begin(), in_nodes.end());
    for (int cpu : allowed_cpus())
        EXPECT_TRUE(std::binary_search(in_nodes.begin(), in_nodes.end(), cpu)) << "cpu " << cpu;
}

TEST(Binding, MasksMatchTheLists) {
    BindingPlan plan = make_binding({65, 0, 3}, 9);
    EXPECT_EQ(plan.cpus, (Cpus{0, 3, 65}));
    ASSERT_EQ(plan.cpu_mask.size(), 2u);
    EXPECT_EQ(plan.cpu_mask[0], 0b1001UL);
    EXPECT_EQ(plan.cpu_mask[1], 0b10UL);
    ASSERT_EQ(plan.node_mask.size(), 1u);
    EXPECT_EQ(plan.node_mask[0], 1UL << 9);
    BindingPlan empty = make_binding({}, std::nullopt);
    EXPECT_TRUE(empty.cpu_mask.empty());
    EXPECT_TRUE(empty.node_mask.empty());
}

}  // namespace
}  // namespace ddprun
