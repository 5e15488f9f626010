// Process-tree housekeeping for a child subreaper: whatever the job started,
// however deep and however daemonized, ends up as one of our children once
// its parent dies, and sweep_children() kills and reaps all of them. Both the
// supervisor and the agent use it, so that no process of the job outlives
// ddprun.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ddprun {

// Makes the calling process a child subreaper. Returns "" or an error message.
std::string become_subreaper();

// The pids whose parent is `parent`, from /proc.
std::vector<pid_t> children_of(pid_t parent);

// SIGKILLs every child (and the process group it leads) and reaps, repeatedly,
// until no child is left or `bound` has passed. SIGCHLD must be blocked in the
// caller (it is waited for with sigtimedwait, not polled). `on_reaped` is
// called for each reaped pid with its wait status. Returns the number of
// children still present at the deadline (0 on success).
int sweep_children(std::chrono::milliseconds bound,
                   const std::function<void(pid_t, int)>& on_reaped = {});

// Reaps every exited child without waiting; calls on_reaped for each.
void reap_exited(const std::function<void(pid_t, int)>& on_reaped);

}  // namespace ddprun
