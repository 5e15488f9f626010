// A TCP connection made with bounds: `ddprun status` asks whether a Slurm step's
// store port accepts (a store client on a port nothing listens on would wait its
// whole timeout), and the store plugin connects to the endpoint itself before
// c10d does (whose client would wait without a bound, or die of a reset).
// Header-only: the plugin (plugin/), which must not link libddprun, uses it too.
#pragma once

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <expected>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "ddprun/base/fd.hpp"

namespace ddprun {

enum class ConnectFailure {
    Unresolved,   // the host name has no address here
    NotAccepted,  // nothing accepted a connection in time (refused, unreachable, silent)
};

// A connected, blocking, close-on-exec socket to host:port. Every address
// `host` resolves to is tried in turn, each attempt for at most `attempt_bound`
// (nullopt: as long as the kernel tries); when none accepts, all again every
// 10 ms until `retry_for` has passed (zero: one round).
inline std::expected<UniqueFd, ConnectFailure> connect_tcp(
    const std::string& host, int port, std::optional<std::chrono::milliseconds> attempt_bound,
    std::chrono::milliseconds retry_for = std::chrono::milliseconds(0)) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
        return std::unexpected(ConnectFailure::Unresolved);
    // Connects without blocking, so that the attempt's bound is poll's.
    auto attempt = [&attempt_bound](const addrinfo& at) {
        UniqueFd fd(
            ::socket(at.ai_family, at.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, at.ai_protocol));
        if (!fd) return fd;
        bool connected = ::connect(fd.get(), at.ai_addr, at.ai_addrlen) == 0;
        if (!connected && errno == EINPROGRESS) {
            const auto until = std::chrono::steady_clock::now() +
                               attempt_bound.value_or(std::chrono::milliseconds(0));
            pollfd poll_fd{fd.get(), POLLOUT, 0};
            int ready = -1;
            do {
                int wait = -1;
                if (attempt_bound) {
                    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
                        until - std::chrono::steady_clock::now());
                    wait = static_cast<int>(
                        std::clamp<std::int64_t>(left.count(), 0, std::numeric_limits<int>::max()));
                }
                ready = ::poll(&poll_fd, 1, wait);
            } while (ready < 0 && errno == EINTR);
            int error = 0;
            socklen_t size = sizeof error;
            connected = ready == 1 &&
                        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) == 0 &&
                        error == 0;
        }
        if (connected) {
            const int flags = ::fcntl(fd.get(), F_GETFL);
            connected = flags >= 0 && ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) == 0;
        }
        if (!connected) fd.reset();
        return fd;
    };
    const auto deadline = std::chrono::steady_clock::now() + retry_for;
    UniqueFd fd;
    for (;;) {
        for (addrinfo* at = found; at != nullptr && !fd; at = at->ai_next) fd = attempt(*at);
        if (fd || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a refusal wakes nothing
    }
    ::freeaddrinfo(found);
    if (!fd) return std::unexpected(ConnectFailure::NotAccepted);
    return fd;
}

// Whether something accepts a TCP connection at host:port within `bound`.
inline bool accepts_tcp(const std::string& host, int port, std::chrono::milliseconds bound) {
    return connect_tcp(host, port, bound).has_value();
}

}  // namespace ddprun
