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

#include "ddprun/binding.hpp"
#include "ddprun/config.hpp"
#include "ddprun/environment.hpp"
#include "ddprun/error.hpp"

namespace ddprun {

// What the agent and its layers read, resolved once.
struct LaunchContext {
    LaunchConfig config;
    Environment env;                    // the agent's environment, inherited by workers
    NodeResources resources;            // devices and CPUs of this node
    int nproc = 1;                      // workers on this node (--nproc_per_node resolved)
    std::vector<BindingPlan> bindings;  // by local rank; empty: no --cpu/--numa-binding
    std::string executable;             // resolved argv[0] of the worker command
    std::string scratch_dir;            // private dir for error files when there is no --log_dir
    std::string log_dir;                // "" or the --log_dir (possibly a temp dir for -r/-t)
    std::string host;                   // this node's name, for reports
    std::string etcd_password;          // read from --rdzv_conf password_file (etcd backend)
    std::string rdzv_secret;            // the job secret (job_secret.hpp); empty: none
};

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
