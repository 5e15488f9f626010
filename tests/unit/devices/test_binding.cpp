// apply_binding on this machine, in real child processes: the CPUs a worker
// is pinned to before exec are what the kernel reports for it afterwards
// (/proc/<pid>/status Cpus_allowed_list), and its memory policy is set.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "ddprun/devices/binding.hpp"

namespace ddprun {
namespace {

std::string status_field(pid_t pid, const std::string& field) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with(field + ":")) {
            auto value = line.substr(field.size() + 1);
            return value.substr(value.find_first_not_of(" \t"));
        }
    return "";
}

// Forks a child that applies `plan` and execs `sleep`, returns its pid once
// the exec has happened (a close-on-exec pipe reaches EOF), or -1 with the
// child's apply_binding/exec errno in `child_errno`.
pid_t spawn_bound_sleeper(const BindingPlan& plan, int& child_errno) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
    pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        int error = apply_binding(plan);
        if (error == 0) {
            ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
            error = errno;
        }
        (void)!::write(fds[1], &error, sizeof error);
        ::_exit(127);
    }
    ::close(fds[1]);
    child_errno = 0;
    ssize_t got = ::read(fds[0], &child_errno, sizeof child_errno);
    ::close(fds[0]);
    if (got > 0) {
        ::waitpid(pid, nullptr, 0);
        return -1;
    }
    return pid;
}

void stop(pid_t pid) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
}

TEST(Binding, ExecedWorkerKeepsItsCpus) {
    auto allowed = allowed_cpus();
    ASSERT_FALSE(allowed.empty());
    EXPECT_EQ(status_field(::getpid(), "Cpus_allowed_list"), format_cpu_list(allowed));

    // The last allowed CPU alone, and (where there are three) the first and third.
    std::vector<std::vector<int>> subsets = {{allowed.back()}};
    if (allowed.size() >= 3) subsets.push_back({allowed[0], allowed[2]});
    for (const auto& cpus : subsets) {
        int child_errno = 0;
        pid_t pid = spawn_bound_sleeper(make_binding(cpus, std::nullopt), child_errno);
        ASSERT_GT(pid, 0) << "child failed: " << std::strerror(child_errno);
        EXPECT_EQ(status_field(pid, "Cpus_allowed_list"), format_cpu_list(cpus));
        stop(pid);
    }
}

TEST(Binding, UnpinnedPlanLeavesTheAffinityAlone) {
    int child_errno = 0;
    pid_t pid = spawn_bound_sleeper(make_binding({}, std::nullopt), child_errno);
    ASSERT_GT(pid, 0) << "child failed: " << std::strerror(child_errno);
    EXPECT_EQ(status_field(pid, "Cpus_allowed_list"), format_cpu_list(allowed_cpus()));
    stop(pid);
}

TEST(Binding, CpusThatDoNotExistAreAnError) {
    int child_errno = 0;
    // CPU ids past the kernel's nr_cpu_ids leave an empty mask.
    pid_t pid = spawn_bound_sleeper(make_binding({1 << 16}, std::nullopt), child_errno);
    if (pid > 0) stop(pid);
    EXPECT_EQ(pid, -1);
    EXPECT_EQ(child_errno, EINVAL);
}

TEST(Binding, MemoryPrefersTheNode) {
    auto allowed = allowed_cpus();
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    BindingPlan plan = make_binding({allowed.front()}, 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        int result[3] = {apply_binding(plan), -1, 0};
        unsigned long mask[16] = {};
        if (::syscall(SYS_get_mempolicy, &result[1], mask, sizeof mask * CHAR_BIT, nullptr, 0) != 0)
            result[1] = -1;
        // Whether this sandbox lets a process set a policy at all.
        unsigned long node0 = 1;
        if (::syscall(SYS_set_mempolicy, MPOL_PREFERRED, &node0, sizeof node0 * CHAR_BIT + 1) != 0)
            result[2] = errno;
        (void)!::write(fds[1], result, sizeof result);
        ::_exit(0);
    }
    ::close(fds[1]);
    int result[3] = {};
    ASSERT_EQ(::read(fds[0], result, sizeof result), static_cast<ssize_t>(sizeof result));
    ::close(fds[0]);
    ::waitpid(pid, nullptr, 0);
    EXPECT_EQ(result[0], 0);
    if (result[2] != 0)
        GTEST_SKIP() << "set_mempolicy is refused here: " << std::strerror(result[2]);
    EXPECT_EQ(result[1], MPOL_PREFERRED);
}

}  // namespace
}  // namespace ddprun
