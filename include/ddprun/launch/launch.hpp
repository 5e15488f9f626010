// Launch: everything decided about this node before any process starts, and
// the one call that runs it. prepare_launch() resolves what the config leaves
// to the machine (devices, --nproc_per_node, CPU binding, the program) and
// makes the directories the workers need; run_launch() hands the result to
// the supervisor and the agent. main() only parses, calls these two and exits
// with what they return.
#pragma once

#include <expected>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/plan/launch_context.hpp"

namespace ddprun {

struct PreparedLaunch {
    LaunchContext context;
    // With --dry-run: the rank plan of the whole job, to print; nothing else
    // was prepared (no program check, no directories).
    std::string dry_run_plan;
};

// Errors: a usage error (2) for devices, nproc, binding, --log_dir, the etcd
// backend's TLS and password files (--rdzv_conf) or the job secret; 75 for a
// --hosts launcher's secret that did not come; 126/127
// for the program; 70 when no temporary directory can be made.
std::expected<PreparedLaunch, Error> prepare_launch(const LaunchConfig& config,
                                                    const Environment& env);

// --preflight (an agent of --hosts, fan_out.hpp): after prepare_launch() has
// checked what this node needs, checks that node 0's rendezvous port is free
// when this node would host the store. Returns the answer to print, starting
// with k_preflight_answer, or the one-line error (75 for a port in use).
std::expected<std::string, Error> preflight_answer(const LaunchContext& context);

// Runs the job under the supervisor (the agent in a child process) and returns
// ddprun's exit code. The scratch directory is gone when it returns.
int run_launch(LaunchContext context);

}  // namespace ddprun
