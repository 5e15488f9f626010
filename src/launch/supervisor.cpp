// ddprun's top process (see supervisor.hpp). Like tini: block signals, wait
// for them synchronously, forward, reap, exit with the child's code.
#include "ddprun/launch/supervisor.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "ddprun/base/error.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/signals.hpp"

namespace ddprun {
namespace {

// After the agent is gone, leftovers (reparented to us) get this long to die.
constexpr std::chrono::milliseconds k_sweep_bound{5000};

int exit_code_from_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return exit_code::kSignalBase + WTERMSIG(status);
    return exit_code::kInternal;
}

}  // namespace

int supervise(const std::function<int()>& agent_main, const std::vector<int>& forwarded,
              const std::function<void()>& cleanup) {
    if (auto subreaper = become_subreaper(); !subreaper)
        spdlog::warn("{}", subreaper.error().message);
    // Its stdout/stderr may be a link that is gone (a --hosts launcher's ssh): a message
    // must fail with EPIPE, not kill the supervisor before the job is swept. Workers reset
    // it (base/child_process.cpp).
    if (::signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        spdlog::warn("{}", system_error("signal(SIGPIPE)").message);

    std::vector<int> waited = forwarded;
    waited.push_back(SIGCHLD);
    waited.push_back(parent_death_signal());
    // Blocked before fork, so the agent starts with them blocked too and loses none.
    block_signals(waited);
    std::fflush(nullptr);

    // The one fork in ddprun that is not Boost.Process (base/child_process.hpp): the agent is
    // this process's own code (agent_main), not a program, and Boost.Process only starts
    // programs (every launcher of v2 execs). A re-exec of ddprun as the agent would have
    // to hand it what this process already holds and cannot read twice: the --hosts
    // lifeline's job secret (read from stdin), the scratch directory, the etcd password.
    const pid_t supervisor = ::getpid();
    const pid_t agent = ::fork();
    if (agent < 0) {
        spdlog::error("{}", system_error("fork").message);
        return exit_code::kInternal;
    }
    if (agent == 0) {
        // Without it a SIGKILLed supervisor would leave the agent and the job running.
        if (::prctl(PR_SET_PDEATHSIG, parent_death_signal()) != 0) {
            spdlog::error("{}", system_error("prctl(PR_SET_PDEATHSIG)").message);
            std::fflush(nullptr);
            ::_exit(exit_code::kInternal);
        }
        if (::getppid() != supervisor) ::_exit(exit_code::kSignalBase + SIGKILL);
        // Its own process group: a terminal's Ctrl-C reaches the supervisor only, which
        // forwards it once (the agent must count a second Ctrl-C, not a duplicate).
        if (::setpgid(0, 0) != 0) {
            spdlog::error("{}", system_error("setpgid").message);
            std::fflush(nullptr);
            ::_exit(exit_code::kInternal);
        }
        // The subreaper flag is not inherited across fork: the agent needs its own, so that
        // orphans of its workers come to it while it lives.
        if (auto subreaper = become_subreaper(); !subreaper)
            spdlog::warn("{}", subreaper.error().message);
        int code = agent_main();
        std::fflush(nullptr);
        ::_exit(code);
    }

    sigset_t set;
    sigemptyset(&set);
    for (int sig : waited) sigaddset(&set, sig);
    int code = exit_code::kInternal;
    for (bool agent_running = true; agent_running;) {
        siginfo_t info{};
        int sig = ::sigwaitinfo(&set, &info);
        if (sig < 0 && errno == EINTR) continue;
        if (sig < 0) {
            // Cannot wait for signals, so cannot supervise: end the job now rather than
            // spin or leave it unwatched.
            spdlog::error("{}; stopping every process of the job",
                          system_error("sigwaitinfo").message);
            // Nothing more to do if even these fail: the sweep below kills what is left.
            ::kill(agent, SIGKILL);
            int status = 0;
            while (::waitpid(agent, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        if (sig == SIGCHLD) {
            reap_exited([&](pid_t pid, int status) {
                if (pid != agent) return;  // an orphan of the job; swept below
                code = exit_code_from_status(status);
                agent_running = false;
                // The agent always exits by itself; a signal here means it was killed (SIGKILL,
                // the OOM killer) or crashed, and its workers are dying of PR_SET_PDEATHSIG.
                if (WIFSIGNALED(status))
                    spdlog::error(
                        "the ddprun agent died of signal {}; stopping every process of "
                        "the job",
                        WTERMSIG(status));
            });
        } else if (sig != parent_death_signal()) {
            // With who sent it, so that the agent can tell this copy from its own copy of a
            // signal sent to every process of the job. ESRCH cannot happen: the agent is not
            // reaped yet, and a zombie takes signals.
            sigval original{};
            original.sival_int = static_cast<int>(info.si_pid);
            if (::sigqueue(agent, sig, original) != 0)
                spdlog::error(
                    "{}",
                    system_error(fmt::format("sigqueue({}, {})", agent, signal_name(sig))).message);
        }
    }
    // The agent is gone, and with it whatever read the job's files: the cleanup first,
    // so that the sweep's wait cannot leave them to a SIGKILL.
    if (cleanup) cleanup();
    auto left = sweep_children(k_sweep_bound);
    if (!left)
        spdlog::error("{}", left.error().message);
    else if (*left > 0)
        spdlog::error("{} process(es) of the job did not die after SIGKILL", *left);
    return code;
}

}  // namespace ddprun
