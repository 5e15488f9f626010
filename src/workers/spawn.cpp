// Spawning workers (see spawn.hpp) with vfork and execve. Everything the
// child must do between the two is in one async-signal-safe function.
//
// Why not fork (Boost.Process did): fork copies the agent's page tables for
// every worker, and both sides then fault on each page they write until the
// child execs: about a millisecond per worker on the 2-CPU build machine,
// most of what ddprun cost over a shell loop (bench/run.sh (m)). A vfork
// child borrows the agent's memory and stack until it execs, and the agent
// waits for that, so the child may only make system calls; argv and the
// environment are built before.
#include "ddprun/workers/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/devices/binding.hpp"

namespace ddprun {
namespace {

// In the child, before exec: says which call failed on whatever stderr the child
// has (the agent's before the dup2s, the worker's pipe after) and exits 70.
template <std::size_t N>
[[noreturn]] void child_failed(const char (&message)[N]) {
    (void)!::write(2, message, N - 1);
    ::_exit(exit_code::kInternal);
}

// Runs in the child after vfork, before exec: only async-signal-safe calls.
void set_up_child(pid_t agent, const WorkerStdio& stdio, const BindingPlan& binding) {
    // Own process group: the agent signals the worker and whatever it started in one call,
    // and a terminal's Ctrl-C reaches only ddprun, which then decides.
    if (::setpgid(0, 0) != 0) child_failed("ddprun: cannot start a worker: setpgid failed\n");
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        child_failed("ddprun: cannot start a worker: prctl(PR_SET_PDEATHSIG) failed\n");
    // The agent may have died between vfork and prctl: then no death signal will come.
    if (::getppid() != agent) ::_exit(exit_code::kSignalBase + SIGKILL);
    if (::dup2(stdio.in, 0) < 0 || ::dup2(stdio.out, 1) < 0 || ::dup2(stdio.err, 2) < 0)
        child_failed("ddprun: cannot start a worker: dup2 of its standard streams failed\n");
    // After the dup2s, so that the message reaches the worker's stderr pipe.
    if (apply_binding(binding) != 0)
        child_failed("ddprun: cannot pin the worker to its CPUs (sched_setaffinity failed)\n");
    // Like subprocess's close_fds: nothing of the agent's (or of whoever started the
    // agent) leaks into workers.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
        child_failed("ddprun: cannot start a worker: close_range failed\n");
    // The one fd ddprun means the worker to have (progress.hpp), at the number its
    // environment names.
    if (stdio.progress >= 0 && ::fcntl(stdio.progress, F_SETFD, 0) != 0)
        child_failed("ddprun: cannot start a worker: fcntl of its progress fd failed\n");
    // With hang detection on, the agent's stack tool (eu-stack, gdb: a child of the
    // agent, not an ancestor of the worker) must be let attach where Yama's
    // ptrace_scope is 1. Without Yama the call fails (EINVAL) and nothing is needed.
    if (stdio.progress >= 0) (void)::prctl(PR_SET_PTRACER, agent, 0, 0, 0);
    // The agent blocks signals (it reads them from a signalfd) and ignores SIGPIPE; both
    // survive exec, so restore the defaults a program expects. No handler is installed
    // anywhere in ddprun, so none can run here on the agent's memory.
    sigset_t none;
    sigemptyset(&none);
    if (::signal(SIGPIPE, SIG_DFL) == SIG_ERR || ::sigprocmask(SIG_SETMASK, &none, nullptr) != 0)
        child_failed("ddprun: cannot start a worker: restoring its signal mask failed\n");
}

// "NAME=VALUE" strings and the null-terminated array execve takes.
struct CStrings {
    std::vector<std::string> storage;
    std::vector<char*> pointers;

    void seal() {
        for (std::string& item : storage) pointers.push_back(item.data());
        pointers.push_back(nullptr);
    }
};

}  // namespace

std::expected<pid_t, Error> spawn_worker(const WorkerSpec& spec, const std::string& executable,
                                         const Environment& base_env, WorkerStdio stdio) {
    Environment merged = base_env;
    for (const auto& [name, value] : spec.env) merged[name] = value;
    CStrings envp;
    envp.storage.reserve(merged.size());
    for (const auto& [name, value] : merged) envp.storage.push_back(name + "=" + value);
    envp.seal();
    // argv[0] is the resolved executable, as Boost.Process gave it before.
    CStrings argv;
    argv.storage.push_back(executable);
    argv.storage.insert(argv.storage.end(), spec.argv.begin() + 1, spec.argv.end());
    argv.seal();

    const pid_t agent = ::getpid();
    // Written by the child (it shares this frame until it execs or exits).
    volatile int exec_error = 0;
    const pid_t pid = ::vfork();
    if (pid == 0) {
        set_up_child(agent, stdio, spec.binding);
        ::execve(executable.c_str(), argv.pointers.data(), envp.pointers.data());
        exec_error = errno;
        ::_exit(exit_code::kNotFound);
    }
    if (pid < 0)
        return std::unexpected(
            Error{spec.argv.front() + ": cannot execute: vfork: " + std::strerror(errno),
                  exit_code::kInternal});
    if (exec_error != 0) {
        // Never a worker: reaped here, where its pid is known (the agent's waitpid loop
        // runs on this same thread, later).
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        const int error = exec_error;
        int code = error == ENOENT ? exit_code::kNotFound
                   : (error == EACCES || error == ENOEXEC || error == EISDIR)
                       ? exit_code::kNotExecutable
                       : exit_code::kInternal;
        std::string hint = error == ENOEXEC ? " (a script needs a #! line)" : "";
        return std::unexpected(Error{
            spec.argv.front() + ": cannot execute: " + std::system_category().message(error) + hint,
            code});
    }
    // The agent owns the pid from here: it reaps in its one waitpid loop.
    return pid;
}

void signal_worker_group(pid_t worker, int signal) {
    if (::kill(-worker, signal) == 0) return;
    // No group (the worker left it, or is not quite in it yet): the worker itself.
    if (errno == ESRCH && (::kill(worker, signal) == 0 || errno == ESRCH)) return;
    spdlog::warn("kill({}, {}): {}", worker, signal_name(signal), std::strerror(errno));
}

}  // namespace ddprun
