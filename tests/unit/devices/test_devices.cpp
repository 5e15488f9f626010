// Device discovery: the inherited list wins and is kept verbatim; otherwise
// NVML (a fake library here), else the driver's /proc tree (a fake root: the
// build machines have no GPU). Bus ids come along for --numa-binding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../fake_nvml/fake_nvml_control.hpp"
#include "ddprun/devices/devices.hpp"
#include "support/build_paths.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;
using test::FakeNvml;
using test::ScopedEnv;

using Strings = std::vector<std::string>;

TEST(Devices, SplitKeepsEntriesVerbatim) {
    EXPECT_EQ(split_visible_devices("4,5,6,7"), (Strings{"4", "5", "6", "7"}));
    EXPECT_EQ(split_visible_devices("GPU-8f2a-11,MIG-1c3d/1/0"),
              (Strings{"GPU-8f2a-11", "MIG-1c3d/1/0"}));
    EXPECT_EQ(split_visible_devices(" 1 , 2 "), (Strings{"1", "2"}));
    EXPECT_TRUE(split_visible_devices("").empty());
    EXPECT_TRUE(split_visible_devices("-1").empty());
    EXPECT_EQ(split_visible_devices("0,-1,2"), (Strings{"0"}));
}

TEST(Devices, LocatesEntriesByIndexUuidAndLegacyMigName) {
    const std::vector<GpuInfo> gpus = {
        {0, "GPU-8f2a0c11-aaaa", "0000:18:00.0"},
        {1, "GPU-8f2b7d22-bbbb", "0000:3b:00.0"},
        {2, "", "0000:86:00.0"},
    };
    struct Case {
        std::string entry;
        std::string bus;
    };
    const Case cases[] = {
        {"0", "0000:18:00.0"},
        {"2", "0000:86:00.0"},
        {"3", ""},  // no such GPU
        {"GPU-8f2a0c11-aaaa", "0000:18:00.0"},
        {"GPU-8f2b", "0000:3b:00.0"},  // a unique prefix, as CUDA accepts
        {"GPU-8f2", ""},               // ambiguous
        {"GPU-ffff", ""},
        {"MIG-GPU-8f2b7d22-bbbb/1/0", "0000:3b:00.0"},
        {"MIG-5c1e9a00-cccc", ""},  // a modern MIG name says nothing about its GPU
        {"x", ""},
        {"01", "0000:3b:00.0"},
        // Not indices, and never an exception, however long or odd.
        {"99999999999999999999999", ""},
        {"000000000000000000001", "0000:3b:00.0"},
        {"+1", ""},
        {"1x", ""},
        {"1.0", ""},
    };
    for (const Case& c : cases)
        EXPECT_EQ(locate_devices({c.entry}, gpus), Strings{c.bus}) << c.entry;
    EXPECT_EQ(locate_devices({"1", "0"}, gpus), (Strings{"0000:3b:00.0", "0000:18:00.0"}));
}

