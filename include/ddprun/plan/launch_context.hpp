// LaunchContext: everything decided about this node before any process
// starts, as the agent and every layer under it read it. prepare_launch()
// (launch/launch.hpp) makes it; the layers below the launch only read it.
#pragma once

#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/devices/binding.hpp"

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

}  // namespace ddprun
