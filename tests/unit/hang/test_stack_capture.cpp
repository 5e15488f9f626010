// capture_native_stacks, is_python and disable_core_dumps (stacks.hpp) on real
// child processes: sleepers, exited and zombie pids, a traced one, a fake tool
// that overruns its deadline or fails, and a Python worker that SIGABRT makes
// print its tracebacks. Tests that need eu-stack, gdb or /usr/bin/python3 skip
// without them.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ddprun/base/process_tree.hpp"
#include "ddprun/hang/stacks.hpp"
#include "workers/worker_fixture.hpp"

extern char** environ;

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

constexpr const char* k_python = "/usr/bin/python3";

bool on_path(const std::string& name) {
    std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "/usr/bin:/bin";
    std::size_t start = 0;
    while (true) {
        std::size_t colon = path.find(':', start);
        std::string dir = path.substr(start, colon - start);
        if (::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
        if (colon == std::string::npos) return false;
        start = colon + 1;
    }
}

struct SpawnOptions {
    int stdout_fd = -1;
    int stderr_fd = -1;
    std::string cwd;
    bool core_dumps = false;  // raise RLIMIT_CORE to its hard limit
    std::vector<std::string> env;
};

// A child killed and reaped when the test ends, however it ends.
class Child {
  public:
    Child(const std::vector<std::string>& argv, const SpawnOptions& options = {}) {
        std::vector<std::string> env_items;
        for (char** entry = environ; *entry != nullptr; ++entry) env_items.emplace_back(*entry);
        env_items.insert(env_items.end(), options.env.begin(), options.env.end());
        std::vector<char*> args;
        for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
        args.push_back(nullptr);
        std::vector<char*> envp;
        for (auto& item : env_items) envp.push_back(item.data());
        envp.push_back(nullptr);
        rlimit core{};
        ::getrlimit(RLIMIT_CORE, &core);
        core.rlim_cur = core.rlim_max;
        // The test runner is multithreaded: only async-signal-safe calls before exec.
        m_pid = ::fork();
        if (m_pid == 0) {
            if (options.stdout_fd >= 0) ::dup2(options.stdout_fd, 1);
            if (options.stderr_fd >= 0) ::dup2(options.stderr_fd, 2);
            if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) ::_exit(126);
            if (options.core_dumps) ::setrlimit(RLIMIT_CORE, &core);
            ::execve(args[0], args.data(), envp.data());
            ::_exit(127);
        }
        if (m_pid < 0) ADD_FAILURE() << "fork failed";
    }
    ~Child() {
        if (m_pid <= 0 || m_reaped) return;
        ::kill(m_pid, SIGKILL);
        wait();
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    pid_t pid() const { return m_pid; }
    int wait() {
        while (!m_reaped && ::waitpid(m_pid, &m_status, 0) < 0 && errno == EINTR) {
        }
        m_reaped = true;
        return m_status;
    }

  private:
    pid_t m_pid = -1;
    int m_status = 0;
    bool m_reaped = false;
};

// The state letter of /proc/PID/stat ('S', 'Z', 'T', ...), or 0 when it is gone.
char state_of(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return 0;
    std::size_t close = line.rfind(") ");
    return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}

// Waits (bounded: this catches a hang, it measures nothing) until the child
// runs `program` and sleeps in it.
bool wait_until_sleeping_in(pid_t pid, const std::string& program) {
    auto end = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < end) {
        std::error_code ec;
        auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
        if (!ec && exe.filename() == program && state_of(pid) == 'S') return true;
        std::this_thread::sleep_for(5ms);
    }
    return false;
}

Child sleeper() {
    return Child({"/bin/sleep", "100"});
}

std::string write_tool(const TempDir& dir, const std::string& name, const std::string& script) {
    std::string path = (dir.path() / name).string();
    std::ofstream(path) << "#!/bin/sh\n" << script;
    ::chmod(path.c_str(), 0755);
    return path;
}

