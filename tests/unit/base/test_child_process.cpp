// launch_process (Boost.Process v2's vfork launcher with ddprun's child setup)
// and the owned children of process_tree.hpp, against real programs: /bin/sh
// and what it reports of itself from /proc.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/base/child_process.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/process_tree.hpp"

extern char** environ;

namespace ddprun {
namespace {

using namespace std::chrono_literals;

// A child's output and how it ended.
struct Ran {
    std::string out;
    std::string err;
    int status = -1;
};

// Reads `fd` to its end.
std::string read_all(int fd) {
    std::string text;
    char buffer[4096];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
}

UniqueFd pipe_end(int (&ends)[2], int which) {
    return UniqueFd(ends[which]);
}

// Runs `executable` with `argv` and `setup` (its streams replaced by pipes) and
// waits for it.
Ran run(const char* executable, const std::vector<const char*>& argv, ChildSetup setup = {}) {
    int out[2];
    int err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    UniqueFd out_read = pipe_end(out, 0), out_write = pipe_end(out, 1);
    UniqueFd err_read = pipe_end(err, 0), err_write = pipe_end(err, 1);
    UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    setup.in = null.get();
    setup.out = out_write.get();
    setup.err = err_write.get();
    std::vector<const char*> args = argv;
    args.push_back(nullptr);
    auto pid = launch_process(executable, args.data(), environ, setup);
    EXPECT_TRUE(pid.has_value()) << pid.error().message();
    out_write.reset();
    err_write.reset();
    Ran ran;
    if (!pid) return ran;
    std::thread err_reader([&] { ran.err = read_all(err_read.get()); });
    ran.out = read_all(out_read.get());
    err_reader.join();
    EXPECT_EQ(::waitpid(*pid, &ran.status, 0), *pid);
    return ran;
}

Ran run_shell(const std::string& script, ChildSetup setup = {}) {
    return run("/bin/sh", {"sh", "-c", script.c_str()}, setup);
}

// What /proc says of the child itself, read by the child as the program it execs
// (a shell reading its own would see the mask it sets around its forks).
Ran run_cat_self(ChildSetup setup = {}) {
    return run("/bin/cat", {"cat", "/proc/self/status", "/proc/self/stat"}, setup);
}

// The process group in a /proc/<pid>/stat line (its fifth field; the command in
// field two has no space here).
std::string pgid_in_stat(const std::string& text) {
    std::string stat = text.substr(text.rfind('\n', text.size() - 2) + 1);
    std::size_t at = 0;
    for (int field = 1; field < 5; ++field) at = stat.find(' ', at) + 1;
    return stat.substr(at, stat.find(' ', at) - at);
}

// The value of a "Name:\tvalue" line of /proc/<pid>/status as the shell printed it.
std::string field(const std::string& status, const std::string& name) {
    auto at = status.find(name + ":");
    if (at == std::string::npos) return {};
    auto start = status.find_first_not_of(" \t", at + name.size() + 1);
    return status.substr(start, status.find('\n', start) - start);
}

// No child of this test process is left unreaped.
bool no_child_left() {
    int status = 0;
    return ::waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD;
}

TEST(Launch, RunsTheProgramWithItsArgumentsEnvironmentAndStreams) {
    std::string script = "echo \"$0 $1 $LAUNCH_TEST\"; echo to-stderr >&2; exit 3";
    const char* argv[] = {"sh", "-c", script.c_str(), "named", "first", nullptr};
    const char* envp[] = {"LAUNCH_TEST=given", nullptr};
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    UniqueFd out_read = pipe_end(out, 0), out_write = pipe_end(out, 1);
    ChildSetup setup;
    setup.out = out_write.get();
    setup.err = out_write.get();
    auto pid = launch_process("/bin/sh", argv, envp, setup);
    ASSERT_TRUE(pid.has_value()) << pid.error().message();
    out_write.reset();
    EXPECT_EQ(read_all(out_read.get()), "named first given\nto-stderr\n");
    int status = 0;
    ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST(Launch, AMissingOrNonExecutableProgramIsAnErrorAndLeavesNoChild) {
    const char* argv[] = {"x", nullptr};
    auto missing = launch_process("/nonexistent/program", argv, environ, {});
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.error().value(), ENOENT);
    EXPECT_TRUE(no_child_left());

    auto dir =
        std::filesystem::temp_directory_path() / ("ddprun-launch-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    auto plain = dir / "not-executable";
    std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
    auto no_interpreter = dir / "no-shebang";
    std::ofstream(no_interpreter) << "\x7f"
                                     "ELF garbage";
    std::filesystem::permissions(no_interpreter, std::filesystem::perms::owner_all);
    auto not_executable = launch_process(plain.string(), argv, environ, {});
    auto not_a_program = launch_process(no_interpreter.string(), argv, environ, {});
    auto directory = launch_process(dir.string(), argv, environ, {});
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(not_executable.has_value());
    // root may execute anything with an x bit; the file has none.
    EXPECT_EQ(not_executable.error().value(), EACCES);
    ASSERT_FALSE(not_a_program.has_value());
    EXPECT_EQ(not_a_program.error().value(), ENOEXEC);
    ASSERT_FALSE(directory.has_value());
    EXPECT_EQ(directory.error().value(), EACCES);
    EXPECT_TRUE(no_child_left());
}

TEST(Launch, TheChildLeadsItsGroupAndStartsWithDefaultSignals) {
    // What ddprun's agent has when it starts workers: signals blocked, SIGPIPE ignored.
    sigset_t blocked;
    sigset_t old;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGCHLD);
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &blocked, &old), 0);
    auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
    Ran ran = run_cat_self();
    ::signal(SIGPIPE, old_pipe);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    EXPECT_EQ(ran.status, 0);
    EXPECT_EQ(field(ran.out, "SigBlk"), "0000000000000000");
    EXPECT_EQ(field(ran.out, "SigIgn"), "0000000000000000");
    // Its process group is its own pid.
    EXPECT_EQ(pgid_in_stat(ran.out), field(ran.out, "Pid"));

