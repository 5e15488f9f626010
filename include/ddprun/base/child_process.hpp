// Starting a child process: every process ddprun starts (workers, the ssh
// clients of --hosts, the stack tools) goes through launch_process, which is
// Boost.Process v2's vfork launcher with one initializer that does what the
// child needs between vfork and exec (ChildSetup). A vfork child borrows the
// parent's memory and stack until it execs, so that initializer makes system
// calls only; everything it reads is prepared before.
#pragma once

#include <sys/types.h>

#include <expected>
#include <string>
#include <system_error>

namespace ddprun {

// What the child does before it execs, in this order: leads its own process
// group; gets SIGKILL when the thread that started it ends (and exits at once
// if that already happened); takes `in`, `out`, `err` as its standard streams;
// runs `last_step`; closes every other fd but `keep_fd`, which it keeps as
// `keep_fd_as` (-1: at its own number);
// lets its parent ptrace it; starts with no signal blocked and SIGPIPE at its
// default. A step that fails writes "ddprun: cannot start WHAT: STEP failed"
// to the child's stderr and exits 70: the caller sees a child that ended.
struct ChildSetup {
    const char* what = "a process";  // for the messages above: "a worker"
    int in = 0;
    int out = 1;
    int err = 2;
    int keep_fd = -1;
    int keep_fd_as = -1;
    bool own_group = true;
    bool allow_parent_ptrace = false;  // PR_SET_PTRACER (Yama's ptrace_scope 1)
    // Called in the child (system calls only): 0, or non-zero to fail with
    // `last_step_failed` as the whole message.
    int (*last_step)(const void* arg) noexcept = nullptr;
    const void* last_step_arg = nullptr;
    const char* last_step_failed = "";
};

// Starts `executable` (a path, not searched on PATH) with `argv` (argv[0]
// included) and `envp`, both null-terminated. Returns the child's pid, which
// the caller reaps, or the error of the vfork or of the exec (that child is
// reaped here: it never ran the program).
std::expected<pid_t, std::error_code> launch_process(const std::string& executable,
                                                     const char* const* argv,
                                                     const char* const* envp,
                                                     const ChildSetup& setup);

}  // namespace ddprun
