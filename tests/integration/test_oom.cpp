// The kernel's OOM killer, named: ddprun runs in a real memory
// cgroup with a real limit, made for the test under the test's own, and a
// worker allocates past it. A SIGKILL from anyone else stays a SIGKILL, even in
// a cgroup whose counter an earlier OOM kill has raised. Each test runs on
// every cgroup version whose memory controller this machine offers, and skips
// with the reason on one it does not (or without root).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "multi_node.hpp"  // own_lines_with

namespace ddprun_it {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The test process's own memory cgroup of `version`: {its name, its directory},
// or why there is none. Found as the kernel documents them, by the usual mount
// points (ddprun's own reading of mountinfo is what is under test).
struct OwnCgroup {
    std::string name;
    std::string dir;
    std::string why_not;
};

OwnCgroup own_memory_cgroup(int version) {
    std::istringstream lines(read_file("/proc/self/cgroup"));
    for (std::string line; std::getline(lines, line);) {
        const auto first = line.find(':');
        const auto second = line.find(':', first + 1);
        if (first == std::string::npos || second == std::string::npos) continue;
        const std::string controllers = line.substr(first + 1, second - first - 1);
        const std::string name = line.substr(second + 1);
        if (version == 1 && ("," + controllers + ",").find(",memory,") != std::string::npos) {
            const std::string dir = "/sys/fs/cgroup/memory" + (name == "/" ? "" : name);
            if (fs::exists(dir + "/memory.oom_control")) return {name, dir, ""};
        }
        if (version == 2 && line.starts_with("0::")) {
            for (std::string root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
                const std::string dir = root + (name == "/" ? "" : name);
                const std::string controllers_file = dir + "/cgroup.subtree_control";
                if (fs::exists(controllers_file) &&
                    read_file(controllers_file).find("memory") != std::string::npos)
                    return {name, dir, ""};
            }
        }
    }
    return {"", "",
            fmt::format("this machine offers no cgroup v{} memory controller to this "
                        "process (v2: none, or not enabled in its subtree_control)",
                        version)};
}

class OomKiller : public IntegrationTest, public ::testing::WithParamInterface<int> {
  protected:
    void SetUp() override {
        IntegrationTest::SetUp();
        if (::geteuid() != 0) GTEST_SKIP() << "making a memory cgroup needs root";
        m_own = own_memory_cgroup(GetParam());
        if (!m_own.why_not.empty()) GTEST_SKIP() << m_own.why_not;
    }

    void TearDown() override {
        // Deepest first; a cgroup whose last process is still being torn down is
        // busy for a moment.
        for (auto it = m_made.rbegin(); it != m_made.rend(); ++it)
            for (int i = 0; i < 200 && ::rmdir(it->c_str()) != 0 && errno == EBUSY; ++i)
                std::this_thread::sleep_for(10ms);
        IntegrationTest::TearDown();
    }

    // A child of `parent` (a cgroup's dir) named `leaf`, with `limit` bytes (0: none
    // set); returns its dir.
    std::string make_cgroup(const std::string& parent, const std::string& leaf,
                            std::uint64_t limit) {
        const std::string dir = parent + "/" + leaf;
        EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir << ": " << std::strerror(errno);
        m_made.push_back(dir);
        if (limit > 0)
            std::ofstream(dir + (GetParam() == 2 ? "/memory.max" : "/memory.limit_in_bytes"))
                << limit;
        return dir;
    }

    std::string unique_leaf() const {
        static int made = 0;  // parameterized names hold a '/': a count instead
        return fmt::format("ddprun-it-{}-{}", ::getpid(), made++);
    }

    // ddprun with `args`, moved into `cgroup` (a dir) before it starts.
    RunResult run_in(const std::string& cgroup, const std::vector<std::string>& args) {
        RunOptions options;
        options.program = "/bin/sh";
        std::vector<std::string> argv = {
            "-c", fmt::format("echo $$ > '{}/cgroup.procs' && exec \"$@\"", cgroup), "sh",
            k_ddprun};
        argv.insert(argv.end(), args.begin(), args.end());
        return run(argv, options);
    }

    std::uint64_t oom_kills(const std::string& cgroup) const {
        const std::string text =
            read_file(cgroup + (GetParam() == 2 ? "/memory.events" : "/memory.oom_control"));
        const auto at = text.find("oom_kill ");
        return at == std::string::npos ? 0 : std::stoull(text.substr(at + 9));
    }

