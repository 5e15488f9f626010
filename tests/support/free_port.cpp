// A port for a test's listener, outside the ephemeral range (see free_port.hpp).
#include "support/free_port.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <stdexcept>

namespace ddprun {

namespace {

constexpr int k_first = 10000;
constexpr int k_count = 10000;

bool bindable(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return ok;
}

}  // namespace

int free_test_port() {
    // Random, so that tests running at once (ctest -j) rarely try the same port.
    static thread_local std::mt19937 random{std::random_device{}()};
    std::uniform_int_distribution<int> pick(k_first, k_first + k_count - 1);
    for (int attempt = 0; attempt < 1000; ++attempt) {
        int port = pick(random);
        if (bindable(port)) return port;
    }
    throw std::runtime_error("no free TCP port in 10000-19999 on 127.0.0.1");
}

}  // namespace ddprun
