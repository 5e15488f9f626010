// Device discovery: the inherited list wins and is kept verbatim; otherwise the
// driver's /proc tree (a fake root here: the build machines have no GPU).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ddprun/devices.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

TEST(Devices, SplitKeepsEntriesVerbatim) {
    EXPECT_EQ(split_visible_devices("4,5,6,7"), (std::vector<std::string>{"4", "5", "6", "7"}));
    EXPECT_EQ(split_visible_devices("GPU-8f2a-11,MIG-1c3d/1/0"),
              (std::vector<std::string>{"GPU-8f2a-11", "MIG-1c3d/1/0"}));
    EXPECT_EQ(split_visible_devices(" 1 , 2 "), (std::vector<std::string>{"1", "2"}));
    EXPECT_TRUE(split_visible_devices("").empty());
    EXPECT_TRUE(split_visible_devices("-1").empty());
    EXPECT_EQ(split_visible_devices("0,-1,2"), (std::vector<std::string>{"0"}));
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
    void add_gpu(const std::string& bus) {
        fs::create_directories(m_root / "driver/nvidia/gpus" / bus);
        std::ofstream(m_root / "driver/nvidia/gpus" / bus / "information") << "Model: fake\n";
    }
    fs::path m_root;
};

TEST_F(DevicesProc, NoDriverMeansNoGpu) {
    EXPECT_TRUE(discover_gpus(m_root).empty());
}

TEST_F(DevicesProc, CountsDriverGpus) {
    add_gpu("0000:3b:00.0");
    add_gpu("0000:5e:00.0");
    EXPECT_EQ(discover_gpus(m_root), (std::vector<std::string>{"0", "1"}));
    auto res = node_resources({}, m_root);
    EXPECT_EQ(res.devices.size(), 2u);
    EXPECT_FALSE(res.devices_inherited);
    EXPECT_GE(res.cpus, 1);
}

TEST_F(DevicesProc, InheritedListWinsOverDriver) {
    add_gpu("0000:3b:00.0");
    auto res = node_resources({{"CUDA_VISIBLE_DEVICES", "6,7"}}, m_root);
    EXPECT_EQ(res.devices, (std::vector<std::string>{"6", "7"}));
    EXPECT_TRUE(res.devices_inherited);
    auto none = node_resources({{"CUDA_VISIBLE_DEVICES", ""}}, m_root);
    EXPECT_TRUE(none.devices.empty());
    EXPECT_TRUE(none.devices_inherited);
}

}  // namespace
}  // namespace ddprun