TEST(StackCapture, SleepingChildrenNameTheSleep) {
    for (std::string tool : {"eu-stack", "gdb"}) {
        SCOPED_TRACE(tool);
        if (!on_path(tool)) {
            std::cout << tool << " not found: not tested\n";
            continue;
        }
        Child first = sleeper();
        Child second = sleeper();
        ASSERT_TRUE(wait_until_sleeping_in(first.pid(), "sleep"));
        ASSERT_TRUE(wait_until_sleeping_in(second.pid(), "sleep"));
        auto start = std::chrono::steady_clock::now();
        auto stacks = capture_native_stacks({first.pid(), second.pid()}, 60s, tool);
        auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - start);
        std::cout << tool << ": 2 processes in " << took.count() << " ms\n";
        ASSERT_EQ(stacks.size(), 2u);
        for (std::size_t i = 0; i < 2; ++i) {
            pid_t pid = i == 0 ? first.pid() : second.pid();
            EXPECT_EQ(stacks[i].pid, pid);
            EXPECT_EQ(stacks[i].error, "");
            EXPECT_NE(stacks[i].text.find("nanosleep"), std::string::npos) << stacks[i].text;
            std::string top = native_top_frames(stacks[i].text, pid);
            EXPECT_NE(top.find("sleep"), std::string::npos) << top;
        }
    }
}

