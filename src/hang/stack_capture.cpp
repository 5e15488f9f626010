// Runs eu-stack or gdb against workers and collects what they print (see
// stacks.hpp).
//
// Each tool is a child of ours, started by launch_process (Boost.Process) in
// a process group of its own, and owned (owned_children in process_tree.hpp):
// the agent's reaper keeps its exit status for this thread instead of taking
// it, so its pid stays ours to kill at the deadline until this thread lets go.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "ddprun/base/child_process.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/hang/stacks.hpp"

extern char** environ;

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

// The path of `name` on PATH, or "" (a name with a '/' is taken as a path).
std::string find_executable(std::string_view name) {
    if (name.empty()) return {};
    if (name.find('/') != std::string_view::npos)
        return ::access(std::string(name).c_str(), X_OK) == 0 ? std::string(name) : "";
    const char* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
    while (true) {
        std::size_t colon = dirs.find(':');
        std::string dir(dirs.substr(0, colon));
        std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + std::string(name);
        std::error_code ec;
        if (std::filesystem::is_regular_file(candidate, ec) &&
            ::access(candidate.c_str(), X_OK) == 0)
            return candidate;
        if (colon == std::string_view::npos) return {};
        dirs.remove_prefix(colon + 1);
    }
}

// "" when the process is there to attach to, else why not.
std::string why_not_attachable(pid_t pid) {
    if (pid <= 0) return fmt::format("{} is not a process id", pid);
    auto ids = process_ids(pid);
    if (!ids || ids->state == 'Z' || ids->state == 'X')
        return fmt::format("process {} has exited", pid);
    return {};
}

// One tool run: its pipes, what it printed so far, and how it ended.
struct ToolRun {
    pid_t target = 0;
    pid_t child = -1;
    UniqueFd out;
    UniqueFd err;
    std::string out_text;
    std::string err_text;
    bool out_cut = false;
    bool reaped = false;
    int status = 0;     // its wait status, once reaped
    std::string error;  // set when it could not start
};

// Owned argv/envp storage whose c_str() pointers the child uses.
struct Strings {
    std::vector<std::string> items;
    std::vector<const char*> pointers() {
        std::vector<const char*> out;
        for (auto& item : items) out.push_back(item.data());
        out.push_back(nullptr);
        return out;
    }
};

// The tools' environment: ddprun's, in the C locale (their messages are shown
// and parsed), without DEBUGINFOD_URLS (a hang report must not wait on
// downloads of debug info).
Strings tool_environment() {
    Strings env;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        std::string_view item(*entry);
        if (item.starts_with("LC_") || item.starts_with("LANG=") || item.starts_with("LANGUAGE=") ||
            item.starts_with("DEBUGINFOD_URLS="))
            continue;
        env.items.emplace_back(item);
    }
    env.items.emplace_back("LC_ALL=C");
    return env;
}

void start(ToolRun& run, const std::string& path, bool gdb, const char* const* envp, int stdin_fd) {
    Strings args;
    std::string pid = std::to_string(run.target);
    if (gdb)
        args.items = {path,
                      "-p",
                      pid,
                      "-batch",
                      "-nx",
                      "-ex",
                      "set pagination off",
                      "-ex",
                      "thread apply all bt"};
    else
        args.items = {path, "-p", pid};
    auto argv = args.pointers();

    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
        run.error = fmt::format("pipe2: {}", std::strerror(errno));
        return;
    }
    run.out.reset(out[0]);
    UniqueFd out_write(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) {
        run.error = fmt::format("pipe2: {}", std::strerror(errno));
        return;
    }
    run.err.reset(err[0]);
    UniqueFd err_write(err[1]);
    // Only our ends are non-blocking; the tool writes to blocking pipes.
    ::fcntl(run.out.get(), F_SETFL, O_NONBLOCK);
    ::fcntl(run.err.get(), F_SETFL, O_NONBLOCK);

    ChildSetup setup;
    setup.what = "the stack tool";
    setup.in = stdin_fd;
    setup.out = out_write.get();
    setup.err = err_write.get();
    std::error_code error;
    run.child = owned_children::start([&]() -> pid_t {
        auto tool = launch_process(path, argv.data(), envp, setup);
        if (!tool) error = tool.error();
        return tool ? *tool : -1;
    });
    if (run.child < 0) {
        run.error = fmt::format("cannot run {}: {}", path, error.message());
        run.out.reset();
        run.err.reset();
    }
}

bool try_reap(ToolRun& run) {
    if (run.reaped || run.child < 0) return true;
    if (auto status = owned_children::exit_status(run.child)) {
        run.status = *status;
        run.reaped = true;
        owned_children::release(run.child);
    }
    return run.reaped;
}

// Reads what is there; closes the fd at end of file. Keeps up to `max_bytes`.
void drain(UniqueFd& fd, std::string& text, bool& cut, std::size_t max_bytes) {
    const ReadEnd end = read_chunks(fd.get(), [&](std::string_view chunk) {
        const std::size_t keep = std::min(chunk.size(), max_bytes - text.size());
        text.append(chunk.substr(0, keep));
        if (keep < chunk.size()) cut = true;
        return true;
    });
    if (end != ReadEnd::Drained) fd.reset();
}

