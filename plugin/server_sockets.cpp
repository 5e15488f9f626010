// The store server's sockets with a bound on their reads: made here for c10d, or found
// among the process's descriptors where c10d makes them (see the header).
#include "server_sockets.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace ddprun_plugin {
namespace {

int local_port(int fd) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
    if (address.ss_family == AF_INET)
        return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
    if (address.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
    return -1;
}

int int_option(int fd, int name) {
    int value = -1;
    socklen_t length = sizeof value;
    if (::getsockopt(fd, SOL_SOCKET, name, &value, &length) != 0) return -1;
    return value;
}

timeval to_timeval(std::chrono::milliseconds gap) {
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(gap).count();
    return {static_cast<time_t>(micros / 1'000'000), static_cast<suseconds_t>(micros % 1'000'000)};
}

// The call that just failed on `address`; errno is read before anything can change it.
std::unexpected<ListenFailure> failed(const char* call, const std::string& address) {
    const int error = errno;
    return std::unexpected(
        ListenFailure{error, std::string(call) + " " + address + ": " + std::strerror(error)});
}

// One attempt of c10d's SocketListenOp: the wildcard address of `family`.
std::expected<Listener, ListenFailure> listen_on(int family, int port, const timeval& timeout) {
    const std::string address = (family == AF_INET6 ? "[::]:" : "0.0.0.0:") + std::to_string(port);
    ddprun::UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return failed("socket for", address);
    const int on = 1;
    const int off = 0;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0)
        return failed("setsockopt SO_REUSEADDR on", address);
    if (family == AF_INET6 &&
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0)
        return failed("setsockopt IPV6_V6ONLY off on", address);
    // Before listen(): every connection that completes on the socket starts with it.
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0)
        return failed("setsockopt SO_RCVTIMEO on", address);
    sockaddr_storage storage{};
    socklen_t length = 0;
    if (family == AF_INET6) {
        auto& ipv6 = reinterpret_cast<sockaddr_in6&>(storage);
        ipv6.sin6_family = AF_INET6;
        ipv6.sin6_addr = in6addr_any;
        ipv6.sin6_port = htons(static_cast<std::uint16_t>(port));
        length = sizeof ipv6;
    } else {
        auto& ipv4 = reinterpret_cast<sockaddr_in&>(storage);
        ipv4.sin_family = AF_INET;
        ipv4.sin_addr.s_addr = htonl(INADDR_ANY);
        ipv4.sin_port = htons(static_cast<std::uint16_t>(port));
        length = sizeof ipv4;
    }
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&storage), length) != 0)
        return failed("bind to", address);
    if (::listen(fd.get(), SOMAXCONN) != 0) return failed("listen on", address);
    const int bound = local_port(fd.get());
    if (bound < 0) return failed("getsockname of", address);
    return Listener{std::move(fd), bound};
}

}  // namespace

std::expected<Listener, ListenFailure> listen_for_store(int port, std::chrono::milliseconds gap) {
    const timeval timeout = to_timeval(gap);
    auto ipv6 = listen_on(AF_INET6, port, timeout);
    if (ipv6) return ipv6;
    auto ipv4 = listen_on(AF_INET, port, timeout);
    if (ipv4 || ipv6.error().error != EADDRINUSE) return ipv4;
    return ipv6;  // a port taken on IPv6 says more than IPv4's failure after it
}

BoundSockets bound_server_reads(int port, std::chrono::milliseconds gap) {
    BoundSockets bound;
    std::unique_ptr<DIR, int (*)(DIR*)> fds(::opendir("/proc/self/fd"), ::closedir);
    if (!fds) return bound;
    const timeval timeout = to_timeval(gap);
    const int own = ::dirfd(fds.get());
    while (const dirent* entry = ::readdir(fds.get())) {
        char* end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || fd == own) continue;
        // Another thread may close the descriptor and open something else under its
        // number meanwhile: only a TCP socket on the store's port is touched.
        const int socket = static_cast<int>(fd);
        if (int_option(socket, SO_TYPE) != SOCK_STREAM || local_port(socket) != port) continue;
        if (::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0) continue;
        ++(int_option(socket, SO_ACCEPTCONN) == 1 ? bound.listening : bound.accepted);
    }
    return bound;
}

}  // namespace ddprun_plugin
