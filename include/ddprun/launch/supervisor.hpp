// Supervisor: ddprun's top process. It forks the agent and stays a tiny child
// subreaper (as tini supervises its child): it forwards signals to the agent,
// and if the agent dies unexpectedly (SIGKILL, OOM killer) it kills whatever
// the job left behind. If the supervisor itself is SIGKILLed, the agent gets
// parent_death_signal() and kills the job at once. Either way no process of
// the job outlives ddprun.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ddprun {

// Runs `agent_main` in a forked child and supervises it; returns the exit code
// ddprun should exit with. `forwarded` are the signals passed on to the agent.
// `cleanup` runs once the agent is gone, before the leftover processes are swept.
int supervise(const std::function<int()>& agent_main, const std::vector<int>& forwarded,
              const std::function<void()>& cleanup);

}  // namespace ddprun