TEST(StackCapture, ExitedProcessGetsOneLine) {
    Child zombie({"/bin/true"});
    auto end = std::chrono::steady_clock::now() + 10s;
    while (state_of(zombie.pid()) != 'Z' && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(2ms);
    pid_t reaped_pid = 0;
    {
        Child gone({"/bin/true"});
        gone.wait();
        reaped_pid = gone.pid();
    }
    for (std::string tool : {std::string("eu-stack"), std::string("gdb"), std::string()}) {
        auto stacks = capture_native_stacks({zombie.pid(), reaped_pid, 0}, 10s, tool);
        ASSERT_EQ(stacks.size(), 3u);
        for (const auto& stack : stacks) {
            EXPECT_EQ(stack.text, "");
            EXPECT_EQ(stack.error.find('\n'), std::string::npos) << stack.error;
        }
        if (tool.empty()) {
            EXPECT_EQ(stacks[0].error, k_no_stack_tool);
            continue;
        }
        if (!on_path(tool)) continue;
        EXPECT_EQ(stacks[0].error, "process " + std::to_string(zombie.pid()) + " has exited");
        EXPECT_EQ(stacks[1].error, "process " + std::to_string(reaped_pid) + " has exited");
        EXPECT_EQ(stacks[2].error, "0 is not a process id");
    }
}

TEST(StackCapture, ToolPastTheDeadlineIsKilledWithItsChildren) {
    TempDir dir;
    std::string pids = (dir.path() / "pids").string();
    // A tool that never finishes, with a child of its own holding its pipes.
    std::string tool = write_tool(
        dir, "eu-stack", "echo $$ > " + pids + "\nsleep 100 &\necho $! >> " + pids + "\nwait\n");
    Child target = sleeper();
    ASSERT_TRUE(wait_until_sleeping_in(target.pid(), "sleep"));
    auto start = std::chrono::steady_clock::now();
    auto stacks = capture_native_stacks({target.pid()}, 300ms, tool);
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_EQ(stacks.size(), 1u);
    EXPECT_EQ(stacks[0].error, "eu-stack -p " + std::to_string(target.pid()) +
                                   " did not finish within 300 ms: killed it");
    EXPECT_LT(took, 5s);
    std::ifstream in(pids);
    std::vector<pid_t> tool_pids;
    for (pid_t pid = 0; in >> pid;) tool_pids.push_back(pid);
    ASSERT_EQ(tool_pids.size(), 2u);
    // Both were killed; reparented to init, they may be zombies for a moment.
    for (pid_t pid : tool_pids) {
        auto end = std::chrono::steady_clock::now() + 5s;
        while (state_of(pid) != 0 && state_of(pid) != 'Z' && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(2ms);
        char state = state_of(pid);
        EXPECT_TRUE(state == 0 || state == 'Z') << pid << " is in state " << state;
    }
    EXPECT_EQ(state_of(target.pid()), 'S');
}

TEST(StackCapture, RealGdbPastTheDeadlineLeavesNothingBehind) {
    if (!on_path("gdb")) GTEST_SKIP() << "gdb not found";
    Child target = sleeper();
    ASSERT_TRUE(wait_until_sleeping_in(target.pid(), "sleep"));
    // A gdb for this pid still running (a killed one may be a zombie of init's
    // for a moment: it has no command line then).
    auto gdb_left = [&] {
        std::string wanted = std::string("-p") + '\0' + std::to_string(target.pid()) + '\0';
        for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
            std::string cmdline = testing::read_file(entry.path() / "cmdline");
            std::string program = cmdline.substr(0, cmdline.find('\0'));
            if ((program == "gdb" || program.ends_with("/gdb")) &&
                cmdline.find(wanted) != std::string::npos)
                return true;
        }
        return false;
    };
    // gdb needs some 200-500 ms here: these deadlines stop it before, during and
    // after its attach.
    for (auto deadline : {30ms, 100ms, 200ms, 300ms}) {
        SCOPED_TRACE(deadline.count());
        auto stacks = capture_native_stacks({target.pid()}, deadline, "gdb");
        ASSERT_EQ(stacks.size(), 1u);
        if (!stacks[0].text.empty()) continue;  // a fast machine
        EXPECT_EQ(stacks[0].error, "gdb -p " + std::to_string(target.pid()) +
                                       " did not finish within " +
                                       std::to_string(deadline.count()) + " ms: killed it");
        auto end = std::chrono::steady_clock::now() + 5s;
        while (gdb_left() && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(2ms);
        EXPECT_FALSE(gdb_left());
        // The target is neither stopped nor still traced: it can be captured again.
        end = std::chrono::steady_clock::now() + 2s;
        while (state_of(target.pid()) != 'S' && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(2ms);
        EXPECT_EQ(state_of(target.pid()), 'S');
        auto again = capture_native_stacks({target.pid()}, 60s);
        EXPECT_EQ(again[0].error, "");
    }
}

TEST(StackCapture, ToolFailureIsOneLine) {
    TempDir dir;
    std::string tool = write_tool(dir, "eu-stack",
                                  "echo 'PID 1 - process'\necho 'TID 1:'\n"
                                  "echo 'eu-stack: dwfl_thread_getframes tid 1: Operation not "
                                  "permitted' >&2\necho \"eu-stack: Couldn't show any frames.\" "
                                  ">&2\nexit 2\n");
    Child target = sleeper();
    auto stacks = capture_native_stacks({target.pid()}, 10s, tool);
    EXPECT_EQ(stacks[0].text, "");
    std::string pid = std::to_string(target.pid());
    EXPECT_EQ(stacks[0].error,
              "eu-stack -p " + pid +
                  " printed no stack (exit 2): dwfl_thread_getframes tid 1: Operation not "
                  "permitted; Couldn't show any frames. (ptrace refused: another debugger "
                  "attached, or see /proc/sys/kernel/yama/ptrace_scope)");
}

TEST(StackCapture, TheAgentsReaperDoesNotTakeTheTool) {
    TempDir dir;
    std::string tool = write_tool(dir, "eu-stack", "echo 'no frames' >&2\nexit 3\n");
    Child target = sleeper();
    std::vector<NativeStack> stacks;
    std::atomic<bool> done = false;
    std::thread capture([&] {
        for (int i = 0; i < 5; ++i) stacks = capture_native_stacks({target.pid()}, 10s, tool);
        done = true;
    });
    // What the agent does on every SIGCHLD, in a loop while the captures run.
    std::vector<pid_t> reaped;
    auto reap = [&] { reap_exited([&](pid_t pid, int) { reaped.push_back(pid); }); };
    while (!done) {
        reap();
        std::this_thread::sleep_for(100us);
    }
    capture.join();
    reap();
    EXPECT_TRUE(reaped.empty()) << reaped.size() << " processes taken, the first " << reaped[0];
    EXPECT_EQ(stacks.at(0).error, "eu-stack -p " + std::to_string(target.pid()) +
                                      " printed no stack (exit 3): no frames");
}

TEST(StackCapture, ProcessTracedByAnotherIsRefused) {
    std::string tool = native_stack_tool();
    if (tool.empty()) GTEST_SKIP() << "no eu-stack or gdb found";
    Child target = sleeper();
    ASSERT_TRUE(wait_until_sleeping_in(target.pid(), "sleep"));
    // This thread becomes its tracer (PTRACE_SEIZE does not stop it), so the
    // tool's own attach is refused, as under a debugger or yama's ptrace_scope.
    ASSERT_EQ(::ptrace(PTRACE_SEIZE, target.pid(), nullptr, nullptr), 0) << std::strerror(errno);
    auto stacks = capture_native_stacks({target.pid()}, 60s, tool);
    EXPECT_EQ(stacks[0].text, "");
    EXPECT_EQ(stacks[0].error.find('\n'), std::string::npos);
    EXPECT_NE(stacks[0].error.find("not permitted"), std::string::npos) << stacks[0].error;
    EXPECT_NE(stacks[0].error.find("ptrace refused"), std::string::npos) << stacks[0].error;
}

TEST(StackCapture, OutputIsBoundedAndToolsAreLookedUp) {
    TempDir dir;
    std::string tool =
        write_tool(dir, "eu-stack",
                   "echo 'TID 1:'\necho '#0  0x1 f'\nhead -c 1000000 /dev/zero | tr '\\0' x\n");
    Child target = sleeper();
    auto stacks = capture_native_stacks({target.pid()}, 10s, tool, 1024);
    EXPECT_EQ(stacks[0].error, "");
    EXPECT_EQ(stacks[0].text.size(), 1024u + std::string("\n[cut at 1 KiB]\n").size());
    EXPECT_EQ(native_top_frames(stacks[0].text, 1), "f");

    stacks = capture_native_stacks({target.pid()}, 10s, "/nonexistent/eu-stack");
    EXPECT_EQ(stacks[0].error, "stack tool /nonexistent/eu-stack not found");
    std::string found = native_stack_tool();
    EXPECT_TRUE(found.empty() || found == "eu-stack" || found == "gdb") << found;
    EXPECT_EQ(found.empty(), !on_path("eu-stack") && !on_path("gdb"));
}

TEST(PythonWorker, IsPythonByExecutable) {
    for (const char* yes : {"/usr/bin/python3.11", "python3", "/opt/py/bin/python",
                            "/usr/bin/python3.11 (deleted)", "/usr/bin/python3.12d"})
        EXPECT_TRUE(is_python_executable(yes)) << yes;
    for (const char* no : {"/usr/bin/pypy3", "/usr/bin/bash", "", "/x/python-config",
                           "/usr/bin/python3-torchrun", "/python3/sleep"})
        EXPECT_FALSE(is_python_executable(no)) << no;
    EXPECT_FALSE(is_python(::getpid()));
    EXPECT_FALSE(is_python(0));
    if (::access(k_python, X_OK) != 0) GTEST_SKIP() << k_python << " not found";
    Child python({k_python, "-c", "import time; time.sleep(100)"});
    ASSERT_TRUE(wait_until_sleeping_in(python.pid(),
                                       std::filesystem::canonical(k_python).filename().string()));
    EXPECT_TRUE(is_python(python.pid()));
}

TEST(PythonWorker, AbortPrintsTracebacksAndWritesNoCore) {
    if (::access(k_python, X_OK) != 0) GTEST_SKIP() << k_python << " not found";
    TempDir dir;
    std::string err_path = (dir.path() / "stderr").string();
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int ready[2];
    ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    const char* script =
        "import sys, threading, time\n"
        "def helper():\n"
        "    time.sleep(100)\n"
        "def hang_here():\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(100)\n"
        "threading.Thread(target=helper, daemon=True).start()\n"
        "print('loss 0.5', file=sys.stderr, flush=True)\n"
        "hang_here()\n";
    SpawnOptions options{.stdout_fd = ready[1],
                         .stderr_fd = err,
                         .cwd = dir.path().string(),
                         .core_dumps = true,
                         .env = {"PYTHONFAULTHANDLER=1"}};
    Child python({k_python, "-c", script}, options);
    ::close(ready[1]);
    ::close(err);
    pollfd wait_ready{ready[0], POLLIN, 0};
    ASSERT_EQ(::poll(&wait_ready, 1, 20000), 1) << "the Python child never said it was ready";
    ::close(ready[0]);

    ASSERT_TRUE(disable_core_dumps(python.pid()));
    rlimit core{};
    ASSERT_EQ(::prlimit(python.pid(), RLIMIT_CORE, nullptr, &core), 0);
    EXPECT_EQ(core.rlim_cur, 0u);
    ASSERT_EQ(::kill(python.pid(), SIGABRT), 0);
    int status = python.wait();
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGABRT);
    EXPECT_FALSE(WCOREDUMP(status));
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
        EXPECT_FALSE(entry.path().filename().string().starts_with("core")) << entry.path();

    std::string text = testing::read_file(err_path);
    auto threads = parse_faulthandler(text);
    ASSERT_EQ(threads.size(), 2u) << text;
    // Line 5 or 6: the signal may come before print() has returned.
    std::string top = python_top_frames(threads, 2);
    EXPECT_TRUE(top.starts_with("hang_here (<string>:")) << top;
    EXPECT_TRUE(top.ends_with(" <- <module> (<string>:9)")) << top;
    EXPECT_EQ(threads[0].frames.at(0).function, "helper");

    auto refused = disable_core_dumps(python.pid());
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("prlimit(" + std::to_string(python.pid())),
              std::string::npos);
}

}  // namespace
}  // namespace ddprun