class DevicesProc : public testing::Test {
  protected:
    void SetUp() override {
        m_root = fs::temp_directory_path() /
                 ("ddprun-devices-" + std::to_string(::getpid()) + "-" +
                  testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::create_directories(m_root);
    }
    void TearDown() override { fs::remove_all(m_root); }
    // As the driver writes it; `uuid` "" leaves the line out.
    void add_gpu(const std::string& bus, const std::string& uuid = "") {
        fs::create_directories(m_root / "driver/nvidia/gpus" / bus);
        std::ofstream out(m_root / "driver/nvidia/gpus" / bus / "information");
        out << "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n";
        if (!uuid.empty()) out << "GPU UUID: \t " << uuid << "\n";
        out << "Video BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            << "DMA Mask: \t 0xfffffffffffff\nBus Location: \t " << bus << "\nDevice Minor: \t 3\n";
    }
    // /proc only: NVML is not tried.
    DeviceSources proc_only() const { return {m_root.string(), "", false}; }
    DeviceSources with_fake_nvml(bool locate_inherited = false) const {
        return {m_root.string(), ddprun_test::build_paths::fake_nvml_library, locate_inherited};
    }
    fs::path m_root;
};

TEST_F(DevicesProc, NoDriverMeansNoGpu) {
    EXPECT_TRUE(discover_gpus(m_root).empty());
    auto res = node_resources({}, proc_only());
    EXPECT_TRUE(res.devices.empty());
    EXPECT_TRUE(res.device_pci_bus_ids.empty());
}

TEST_F(DevicesProc, CountsDriverGpus) {
    add_gpu("0000:3b:00.0");
    add_gpu("0000:5e:00.0");
    EXPECT_EQ(discover_gpus(m_root), (Strings{"0", "1"}));
    auto res = node_resources({}, proc_only());
    EXPECT_EQ(res.devices, (Strings{"0", "1"}));
    EXPECT_EQ(res.device_pci_bus_ids, (Strings{"0000:3b:00.0", "0000:5e:00.0"}));
    EXPECT_FALSE(res.devices_inherited);
    EXPECT_GE(res.cpus, 1);
}

TEST_F(DevicesProc, DriverGpusComeInBusOrderWithTheirUuids) {
    add_gpu("0000:af:00.0", "GPU-cccc");
    add_gpu("0000:18:00.0", "GPU-aaaa");
    add_gpu("0000:3b:00.0");  // the driver prints "??" before it initializes a GPU
    auto gpus = proc_gpus(m_root);
    ASSERT_EQ(gpus.size(), 3u);
    EXPECT_EQ(gpus[0].pci_bus_id, "0000:18:00.0");
    EXPECT_EQ(gpus[0].uuid, "GPU-aaaa");
    EXPECT_EQ(gpus[1].pci_bus_id, "0000:3b:00.0");
    EXPECT_EQ(gpus[1].uuid, "");
    EXPECT_EQ(gpus[2].pci_bus_id, "0000:af:00.0");
    EXPECT_EQ(gpus[2].index, 2);
}

TEST_F(DevicesProc, InheritedListWinsOverDriver) {
    add_gpu("0000:3b:00.0");
    auto res = node_resources({{"CUDA_VISIBLE_DEVICES", "6,7"}}, proc_only());
    EXPECT_EQ(res.devices, (Strings{"6", "7"}));
    EXPECT_TRUE(res.devices_inherited);
    EXPECT_EQ(res.device_pci_bus_ids, (Strings{"", ""}));
    auto none = node_resources({{"CUDA_VISIBLE_DEVICES", ""}}, proc_only());
    EXPECT_TRUE(none.devices.empty());
    EXPECT_TRUE(none.devices_inherited);
}

TEST_F(DevicesProc, NvmlWinsOverDriver) {
    // In a container the driver lists every GPU of the host; NVML only those we can open.
    add_gpu("0000:18:00.0");
    add_gpu("0000:3b:00.0");
    add_gpu("0000:86:00.0");
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS", "GPU-b@00000000:3B:00.0,GPU-c@00000000:86:00.0");
    auto res = node_resources({}, with_fake_nvml());
    EXPECT_EQ(res.devices, (Strings{"0", "1"}));
    EXPECT_EQ(res.device_pci_bus_ids, (Strings{"0000:3b:00.0", "0000:86:00.0"}));
    EXPECT_FALSE(res.devices_inherited);
}

TEST_F(DevicesProc, DriverWhenNvmlFails) {
    add_gpu("0000:18:00.0");
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", "1");
    auto res = node_resources({}, with_fake_nvml());
    EXPECT_EQ(res.devices, (Strings{"0"}));
    EXPECT_EQ(res.device_pci_bus_ids, (Strings{"0000:18:00.0"}));
    auto missing = node_resources({}, {m_root.string(), "/nonexistent/libnvidia-ml.so.1", false});
    EXPECT_EQ(missing.device_pci_bus_ids, (Strings{"0000:18:00.0"}));
}

TEST_F(DevicesProc, InheritedEntriesArePlacedOnlyWhenAsked) {
    FakeNvml fake;
    ASSERT_TRUE(fake.loaded()) << ::dlerror();
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS",
                   "GPU-aaaa@00000000:18:00.0,GPU-bbbb@00000000:3B:00.0,GPU-cccc@00000000:86:00.0");
    const Environment env = {{"CUDA_VISIBLE_DEVICES", "2,0,GPU-bbbb,MIG-ffff"}};

    int calls = fake.counter("fake_nvml_init_calls");
    auto plain = node_resources(env, with_fake_nvml(false));
    EXPECT_EQ(fake.counter("fake_nvml_init_calls"), calls) << "NVML initialized for nothing";
    EXPECT_EQ(plain.devices, (Strings{"2", "0", "GPU-bbbb", "MIG-ffff"}));
    EXPECT_EQ(plain.device_pci_bus_ids, (Strings{"", "", "", ""}));

    auto located = node_resources(env, with_fake_nvml(true));
    EXPECT_EQ(located.devices, plain.devices);  // still verbatim
    EXPECT_EQ(located.device_pci_bus_ids,
              (Strings{"0000:86:00.0", "0000:18:00.0", "0000:3b:00.0", ""}));
}

TEST_F(DevicesProc, InheritedEntriesArePlacedThroughTheDriverWithoutNvml) {
    add_gpu("0000:3b:00.0", "GPU-bbbb");
    add_gpu("0000:18:00.0", "GPU-aaaa");
    auto res =
        node_resources({{"CUDA_VISIBLE_DEVICES", "1,GPU-aaaa"}}, {m_root.string(), "", true});
    EXPECT_EQ(res.device_pci_bus_ids, (Strings{"0000:3b:00.0", "0000:18:00.0"}));
}

}  // namespace
}  // namespace ddprun
