// launch_process (see child_process.hpp): Boost.Process v2's vfork launcher and the
// initializer that sets the child up.
//
// Why vfork and not the default launcher's fork: fork copies the parent's
// page tables for every child, and both sides then fault on each page they
// write until the child execs, about a millisecond per worker on the 2-CPU
// build machine (bench/run.sh (m)).
#include "ddprun/base/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
// Boost 1.81's process/v2/detail/config.hpp uses boost::optional without including it.
#include <boost/optional.hpp>
#include <boost/process/v2/posix/vfork_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ddprun/base/exit_codes.hpp"

namespace ddprun {
namespace {

namespace bp = boost::process::v2;

void write_text(const char* text) noexcept {
    (void)!::write(2, text, std::strlen(text));
}

[[noreturn]] void step_failed(const ChildSetup& setup, const char* step) noexcept {
    write_text("ddprun: cannot start ");
    write_text(setup.what);
    write_text(": ");
    write_text(step);
    write_text(" failed\n");
    ::_exit(exit_code::kInternal);
}

// In the vfork child, before exec: system calls only (child_process.hpp lists them).
void set_up_child(const ChildSetup& setup, pid_t parent) noexcept {
    // Own process group: the parent signals the child and whatever it started in one call,
    // and a terminal's Ctrl-C reaches only ddprun, which then decides.
    if (setup.own_group && ::setpgid(0, 0) != 0) step_failed(setup, "setpgid");
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) step_failed(setup, "prctl(PR_SET_PDEATHSIG)");
    // The parent may have died between vfork and prctl: then no death signal will come.
    if (::getppid() != parent) ::_exit(exit_code::kSignalBase + SIGKILL);
    if (::dup2(setup.in, 0) < 0 || ::dup2(setup.out, 1) < 0 || ::dup2(setup.err, 2) < 0)
        step_failed(setup, "dup2 of its standard streams");
    // After the dup2s, so that a message reaches the child's own stderr.
    if (setup.last_step != nullptr && setup.last_step(setup.last_step_arg) != 0) {
        write_text(setup.last_step_failed);
        ::_exit(exit_code::kInternal);
    }
    // Like subprocess's close_fds: nothing of ddprun's (or of whoever started it)
    // leaks into the child. The launcher then closes what lies above its whitelist
    // (0, 1, 2 and keep_fd); marking everything first covers the fds between them,
    // which Boost 1.81's close_all leaves open.
    // The kept fd is moved after the standard streams, whose sources it may replace.
    const int kept = setup.keep_fd >= 0 && setup.keep_fd_as >= 0 ? setup.keep_fd_as : setup.keep_fd;
    if (kept != setup.keep_fd && ::dup2(setup.keep_fd, kept) < 0)
        step_failed(setup, "dup2 of the fd it keeps");
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) step_failed(setup, "close_range");
    if (kept >= 0 && ::fcntl(kept, F_SETFD, 0) != 0)
        step_failed(setup, "fcntl(F_SETFD) of the fd it keeps");
    // The parent's stack tool (eu-stack, gdb: a child of the agent, not an ancestor
    // of the worker) must be let attach where Yama's ptrace_scope is 1. Without Yama
    // the call fails (EINVAL) and nothing is needed.
    if (setup.allow_parent_ptrace) (void)::prctl(PR_SET_PTRACER, parent, 0, 0, 0);
    // ddprun blocks signals (it reads them from a signalfd) and ignores SIGPIPE; both
    // survive exec, so restore the defaults a program expects. No handler is installed
    // anywhere in ddprun, so none can run here on the parent's memory.
    sigset_t none;
    sigemptyset(&none);
    if (::signal(SIGPIPE, SIG_DFL) == SIG_ERR || ::sigprocmask(SIG_SETMASK, &none, nullptr) != 0)
        step_failed(setup, "restoring its signal mask");
}

// The launcher's initializer: the hooks Boost.Process calls in the child.
struct ChildInitializer {
    const ChildSetup& setup;
    pid_t parent;

    template <typename Launcher>
    bp::error_code on_exec_setup(Launcher&, const std::filesystem::path&,
                                 const char* const*&) const {
        set_up_child(setup, parent);
        return {};
    }

    // After a failed execve. The launcher would call exit(), which runs the atexit
    // handlers on the parent's memory; _exit does not. The parent learns the error
    // from the launcher (the child sets it in the shared memory) and reaps. Variadic:
    // Boost 1.81 looks the hook up with other arguments than it calls it with.
    template <typename... Arguments>
    void on_exec_error(Arguments&&...) const noexcept {
        ::_exit(exit_code::kNotFound);
    }
};

}  // namespace

std::expected<pid_t, std::error_code> launch_process(const std::string& executable,
                                                     const char* const* argv,
                                                     const char* const* envp,
                                                     const ChildSetup& setup) {
    // A context of its own, with no reactor yet when the launcher forks: the launcher
    // calls notify_fork in the child, and a reactor would re-create its epoll and
    // eventfd there, writing their numbers into the memory the child shares with us.
    boost::asio::io_context context;
    bp::posix::vfork_launcher launcher;
    launcher.env = envp;
    if (setup.keep_fd >= 0)
        launcher.fd_whitelist.push_back(setup.keep_fd_as >= 0 ? setup.keep_fd_as : setup.keep_fd);
    bp::error_code error;
    try {
        auto process =
            launcher(context.get_executor(), error, std::filesystem::path(executable),
                     const_cast<const char**>(argv), ChildInitializer{setup, ::getpid()});
        // The caller reaps (ddprun has one waitpid loop per process); the process
        // object would otherwise kill the child when it goes.
        if (!error) process.detach();
    } catch (const std::exception&) {
        // The child started, but its pidfd (which we do not use) could not be opened.
        if (launcher.pid > 0 && !error) return launcher.pid;
        if (!error) error = std::make_error_code(std::errc::resource_unavailable_try_again);
    }
    if (!error) return launcher.pid;
    if (launcher.pid > 0) {
        int status = 0;
        while (::waitpid(launcher.pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    return std::unexpected(std::error_code(error.value(), std::system_category()));
}

}  // namespace ddprun
