// connect_tcp (tcp_connect.hpp) against real sockets on loopback: a listener,
// a port nothing listens on, one that starts listening later, a name that
// does not resolve, a listener that does not accept in time.
#include "ddprun/base/tcp_connect.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ddprun/base/fd.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

// A TCP socket bound to a free port of 127.0.0.1, listening if asked.
struct Socket {
    UniqueFd fd;
    int port = 0;
};

Socket bound_socket(bool listening, int backlog = 8) {
    Socket s{UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), 0};
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(s.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t size = sizeof addr;
    EXPECT_EQ(::getsockname(s.fd.get(), reinterpret_cast<sockaddr*>(&addr), &size), 0);
    s.port = ntohs(addr.sin_port);
    if (listening) {
        EXPECT_EQ(::listen(s.fd.get(), backlog), 0);
    }
    return s;
}

TEST(TcpConnect, ConnectsToAListenerWithABlockingSocket) {
    Socket listener = bound_socket(true);
    auto fd = connect_tcp("127.0.0.1", listener.port, 500ms);
    ASSERT_TRUE(fd.has_value());
    const int flags = ::fcntl(fd->get(), F_GETFL);
    EXPECT_EQ(flags & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(fd->get(), F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_TRUE(connect_tcp("localhost", listener.port, std::nullopt).has_value());
    EXPECT_TRUE(accepts_tcp("127.0.0.1", listener.port, 500ms));
}

TEST(TcpConnect, APortNothingListensOnIsNotAccepted) {
    Socket closed = bound_socket(false);  // bound, so that no one else takes the port meanwhile
    EXPECT_EQ(connect_tcp("127.0.0.1", closed.port, 500ms),
              std::unexpected(ConnectFailure::NotAccepted));
    EXPECT_FALSE(accepts_tcp("127.0.0.1", closed.port, 500ms));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(connect_tcp("127.0.0.1", closed.port, 500ms, 200ms).has_value());
    EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms) << "tried again for the window";
}

TEST(TcpConnect, TriesAgainUntilTheListenerStarts) {
    Socket later = bound_socket(false);
    std::thread start([&] {
        std::this_thread::sleep_for(100ms);
        ::listen(later.fd.get(), 8);
    });
    auto fd = connect_tcp("127.0.0.1", later.port, 500ms, 20s);
    start.join();
    EXPECT_TRUE(fd.has_value());
}

TEST(TcpConnect, ANameThatDoesNotResolve) {
    EXPECT_EQ(connect_tcp("no-such-host.invalid", 80, 500ms),
              std::unexpected(ConnectFailure::Unresolved));
}

TEST(TcpConnect, EachAttemptIsBounded) {
    // A listener whose backlog is full: further handshakes get no answer (Linux drops the SYN).
    Socket full = bound_socket(true, 0);
    std::vector<UniqueFd> held;
    for (int i = 0; i < 8; ++i) {
        auto fd = connect_tcp("127.0.0.1", full.port, 200ms);
        if (!fd) break;
        held.push_back(std::move(*fd));
    }
    ASSERT_LT(held.size(), 8u) << "the backlog never filled";
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(connect_tcp("127.0.0.1", full.port, 200ms).has_value());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "not bounded by 200 ms";
}

}  // namespace
}  // namespace ddprun
