// Spawning workers with Boost.Process (see spawn.hpp). Everything the
// child must do between fork and exec is in one async-signal-safe hook.
#include "ddprun/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <cstring>

#include "ddprun/binding.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/logging.hpp"
#include "ddprun/signals.hpp"

namespace bp = boost::process;

namespace ddprun {
namespace {

// In the child, before exec: says which call failed on whatever stderr the child
// has (the agent's before the dup2s, the worker's pipe after) and exits 70.
template <std::size_t N>
[[noreturn]] void child_failed(const char (&message)[N]) {
    (void)!::write(2, message, N - 1);
    ::_exit(exit_code::kInternal);
}

// Runs in the child after fork, before exec: only async-signal-safe calls.
struct ChildSetup {
    pid_t agent;
    WorkerStdio stdio;
    const BindingPlan* binding;

    void operator()(auto& /*executor*/) const {
        // Own process group: the agent signals the worker and whatever it started in one call,
        // and a terminal's Ctrl-C reaches only ddprun, which then decides.
        if (::setpgid(0, 0) != 0) child_failed("ddprun: cannot start a worker: setpgid failed\n");
        if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
            child_failed("ddprun: cannot start a worker: prctl(PR_SET_PDEATHSIG) failed\n");
        // The agent may have died between fork and prctl: then no death signal will come.
        if (::getppid() != agent) ::_exit(exit_code::kSignalBase + SIGKILL);
        if (::dup2(stdio.in, 0) < 0 || ::dup2(stdio.out, 1) < 0 || ::dup2(stdio.err, 2) < 0)
            child_failed("ddprun: cannot start a worker: dup2 of its standard streams failed\n");
        // After the dup2s, so that the message reaches the worker's stderr pipe.
        if (apply_binding(*binding) != 0)
            child_failed("ddprun: cannot pin the worker to its CPUs (sched_setaffinity failed)\n");
        // Like subprocess's close_fds: nothing of the agent's (or of whoever started the
        // agent) leaks into workers. CLOEXEC rather than close keeps Boost.Process's exec-error
        // pipe working until exec.
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
        // survive exec, so restore the defaults a program expects.
        sigset_t none;
        sigemptyset(&none);
        if (::signal(SIGPIPE, SIG_DFL) == SIG_ERR ||
            ::sigprocmask(SIG_SETMASK, &none, nullptr) != 0)
            child_failed("ddprun: cannot start a worker: restoring its signal mask failed\n");
    }
};

}  // namespace

std::expected<pid_t, Error> spawn_worker(const WorkerSpec& spec, const std::string& executable,
                                         const Environment& base_env, WorkerStdio stdio) {
    bp::environment env;
    for (const auto& [name, value] : base_env) env[name] = value;
    for (const auto& [name, value] : spec.env) env[name] = value;

    std::vector<std::string> args(spec.argv.begin() + 1, spec.argv.end());
    std::error_code ec;
    bp::child child(bp::exe = executable, bp::args = args, env,
                    bp::extend::on_exec_setup = ChildSetup{::getpid(), stdio, &spec.binding}, ec);
    if (ec) {
        int code = ec.value() == ENOENT ? exit_code::kNotFound
                   : (ec.value() == EACCES || ec.value() == ENOEXEC || ec.value() == EISDIR)
                       ? exit_code::kNotExecutable
                       : exit_code::kInternal;
        std::string hint = ec.value() == ENOEXEC ? " (a script needs a #! line)" : "";
        return std::unexpected(
            Error{spec.argv.front() + ": cannot execute: " + ec.message() + hint, code});
    }
    pid_t pid = child.id();
    // The agent owns the pid from here: it reaps in its one waitpid loop.
    child.detach();
    return pid;
}

void signal_worker_group(pid_t worker, int signal) {
    if (::kill(-worker, signal) == 0) return;
    // No group (the worker left it, or is not quite in it yet): the worker itself.
    if (errno == ESRCH && (::kill(worker, signal) == 0 || errno == ESRCH)) return;
    spdlog::warn("kill({}, {}): {}", worker, signal_name(signal), std::strerror(errno));
}

}  // namespace ddprun
