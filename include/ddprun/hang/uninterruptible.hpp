// Workers stuck in Linux uninterruptible sleep (state D), torchrun 2.14's
// TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: a worker that stays in D that
// long is wedged in the kernel (a GPU driver, a NIC, a lost NFS server) and
// holds a resource a restarted worker on the same node would fight over, so
// the job stops without a restart (docs/hangs.md).
//
// The rules are pure (the variable, the state letter of /proc/PID/stat, how
// long each pid has been in D); read_proc_state is the one effect, and the
// agent owns the timer that calls it (agent_uninterruptible.cpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/environment.hpp"

namespace ddprun {

inline constexpr std::string_view k_uninterruptible_variable =
    "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT";

// What TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT in `env` says, read as torch
// reads it: Python's float() (surrounding blanks, a sign, exponents, digits
// grouped with '_'), positive seconds turn the check on; unset, empty, zero,
// negative, NaN and unparsable values leave it off, and so do infinity and
// anything past 10^9 s, which could never fire.
struct UninterruptibleSetting {
    std::optional<std::chrono::steady_clock::duration> timeout;  // empty: off
    std::string value;                                           // as set, for messages
    // Set where the value is not a number at all (off, as under torchrun, but
    // likely a mistake): the warning to print.
    std::string warning;
};
UninterruptibleSetting uninterruptible_setting(const Environment& env);

// How often the agent looks at its workers' states: a quarter of the timeout,
// within [10 ms, 1 s], so that a worker is caught within the timeout plus at
// most a quarter of it (and a second at most).
std::chrono::steady_clock::duration uninterruptible_look_period(
    std::chrono::steady_clock::duration timeout);

// The state letter of /proc/PID/stat's text ("1234 (a (b) c) D 1 ..."): the
// first field after the last ')', as the command name between the parentheses
// may hold spaces and parentheses itself. Empty when there is none.
std::optional<char> proc_stat_state(std::string_view stat);

// The state letter of process `pid` from /proc/PID/stat; empty where that
// cannot be read (the process is gone) or parsed.
std::optional<char> read_proc_state(pid_t pid);

// How long each worker has been in D, from one look at a time.
class UninterruptibleWatch {
  public:
    using Clock = std::chrono::steady_clock;

    explicit UninterruptibleWatch(Clock::duration timeout) : m_timeout(timeout) {}

    struct Seen {
        pid_t pid = 0;
        std::optional<char> state;  // empty: could not be read
    };
    struct Stuck {
        pid_t pid = 0;
        Clock::duration dwell{};  // in D since the first look that saw it there
    };
    struct Looked {
        std::vector<pid_t> entered;  // seen in D for the first time at this look
        std::vector<Stuck> stuck;    // in D for the timeout or longer
    };

    // One look at every worker still running, at `now`. A pid not among them is
    // forgotten; one in another state than D starts over; one whose state could
    // not be read keeps its time (as torch's check does). Results in `seen`'s order.
    Looked look(const std::vector<Seen>& seen, Clock::time_point now);

  private:
    Clock::duration m_timeout;
    std::map<pid_t, Clock::time_point> m_first_seen;
};

}  // namespace ddprun
