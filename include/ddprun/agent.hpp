// Agent: runs this node's workers for as many rounds as --max_restarts
// allows. One event loop (Boost.Asio): child exits and signals arrive through
// a signalfd, worker output through LogMux, grace periods are timers. Nothing
// polls on a sleep.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddprun/binding.hpp"
#include "ddprun/cli.hpp"
#include "ddprun/config.hpp"

namespace ddprun {

// What the agent needs besides the config: facts resolved once in main.
struct AgentContext {
    LaunchConfig config;
    Environment env;                    // the agent's environment, inherited by workers
    NodeResources resources;            // devices and CPUs of this node
    int nproc = 1;                      // workers on this node (--nproc_per_node resolved)
    std::vector<BindingPlan> bindings;  // by local rank; empty: no --cpu/--numa-binding
    std::string executable;             // resolved argv[0] of the worker command
    std::string scratch_dir;            // private dir for error files when there is no --log_dir
    std::string log_dir;                // "" or the --log_dir (possibly a temp dir for -r/-t)
    std::string host;                   // this node's name, for reports
};

class Agent {
  public:
    explicit Agent(AgentContext context);
    ~Agent();
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    // Runs the job to its end; returns ddprun's exit code. Never throws for a
    // worker's failure; prints the summary box when the job fails.
    int run();

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace ddprun
