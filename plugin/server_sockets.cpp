// Finds the store server's sockets among the process's descriptors (see the header).
#include "server_sockets.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdlib>
#include <memory>

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

}  // namespace

BoundSockets bound_server_reads(int port, std::chrono::milliseconds gap) {
    BoundSockets bound;
    std::unique_ptr<DIR, int (*)(DIR*)> fds(::opendir("/proc/self/fd"), ::closedir);
    if (!fds) return bound;
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(gap).count();
    const timeval timeout{static_cast<time_t>(micros / 1'000'000),
                          static_cast<suseconds_t>(micros % 1'000'000)};
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
