// torch's FileTimer protocol as data: one request line parsed, and the timers
// a server holds with torch's rules for them (file_based_local_timer.py). Pure:
// no I/O and no clock, so every rule is tested without a FIFO or a wait. The
// server that reads the lines and sends the signals is file_timer.hpp.
#pragma once

#include <limits.h>
#include <sys/types.h>

#include <cstddef>
#include <expected>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun {

// torch's client refuses a request longer than PIPE_BUF: only writes up to
// that size are atomic, so a longer line may be interleaved with another's.
inline constexpr std::size_t k_file_timer_max_line = PIPE_BUF;

// One line of the protocol:
// {"version":1,"pid":P,"scope_id":S,"expiration_time":T,"signal":N}.
struct FileTimerRequest {
    pid_t pid = 0;
    std::string scope_id;
    double expiration_time = 0;  // seconds since the epoch; negative: a release
    int signal = 0;              // 0 or negative: expire without a signal (torch's meaning)

    bool is_release() const { return expiration_time < 0; }
};

// One line (its '\n' stripped) as a request, or why it is not one. Refused:
// not JSON, not an object, a missing field or one of the wrong type, pid <= 0,
// a signal outside -64..64, an expiration time that is not finite or is absurdly far
// away, a line longer than PIPE_BUF (torch's client never writes one). Extra
// fields and "version" are ignored, as torch's server ignores them.
std::expected<FileTimerRequest, std::string> parse_file_timer_request(std::string_view line);

// The timers held, by (pid, scope), and torch's rules for them: a request
// for a held scope replaces it, a release drops it, and a pid with an expired
// timer loses all of its timers at once. Pure: times are passed in.
class FileTimerTable {
  public:
    struct Timer {
        double expiration_time = 0;
        int signal = 0;
        double set_for = -1;  // seconds from its arrival to its expiration; < 0: not known
    };
    // What to do about one pid whose timers expired: the earliest expired timer
    // with a signal (torch's choice), else the earliest (signal <= 0: none).
    struct Expiry {
        pid_t pid = 0;
        std::string scope_id;
        int signal = 0;
        double set_for = -1;
    };

    // Sets or releases a timer; `now` (seconds since the epoch) dates its arrival.
    // False when a new timer would exceed `max_timers` (it is not set).
    bool apply(const FileTimerRequest& request, double now, std::size_t max_timers);
    std::optional<double> next_expiration() const;
    // Removes every pid with a timer at or before `now`, all its timers with it.
    std::vector<Expiry> take_expired(double now);
    void forget(pid_t pid);
    bool holds(pid_t pid) const;
    std::vector<pid_t> pids() const;
    std::size_t size() const { return m_timers.size(); }

  private:
    std::map<std::pair<pid_t, std::string>, Timer> m_timers;
};

}  // namespace ddprun
