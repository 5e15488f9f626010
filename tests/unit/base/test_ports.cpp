// Endpoints ("host:port", "[v6]:port"), free-port reservations, and the
// tests' own port picker.
#include "ddprun/base/ports.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "support/free_port.hpp"

namespace ddprun {
namespace {

TEST(Ports, SplitsAnEndpoint) {
    struct Case {
        std::string text;
        std::string host;
        int port;
    };
    const Case cases[] = {
        {"node0", "node0", 29400},     {"node0:1234", "node0", 1234},   {"node0:", "node0", 29400},
        {"10.0.0.1:0", "10.0.0.1", 0}, {"node0:65535", "node0", 65535}, {"[::1]:1234", "::1", 1234},
        {"[::1]", "::1", 29400},       {"fe80::1", "fe80::1", 29400},  // a bare IPv6 address: no
                                                                       // port
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto endpoint = split_endpoint(c.text, 29400);
        ASSERT_TRUE(endpoint) << endpoint.error().message;
        EXPECT_EQ(endpoint->host, c.host);
        EXPECT_EQ(endpoint->port, c.port);
    }
}

// These once threw from std::stoi (e.g. --master_addr=node0:abc).
TEST(Ports, ABadPortIsAUsageErrorNotAnException) {
    for (std::string text : {"node0:abc", "node0:99999999999999999999", "node0:65536", "node0:-1",
                             "node0:12x", "[::1]:abc", "[::1"}) {
        SCOPED_TRACE(text);
        std::expected<Endpoint, Error> endpoint;
        ASSERT_NO_THROW(endpoint = split_endpoint(text, 29400));
        ASSERT_FALSE(endpoint);
        EXPECT_EQ(endpoint.error().exit_code, exit_code::kUsage);
        EXPECT_NE(endpoint.error().message.find(text), std::string::npos)
            << endpoint.error().message;
    }
}

TEST(Ports, ReservesAFreePort) {
    auto first = PortReservation::reserve();
    ASSERT_TRUE(first) << first.error().message;
    auto second = PortReservation::reserve();
    ASSERT_TRUE(second) << second.error().message;
    EXPECT_GT(first->port(), 0);
    EXPECT_NE(first->port(), second->port()) << "a held port is not handed out again";
}

// Two test processes (ctest -j) once picked the same port in the seconds before
// either bound it: one job's agent met the other job's store.
TEST(FreeTestPort, APortOneTestProcessPickedIsNotAnotherProcesssToTake) {
    int port = free_test_port();
    EXPECT_FALSE(claim_test_port(port)) << "nor this process's, twice";
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(claim_test_port(port) ? 1 : 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "another process claimed port " << port;
}

}  // namespace
}  // namespace ddprun