    ChildSetup in_ours;
    in_ours.own_group = false;
    EXPECT_EQ(pgid_in_stat(run_cat_self(in_ours).out), std::to_string(::getpgrp()));
}

TEST(Launch, NoFdLeaksButTheOneKept) {
    // Inheritable fds of the parent's, below and above the one the child keeps.
    UniqueFd below(::open("/dev/null", O_RDONLY));
    UniqueFd kept(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    UniqueFd above(::open("/dev/null", O_RDONLY));
    ASSERT_LT(below.get(), kept.get());
    ASSERT_LT(kept.get(), above.get());
    ChildSetup setup;
    setup.keep_fd = kept.get();
    // ls, a child of the shell, lists the shell's fds (a glob would list its own
    // directory fd too).
    Ran ran = run_shell("ls /proc/$$/fd", setup);
    EXPECT_EQ(ran.status, 0) << ran.err;
    EXPECT_EQ(ran.out, "0\n1\n2\n" + std::to_string(kept.get()) + "\n");
    // Without keep_fd, nothing but the standard streams.
    Ran none = run_shell("ls /proc/$$/fd");
    EXPECT_EQ(none.out, "0\n1\n2\n");
}

int pin_to_first_cpu(const void* cpu) noexcept {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(*static_cast<const int*>(cpu), &set);
    return ::sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
}

int always_fails(const void*) noexcept {
    return EINVAL;
}

TEST(Launch, TheLastStepRunsInTheChildAndItsFailureIsTheChildsMessage) {
    cpu_set_t allowed;
    ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int first = 0;
    while (!CPU_ISSET(first, &allowed)) ++first;
    ChildSetup pinned;
    pinned.last_step = pin_to_first_cpu;
    pinned.last_step_arg = &first;
    Ran ran = run_cat_self(pinned);
    EXPECT_EQ(field(ran.out, "Cpus_allowed_list"), std::to_string(first));

    ChildSetup failing;
    failing.last_step = always_fails;
    failing.last_step_failed = "ddprun: cannot pin the test to its CPUs\n";
    Ran failed = run_shell("echo ran", failing);
    EXPECT_EQ(failed.out, "");
    EXPECT_EQ(failed.err, "ddprun: cannot pin the test to its CPUs\n");
    EXPECT_TRUE(WIFEXITED(failed.status));
    EXPECT_EQ(WEXITSTATUS(failed.status), exit_code::kInternal);
}

TEST(Launch, TheChildDiesWithTheThreadThatStartedIt) {
    pid_t child = -1;
    std::thread starter([&] {
        const char* argv[] = {"sleep", "60", nullptr};
        auto pid = launch_process("/bin/sleep", argv, environ, {});
        ASSERT_TRUE(pid.has_value());
        child = *pid;
    });
    starter.join();
    ASSERT_GT(child, 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(OwnedChildren, TheReaperKeepsAnOwnedChildsStatusForItsOwner) {
    const char* exit_4[] = {"sh", "-c", "exit 4", nullptr};
    const char* exit_5[] = {"sh", "-c", "exit 5", nullptr};
    pid_t owned =
        owned_children::start([&] { return *launch_process("/bin/sh", exit_4, environ, {}); });
    auto other = launch_process("/bin/sh", exit_5, environ, {});
    ASSERT_GT(owned, 0);
    ASSERT_TRUE(other.has_value());
    // The reaper sees the other child only, however often it looks.
    std::vector<std::pair<pid_t, int>> reaped;
    auto end = std::chrono::steady_clock::now() + 10s;
    while (reaped.empty() && std::chrono::steady_clock::now() < end) {
        reap_exited([&](pid_t pid, int status) { reaped.emplace_back(pid, status); });
        std::this_thread::sleep_for(1ms);
    }
    std::optional<int> status;
    while (!status && std::chrono::steady_clock::now() < end) {
        reap_exited([&](pid_t pid, int how) { reaped.emplace_back(pid, how); });
        status = owned_children::exit_status(owned);
    }
    ASSERT_EQ(reaped.size(), 1u);
    EXPECT_EQ(reaped[0].first, *other);
    EXPECT_EQ(WEXITSTATUS(reaped[0].second), 5);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WEXITSTATUS(*status), 4);
    // A reaped owned child is not signalled (its pid may be another's by now).
    owned_children::kill(owned, SIGKILL);
    owned_children::release(owned);
    EXPECT_FALSE(owned_children::exit_status(owned).has_value());
    EXPECT_TRUE(no_child_left());
}

TEST(OwnedChildren, KillEndsAChildThatRuns) {
    const char* argv[] = {"sh", "-c", "sleep 60 & wait", nullptr};
    pid_t owned =
        owned_children::start([&] { return *launch_process("/bin/sh", argv, environ, {}); });
    ASSERT_GT(owned, 0);
    EXPECT_FALSE(owned_children::exit_status(owned).has_value());
    owned_children::kill(owned, SIGKILL);
    std::optional<int> status;
    auto end = std::chrono::steady_clock::now() + 10s;
    while (!(status = owned_children::exit_status(owned)) && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    owned_children::release(owned);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WTERMSIG(*status), SIGKILL);
}

}  // namespace
}  // namespace ddprun