    OwnCgroup m_own;
    std::vector<std::string> m_made;
};

INSTANTIATE_TEST_SUITE_P(CgroupVersions, OomKiller, ::testing::Values(1, 2),
                         [](const auto& version) { return fmt::format("v{}", version.param); });

// Rank 1 allocates 300 MiB in a cgroup limited to 64 MiB: the box, the one-line
// cause and the event log say the OOM killer did it, with the cgroup and its limit.
TEST_P(OomKiller, AWorkerItKillsIsNamedWithTheCgroupAndItsLimit) {
    const std::string leaf = unique_leaf();
    const std::string cgroup = make_cgroup(m_own.dir, leaf, 64u << 20);
    const std::string log = path("events.jsonl");
    auto r = run_in(cgroup, {"--nproc_per_node=2", "--event-log", log, k_fake_worker, "if-rank",
                             "1", "allocate", "300", "sleep", "30"});
    ASSERT_EQ(r.exit_code, 137) << r.describe();
    const std::string name = (m_own.name == "/" ? "" : m_own.name) + "/" + leaf;
    const std::string cause =
        fmt::format("killed by the kernel's OOM killer (memory cgroup {}: limit 64 MiB)", name);
    EXPECT_EQ(own_lines_with(r.err, {"  cause:     " + cause}).size(), 1u) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"signal:    SIGKILL (exit code 137)"}).size(), 1u)
        << r.describe();
    const std::string events = read_file(log);
    EXPECT_NE(events.find("\"event\":\"worker_end\""), std::string::npos) << events;
    EXPECT_NE(events.find("\"rank\":1,\"local_rank\":1"), std::string::npos) << events;
    EXPECT_NE(events.find("\"oom\":\"" + cause + "\""), std::string::npos) << events;
    // Rank 0, stopped by ddprun, is not the OOM killer's.
    EXPECT_EQ(own_lines_with(r.err, {"rank 0", "OOM"}).size(), 0u) << r.describe();
    EXPECT_EQ(oom_kills(cgroup), 1u);
}

// The limit is the parent's, as Slurm limits a job and runs its steps in
// cgroups of their own: the parent is named as the one whose limit it was.
TEST_P(OomKiller, AnAncestorsLimitIsNamedAsTheAncestors) {
    const std::string leaf = unique_leaf();
    const std::string job = make_cgroup(m_own.dir, leaf, 64u << 20);
    if (GetParam() == 2) std::ofstream(job + "/cgroup.subtree_control") << "+memory";
    const std::string step = make_cgroup(job, "step_0", 0);
    auto r = run_in(step, {"--nproc_per_node=1", k_fake_worker, "allocate", "300", "sleep", "30"});
    ASSERT_EQ(r.exit_code, 137) << r.describe();
    const std::string job_name = (m_own.name == "/" ? "" : m_own.name) + "/" + leaf;
    EXPECT_EQ(own_lines_with(r.err, {fmt::format("killed by the kernel's OOM killer (memory "
                                                 "cgroup {}/step_0: limit 64 MiB (of {}))",
                                                 job_name, job_name)})
                  .size(),
              1u)
        << r.describe();
}

// In a cgroup where the OOM killer has killed before (its counter is 1), a
// worker that dies of someone else's SIGKILL is reported as a SIGKILL, and
// nothing mentions the OOM killer.
TEST_P(OomKiller, SomeoneElsesSigkillStaysASigkill) {
    const std::string cgroup = make_cgroup(m_own.dir, unique_leaf(), 64u << 20);
    auto earlier = run_in(cgroup, {"--nproc_per_node=1", k_fake_worker, "allocate", "300"});
    ASSERT_EQ(earlier.exit_code, 137) << earlier.describe();
    ASSERT_EQ(oom_kills(cgroup), 1u);
    const std::string log = path("events.jsonl");
    auto r = run_in(cgroup, {"--nproc_per_node=2", "--event-log", log, k_fake_worker, "if-rank",
                             "1", "raise", "SIGKILL", "sleep", "30"});
    ASSERT_EQ(r.exit_code, 137) << r.describe();
    EXPECT_EQ(own_lines_with(r.err, {"signal:    SIGKILL (exit code 137)"}).size(), 1u)
        << r.describe();
    EXPECT_EQ(r.err.find("OOM"), std::string::npos) << r.describe();
    const std::string events = read_file(log);
    EXPECT_EQ(events.find("OOM"), std::string::npos) << events;
    EXPECT_NE(events.find("\"oom\":null"), std::string::npos) << events;
    EXPECT_EQ(oom_kills(cgroup), 1u);
}

}  // namespace
}  // namespace ddprun_it
