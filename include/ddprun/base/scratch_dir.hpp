// The job's private scratch directory, $TMPDIR/ddprun-XXXXXX (workers' error
// files when there is no --log_dir), and the reclaiming of those that a killed
// job left behind. Why: Slurm's `scancel JOB.STEP`, KillWait under
// proctrack/cgroup or an OOM kill SIGKILLs the agent and the supervisor at
// once, so neither removes its directory; nothing of a job may outlive it on
// disk, so the next ddprun on the machine removes it.
//
// How a dead job's directory is told from a live one's: its owner holds an
// exclusive flock on "<dir>/.lock" for as long as it lives (the supervisor and
// the agent share it across fork; workers never get it, the fd is CLOEXEC).
// The lock file appears under that name already locked (created as
// ".lock.new", locked, then renamed), so a directory being created is never
// mistaken for a dead one. One without a .lock (its owner was killed between
// mkdtemp and the rename, or it is not ddprun's) is left alone.
#pragma once

#include <expected>
#include <string>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"

namespace ddprun {

// The directory under which scratch directories are made: $TMPDIR, else /tmp.
std::string scratch_base(const Environment& env);

// Makes this process's scratch directory under `base` and locks it for the life
// of the process (the lock's fd is never closed). Error: exit code kInternal,
// naming the call and the directory.
std::expected<std::string, Error> make_scratch_dir(const std::string& base);

// Removes a scratch directory: renamed to "<dir>.gone" first, so that a
// process killed while removing it (the supervisor and the agent both remove
// it; one SIGKILLed midway, say the .lock gone and the rest not) leaves a name
// that the next ddprun knows to be dead, never a directory without its lock.
void remove_scratch_dir(const std::string& dir);

// Removes the scratch directories under `base` that this user's dead ddprun
// processes left (and the ".gone" ones a killed remover left); returns how many.
int reclaim_scratch_dirs(const std::string& base);

}  // namespace ddprun