// Kills the tool, and reaps it within a bound; a SIGKILLed process ends at
// once unless the kernel holds it, and then waiting longer would not help.
void kill_and_reap(ToolRun& run) {
    owned_children::kill(run.child, SIGKILL);
    auto bound = Clock::now() + std::chrono::seconds(2);
    while (!try_reap(run) && Clock::now() < bound) {
        timespec pause{0, 1'000'000};
        ::nanosleep(&pause, nullptr);
    }
    // Still there: the kernel holds it. The reaper takes it when it ends.
    if (!run.reaped) owned_children::release(run.child);
}

// One line from the tool's stderr: its messages without its name, joined.
std::string tool_failure(const ToolRun& run, std::string_view tool) {
    std::string reasons;
    std::string_view text = run.err_text;
    while (!text.empty() && reasons.size() < 300) {
        std::size_t newline = text.find('\n');
        std::string_view line = trim(text.substr(0, newline));
        text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
        if (line.starts_with("eu-stack: ")) line.remove_prefix(10);
        if (line.empty()) continue;
        if (!reasons.empty()) reasons += "; ";
        reasons += line;
    }
    std::string how;
    if (run.reaped && WIFSIGNALED(run.status))
        how = fmt::format(" (killed by signal {})", WTERMSIG(run.status));
    else if (run.reaped && WIFEXITED(run.status) && WEXITSTATUS(run.status) != 0)
        how = fmt::format(" (exit {})", WEXITSTATUS(run.status));
    std::string message = fmt::format("{} -p {} printed no stack{}: {}", tool, run.target, how,
                                      reasons.empty() ? "no message" : reasons);
    if (reasons.find("not permitted") != std::string::npos ||
        reasons.find("Permission denied") != std::string::npos)
        message +=
            " (ptrace refused: another debugger attached, or see "
            "/proc/sys/kernel/yama/ptrace_scope)";
    return message;
}

}  // namespace

std::string native_stack_tool() {
    for (std::string_view tool : {"eu-stack", "gdb"})
        if (!find_executable(tool).empty()) return std::string(tool);
    return {};
}

std::vector<NativeStack> capture_native_stacks(const std::vector<pid_t>& pids,
                                               std::chrono::milliseconds deadline,
                                               std::string_view tool, std::size_t max_bytes) {
    const auto end = Clock::now() + deadline;
    std::vector<NativeStack> results(pids.size());
    std::string path = find_executable(tool);
    std::string tool_name = std::filesystem::path(std::string(tool)).filename().string();
    std::vector<ToolRun> runs(pids.size());
    for (std::size_t i = 0; i < pids.size(); ++i) {
        results[i].pid = runs[i].target = pids[i];
        if (path.empty())
            runs[i].error = tool.empty() ? std::string(k_no_stack_tool)
                                         : fmt::format("stack tool {} not found", tool);
        else
            runs[i].error = why_not_attachable(pids[i]);
    }

    UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    Strings env = tool_environment();
    auto envp = env.pointers();
    for (auto& run : runs)
        if (run.error.empty())
            start(run, path, tool_name.starts_with("gdb"), envp.data(), dev_null.get());

    for (;;) {
        std::vector<pollfd> fds;
        std::vector<ToolRun*> owners;
        bool exiting = false;  // a tool closed its pipes and has not been reaped yet
        for (auto& run : runs) {
            if (run.child < 0 || run.reaped) continue;
            for (UniqueFd* fd : {&run.out, &run.err}) {
                if (!*fd) continue;
                fds.push_back({fd->get(), POLLIN, 0});
                owners.push_back(&run);
            }
            if (!run.out && !run.err && !try_reap(run)) exiting = true;
        }
        if (fds.empty() && !exiting) break;
        auto left = std::chrono::ceil<std::chrono::milliseconds>(end - Clock::now());
        if (left.count() <= 0) break;
        // Nothing signals a tool's exit to this thread (SIGCHLD is the reaper's); its
        // pipes closing says it is ending, and a few milliseconds later it has.
        int timeout = static_cast<int>(exiting ? std::min<long>(left.count(), 5) : left.count());
        int ready = ::poll(fds.data(), fds.size(), timeout);
        if (ready < 0 && errno != EINTR) break;
        for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
            if (fds[i].revents == 0) continue;
            ToolRun& run = *owners[i];
            bool is_out = run.out && run.out.get() == fds[i].fd;
            bool ignored_cut = false;
            if (is_out)
                drain(run.out, run.out_text, run.out_cut, max_bytes);
            else
                drain(run.err, run.err_text, ignored_cut, 16 * 1024);
        }
    }

    for (std::size_t i = 0; i < runs.size(); ++i) {
        ToolRun& run = runs[i];
        if (!run.error.empty()) {
            results[i].error = run.error;
            continue;
        }
        if (!run.reaped) {
            kill_and_reap(run);
            // PTRACE_ATTACH sends SIGSTOP: a tool killed before it waited for that
            // stop leaves it pending, and the worker stops once detached. A stopped
            // worker prints no traceback and ignores SIGTERM. (Defensive: the tests
            // have not caught gdb in that window.)
            ::kill(run.target, SIGCONT);
            results[i].error = fmt::format("{} -p {} did not finish within {}: killed it",
                                           tool_name, run.target, duration_text(deadline));
            continue;
        }
        if (run.out_text.starts_with("#0") || run.out_text.find("\n#0") != std::string::npos) {
            results[i].text = std::move(run.out_text);
            if (run.out_cut)
                results[i].text += fmt::format("\n[cut at {} KiB]\n", max_bytes / 1024);
        } else {
            results[i].error = tool_failure(run, tool_name);
        }
    }
    return results;
}

}  // namespace ddprun
