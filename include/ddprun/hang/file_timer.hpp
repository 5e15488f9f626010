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
#include <memory>
#include <optional>
#include <string>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/hang/file_timer_table.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

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
