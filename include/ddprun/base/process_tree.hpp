// Process-tree housekeeping for a child subreaper: whatever the job started,
// however deep and however daemonized, ends up as one of our children once
// its parent dies, and sweep_children() kills and reaps all of them. Both the
// supervisor and the agent use it, so that no process of the job outlives
// ddprun.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <expected>
#include <functional>
#include <optional>
#include <vector>

#include "ddprun/base/error.hpp"

namespace ddprun {

// Makes the calling process a child subreaper; the error names the call.
Status become_subreaper();

// The pids whose parent is `parent`, from /proc; an error when /proc cannot
// be read.
std::expected<std::vector<pid_t>, Error> children_of(pid_t parent);

// A process's parent, process group and state, from /proc/<pid>/stat; nullopt when
// it is gone (or /proc cannot say).
struct ProcessIds {
    pid_t ppid = 0;
    pid_t pgid = 0;
    char state = '?';  // 'Z' a zombie, 'X' dead, 't' traced, ...
};
std::optional<ProcessIds> process_ids(pid_t pid);

// SIGKILLs every child (and the process group it leads) and reaps, repeatedly,
// until no child is left or `bound` has passed. SIGCHLD must be blocked in the
// caller (it is waited for with sigtimedwait, not polled). `on_reaped` is
// called for each reaped pid with its wait status. Returns the number of
// children still present at the deadline (0 on success), or an error naming
// the call that failed: /proc could not be read (the children are then not
// known, so not killed), or a kill failed and children are left.
std::expected<int, Error> sweep_children(std::chrono::milliseconds bound,
                                         const std::function<void(pid_t, int)>& on_reaped = {});

// Reaps every exited child without waiting; calls on_reaped for each.
void reap_exited(const std::function<void(pid_t, int)>& on_reaped);

// Children that a thread other than the reaper starts and waits for itself (the
// stack tools, hang/stack_capture.cpp). reap_exited and sweep_children keep the
// exit status of such a child here instead of passing it on, so its owner
// learns how it ended, and its pid (and group id) stay its owner's to signal
// until the owner lets go.
namespace owned_children {

// Calls `start` (which returns a child's pid, or -1) and takes the pid it
// returns; no reaper runs in between, so the child cannot be reaped unowned.
pid_t start(const std::function<pid_t()>& start);

// The child's wait status once it has exited (reaped here or by a reaper),
// nullopt while it runs.
std::optional<int> exit_status(pid_t pid);

// Sends `signal` to the child and its process group while it is not reaped.
void kill(pid_t pid, int signal);

// Gives the pid up (after exit_status, or when the caller stops caring).
void release(pid_t pid);

}  // namespace owned_children

}  // namespace ddprun
