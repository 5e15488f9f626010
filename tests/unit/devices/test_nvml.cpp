// query_nvml against a fake libnvidia-ml (tests/fake_nvml): the dlopen seam,
// the struct layouts and the fallbacks, on machines without a GPU.
#include <gtest/gtest.h>

#include <optional>

#include "../fake_nvml/fake_nvml_control.hpp"
#include "ddprun/devices/nvml.hpp"
#include "support/build_paths.hpp"

namespace ddprun {
namespace {

using test::FakeNvml;
using test::ScopedEnv;

TEST(Nvml, MissingLibraryMeansNoAnswer) {
    EXPECT_EQ(query_nvml("/nonexistent/libnvidia-ml.so.1"), std::nullopt);
}

TEST(Nvml, LibraryWithoutNvmlMeansNoAnswer) {
    // Loads, but has none of the entry points.
    EXPECT_EQ(query_nvml("libc.so.6"), std::nullopt);
}

TEST(Nvml, FailedInitMeansNoAnswer) {
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", "1");
    ScopedEnv gpus("FAKE_NVML_GPUS", "GPU-aaa@00000000:3B:00.0");
    EXPECT_EQ(query_nvml(ddprun_test::build_paths::fake_nvml_library), std::nullopt);
}

TEST(Nvml, ReportsUuidsAndNormalizedBusIds) {
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS",
                   "GPU-8f2a0c11-aaaa@00000000:3B:00.0,GPU-1c3d0e22-bbbb@00000000:5E:00.0");
    auto found = query_nvml(ddprun_test::build_paths::fake_nvml_library);
    ASSERT_TRUE(found);
    ASSERT_EQ(found->size(), 2u);
    EXPECT_EQ((*found)[0].index, 0);
    EXPECT_EQ((*found)[0].uuid, "GPU-8f2a0c11-aaaa");
    EXPECT_EQ((*found)[0].pci_bus_id, "0000:3b:00.0");
    EXPECT_EQ((*found)[1].index, 1);
    EXPECT_EQ((*found)[1].uuid, "GPU-1c3d0e22-bbbb");
    EXPECT_EQ((*found)[1].pci_bus_id, "0000:5e:00.0");
}

TEST(Nvml, NoGpusIsAnAnswer) {
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS", "");
    auto found = query_nvml(ddprun_test::build_paths::fake_nvml_library);
    ASSERT_TRUE(found);
    EXPECT_TRUE(found->empty());
}

TEST(Nvml, GpuThatCannotBeOpenedKeepsItsIndex) {
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS", "GPU-a@00000000:18:00.0,!,GPU-c@00000000:86:00.0");
    auto found = query_nvml(ddprun_test::build_paths::fake_nvml_library);
    ASSERT_TRUE(found);
    ASSERT_EQ(found->size(), 3u);
    EXPECT_EQ((*found)[1].index, 1);
    EXPECT_EQ((*found)[1].uuid, "");
    EXPECT_EQ((*found)[1].pci_bus_id, "");
    EXPECT_EQ((*found)[2].index, 2);
    EXPECT_EQ((*found)[2].uuid, "GPU-c");
    EXPECT_EQ((*found)[2].pci_bus_id, "0000:86:00.0");
}

TEST(Nvml, EveryInitIsShutDown) {
    FakeNvml fake;
    ASSERT_TRUE(fake.loaded()) << ::dlerror();
    ScopedEnv fail("FAKE_NVML_INIT_FAIL", nullptr);
    ScopedEnv gpus("FAKE_NVML_GPUS", "GPU-a@0000:18:00.0");
    int calls = fake.counter("fake_nvml_init_calls");
    ASSERT_TRUE(query_nvml(ddprun_test::build_paths::fake_nvml_library));
    ASSERT_TRUE(query_nvml(ddprun_test::build_paths::fake_nvml_library));
    EXPECT_EQ(fake.counter("fake_nvml_init_calls"), calls + 2);
    EXPECT_EQ(fake.counter("fake_nvml_active"), 0);
}

}  // namespace
}  // namespace ddprun
