// The agent's side of torch's FileTimer watchdog
// (torch/distributed/elastic/timer/file_based_local_timer.py), which torchrun
// serves when its environment has TORCHELASTIC_ENABLE_FILE_TIMER=1. A worker
// wraps a step in `with expires(after=N, scope=...)`; its FileTimerClient
// writes one JSON line per acquire or release to a FIFO whose path it finds
// in TORCHELASTIC_TIMER_FILE; the server signals a worker whose scope ran
// out. The worker then dies and ddprun's usual failure path takes over.
//
// Requests are untrusted input: anyone who can open the FIFO can write to it,
// and nothing in the protocol says who wrote a line. A line that is not a
// well-formed request is skipped, and only this node's workers and their
// descendants are ever signalled, so a stray writer cannot make ddprun kill
// an arbitrary process.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/environment.hpp"
#include "ddprun/error.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

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
// a signal above 64, an expiration time that is not finite or is absurdly far
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

class FileTimerServer {
  public:
    // For a pid, the rank of the running worker whose pid it is; nullopt for
    // any other pid. The server itself extends this to the worker's descendants.
    using WorkerRank = std::function<std::optional<int>(pid_t)>;

    // Makes the FIFO at `path` (a FIFO already there is replaced, as torch
    // does; anything else there is an error) and serves it on `io` until
    // destroyed. `user_path`: the path came from the user (TORCHELASTIC_TIMER_FILE),
    // so a failure is a usage error (2) rather than an internal one (70).
    static std::expected<std::unique_ptr<FileTimerServer>, Error> create(
        boost::asio::io_context& io, std::string path, WorkerRank worker_rank,
        bool user_path = false);
    // Removes the FIFO (if it is still the one it made).
    ~FileTimerServer();
    FileTimerServer(const FileTimerServer&) = delete;
    FileTimerServer& operator=(const FileTimerServer&) = delete;

    const std::string& path() const;
    // Timers held now (tests).
    std::size_t timer_count() const;

  private:
    struct Impl;
    explicit FileTimerServer(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> m_impl;
};

// torchrun's switch: a server when `env` has TORCHELASTIC_ENABLE_FILE_TIMER=1
// exactly, at TORCHELASTIC_TIMER_FILE if set, else in `scratch_dir`; nullptr
// (no server, the variables pass through untouched) for any other value.
std::expected<std::unique_ptr<FileTimerServer>, Error> serve_file_timer(
    boost::asio::io_context& io, const Environment& env, const std::string& scratch_dir,
    FileTimerServer::WorkerRank worker_rank);

}  // namespace ddprun
