// What the test services (etcd_server.hpp, sshd_server.hpp) share: writing
// their files, and waiting for a process they started, by pid, never by name.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace ddprun {

void write_file(const std::string& path, const std::string& text);

// Reaps `pid` within `bound`; false if it still runs.
bool reap_within(pid_t pid, std::chrono::milliseconds bound);

// SIGTERM, then SIGKILL if it has not exited within `grace`; reaped either way.
void stop_process(pid_t pid, std::chrono::milliseconds grace);

}  // namespace ddprun
