// Spawning workers (see spawn.hpp) through launch_process (base/child_process.hpp):
// Boost.Process v2's vfork launcher, with the worker's own setup (its pipes,
// its progress fd, its CPU binding) done in the child before exec.
#include "ddprun/workers/spawn.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ddprun/base/child_process.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/devices/binding.hpp"

namespace ddprun {
namespace {

// In the child, after the dup2s (system calls only): 0, or the binding failed.
int bind_worker(const void* plan) noexcept {
    return apply_binding(*static_cast<const BindingPlan*>(plan));
}

// "NAME=VALUE" strings and the null-terminated array execve takes.
struct CStrings {
    std::vector<std::string> storage;
    std::vector<const char*> pointers;

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

    ChildSetup setup;
    setup.what = "a worker";
    setup.in = stdio.in;
    setup.out = stdio.out;
    setup.err = stdio.err;
    setup.keep_fd = stdio.progress;
    setup.keep_fd_as = k_worker_progress_fd;
    setup.allow_parent_ptrace = stdio.progress >= 0;  // hang detection's stack tool
    setup.last_step = bind_worker;
    setup.last_step_arg = &spec.binding;
    setup.last_step_failed =
        "ddprun: cannot pin the worker to its CPUs (sched_setaffinity failed)\n";
    auto pid = launch_process(executable, argv.pointers.data(), envp.pointers.data(), setup);
    if (!pid) {
        const int error = pid.error().value();
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
    return *pid;
}

void signal_worker_group(pid_t worker, int signal) {
    if (::kill(-worker, signal) == 0) return;
    // No group (the worker left it, or is not quite in it yet): the worker itself.
    if (errno == ESRCH && (::kill(worker, signal) == 0 || errno == ESRCH)) return;
    spdlog::warn("kill({}, {}): {}", worker, signal_name(signal), std::strerror(errno));
}

}  // namespace ddprun
