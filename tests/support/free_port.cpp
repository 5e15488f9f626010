// A port for a test's listener, outside the ephemeral range (see free_port.hpp).
#include "support/free_port.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>

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

// How many of this process's claims are held at once (see claim_test_port).
constexpr std::size_t k_claims = 64;

}  // namespace

// A claim is an flock on a file named after the port, which every test process
// (ctest -j runs several) takes before it returns a port. Why: a port is bound
// only seconds after it is picked (the agent that hosts the store starts first),
// and a test that picked the same port in between took it: an agent of one test
// met the other test's store and left, and the first job's node 0 waited its
// whole join timeout for it. A claim lasts for this process's next k_claims
// picks (or until it exits): long past the bind, after which bindable() keeps
// the others off, and few descriptors for a binary that runs hundreds of tests.
bool claim_test_port(int port) {
    static const std::string dir = [] {
        const char* tmp = std::getenv("TMPDIR");
        std::string path =
            std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ddprun-test-ports";
        ::mkdir(path.c_str(), 01777);
        ::chmod(path.c_str(), 01777);  // tests run as root and as others: any may claim
        return path;
    }();
    std::string file = dir + "/" + std::to_string(port);
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return true;  // cannot coordinate (a read-only /tmp): bindable() still holds
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd);
        return false;
    }
    static std::mutex mutex;
    static std::deque<int> claims;
    std::lock_guard lock(mutex);
    claims.push_back(fd);
    if (claims.size() > k_claims) {
        ::close(claims.front());
        claims.pop_front();
    }
    return true;
}

int free_test_port() {
    // Random, so that tests running at once (ctest -j) rarely try the same port;
    // claim_test_port() makes "rarely" never among test processes.
    static std::mutex mutex;
    static std::mt19937 random{std::random_device{}()};
    std::lock_guard lock(mutex);
    std::uniform_int_distribution<int> pick(k_first, k_first + k_count - 1);
    for (int attempt = 0; attempt < 1000; ++attempt) {
        int port = pick(random);
        if (claim_test_port(port) && bindable(port)) return port;
    }
    throw std::runtime_error("no free TCP port in 10000-19999 on 127.0.0.1");
}

LoopbackListener listen_on_loopback(int backlog) {
    LoopbackListener listener{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), 0};
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener.fd < 0 ||
        ::bind(listener.fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener.fd, backlog) != 0 ||
        ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        if (listener.fd >= 0) ::close(listener.fd);
        return {};
    }
    listener.port = ntohs(address.sin_port);
    return listener;
}

}  // namespace ddprun
