// Spawning and signalling one worker process. Each worker leads its own
// process group and is SIGKILLed by the kernel if the agent dies
// (PR_SET_PDEATHSIG); the agent reaps (one waitpid loop, in the Agent) and
// WorkerGroup decides. Started by Boost.Process (base/child_process.hpp).
#pragma once

#include <sys/types.h>

#include <expected>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/plan/rank_plan.hpp"

namespace ddprun {

// The fds a worker's standard streams are connected to (the caller keeps
// ownership and closes its copies after spawning).
struct WorkerStdio {
    int in = -1;
    int out = -1;
    int err = -1;
    int progress = -1;  // kept open in the worker as k_worker_progress_fd
};

// DDPRUN_PROGRESS_FD in every worker: one digit, the most a POSIX shell names in
// `>&N` (dash takes no more), above the 3, 4, ... a program or a script's own
// `exec 3>` takes first, and not flock(1)'s example's 9.
inline constexpr int k_worker_progress_fd = 8;

// Starts `spec` executing `executable` (the resolved argv[0]) with `base_env`
// plus spec.env. Must be called from the agent's main thread: the kernel
// delivers PR_SET_PDEATHSIG when the *thread* that forked exits.
std::expected<pid_t, Error> spawn_worker(const WorkerSpec& spec, const std::string& executable,
                                         const Environment& base_env, WorkerStdio stdio);

// Sends `signal` to the process group the worker leads. Only call while the
// worker is not yet reaped (its pid, and so its group id, cannot be reused).
void signal_worker_group(pid_t worker, int signal);

}  // namespace ddprun
