// The OOM killer's counter and the memory cgroup it is read from: the parsers,
// on the texts the kernel writes, and the limit's description on a directory
// tree laid out as a cgroup hierarchy is. The real cgroups: test_oom.cpp in
// tests/integration.
#include "ddprun/workers/oom.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace ddprun {
namespace {

// This machine's, abridged: a v1 memory hierarchy beside a v2 one without it.
constexpr std::string_view k_hybrid_mountinfo =
    "25 30 0:23 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 25 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 25 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 25 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

constexpr std::string_view k_hybrid_cgroup =
    "9:name=systemd:/\n"
    "4:memory:/process_api/69a7\n"
    "1:cpu:/\n"
    "0::/\n";

TEST(MemoryCgroup, TheV1MemoryLineWinsWhereBothHierarchiesAreMounted) {
    auto cgroup = parse_memory_cgroup(k_hybrid_cgroup, k_hybrid_mountinfo);
    ASSERT_TRUE(cgroup);
    EXPECT_EQ(cgroup->version, 1);
    EXPECT_EQ(cgroup->name, "/process_api/69a7");
    EXPECT_EQ(cgroup->dir, "/sys/fs/cgroup/memory/process_api/69a7");
    EXPECT_EQ(cgroup->mount, "/sys/fs/cgroup/memory");
}

TEST(MemoryCgroup, AV2OnlyMachineUsesTheUnifiedLine) {
    auto cgroup = parse_memory_cgroup(
        "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n",
        "24 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    ASSERT_TRUE(cgroup);
    EXPECT_EQ(cgroup->version, 2);
    EXPECT_EQ(cgroup->dir,
              "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/task_0");
}

TEST(MemoryCgroup, AContainersMountOfItsOwnSubtreeIsTakenAsTheRoot) {
    // A container sees its own cgroup mounted at /sys/fs/cgroup/memory with the
    // hierarchy's path of it as the mount's root.
    auto cgroup = parse_memory_cgroup(
        "5:memory:/docker/abc/inner\n",
        "40 30 0:40 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
    ASSERT_TRUE(cgroup);
    EXPECT_EQ(cgroup->dir, "/sys/fs/cgroup/memory/inner");
    auto root = parse_memory_cgroup(
        "5:memory:/docker/abc\n",
        "40 30 0:40 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
    ASSERT_TRUE(root);
    EXPECT_EQ(root->dir, "/sys/fs/cgroup/memory");
}

TEST(MemoryCgroup, NothingIsGuessedWithoutAMountThatHoldsIt) {
    // No memory hierarchy mounted; a cgroup outside what is mounted; no lines.
    EXPECT_FALSE(
        parse_memory_cgroup("4:memory:/a\n", "31 25 0:27 / /c rw - cgroup cgroup rw,cpu\n"));
    EXPECT_FALSE(parse_memory_cgroup("5:memory:/elsewhere\n",
                                     "40 30 0:40 /docker/abc /m ro - cgroup cgroup rw,memory\n"));
    EXPECT_FALSE(parse_memory_cgroup("", k_hybrid_mountinfo));
    EXPECT_FALSE(parse_memory_cgroup("garbage", "garbage"));
}

TEST(MemoryCgroup, EscapedBlanksInAMountPointAreRead) {
    auto cgroup = parse_memory_cgroup("0::/a:b\n",
                                      "24 1 0:22 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n");
    ASSERT_TRUE(cgroup);
    EXPECT_EQ(cgroup->dir, "/mnt/my cgroups/a:b");  // a ':' in the path is the path's
}

TEST(OomKills, TheCounterIsReadFromEitherVersionsFile) {
    EXPECT_EQ(parse_oom_kills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"), 2u);
    EXPECT_EQ(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"), 7u);
    // A kernel before 4.13 has no counter: nothing to tell.
    EXPECT_FALSE(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"));
    EXPECT_FALSE(parse_oom_kills("oom_kill x\n"));
}

class MemoryLimit : public ::testing::Test {
  protected:
    void SetUp() override {
        m_root =
            std::filesystem::temp_directory_path() / ("ddprun-oom-" + std::to_string(::getpid()));
        std::filesystem::create_directories(m_root / "job_42" / "step_0");
    }
    void TearDown() override { std::filesystem::remove_all(m_root); }
    void write(const std::string& relative, const std::string& text) {
        std::ofstream(m_root / relative) << text;
    }
    MemoryCgroup cgroup(int version, const std::string& name) {
        return MemoryCgroup{version, name, m_root.string() + name, m_root.string()};
    }
    std::filesystem::path m_root;
};

TEST_F(MemoryLimit, TheCgroupsOwnLimitIsNamed) {
    write("job_42/step_0/memory.limit_in_bytes", "67108864\n");
    EXPECT_EQ(describe_memory_limit(cgroup(1, "/job_42/step_0")), "/job_42/step_0: limit 64 MiB");
    write("job_42/step_0/memory.max", "68719476736\n");
    EXPECT_EQ(describe_memory_limit(cgroup(2, "/job_42/step_0")), "/job_42/step_0: limit 64 GiB");
}

TEST_F(MemoryLimit, AnAncestorsLimitIsNamedWithTheAncestor) {
    // Slurm limits the job's cgroup; the step's own says "no limit".
    write("job_42/step_0/memory.max", "max\n");
    write("job_42/memory.max", "1610612736\n");
    EXPECT_EQ(describe_memory_limit(cgroup(2, "/job_42/step_0")),
              "/job_42/step_0: limit 1.5 GiB (of /job_42)");
    write("job_42/step_0/memory.limit_in_bytes", "9223372036854771712\n");
    write("job_42/memory.limit_in_bytes", "52428800\n");
    EXPECT_EQ(describe_memory_limit(cgroup(1, "/job_42/step_0")),
              "/job_42/step_0: limit 50 MiB (of /job_42)");
}

TEST_F(MemoryLimit, NoLimitUpToTheRootSaysSo) {
    write("job_42/step_0/memory.max", "max\n");
    write("memory.max", "max\n");
    EXPECT_EQ(describe_memory_limit(cgroup(2, "/job_42/step_0")), "/job_42/step_0: no limit");
}

}  // namespace
}  // namespace ddprun
