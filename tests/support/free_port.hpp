// A TCP port for a test's own listener (a store, an etcd member), chosen
// outside the kernel's ephemeral range. Why: a port the kernel hands out for
// bind(0) is also what it hands out as the source port of outgoing
// connections, and a busy machine (agents, etcd clients, benchmarks) makes
// thousands of those; a port picked there can be taken again before the test
// binds it ("port already in use"). Below the range only other tests pick.
#pragma once

namespace ddprun {

// A port in 10000-19999 that nothing on 127.0.0.1 is bound to right now and
// that no other test process has picked in its last 64 picks.
int free_test_port();

// Claims `port` against every other picker (false: another process, or this one,
// holds it). free_test_port() claims what it returns.
bool claim_test_port(int port);

// A test's stand-in for another program on a port: a socket listening on 127.0.0.1
// at a port the kernel picked (fd -1 on failure). The caller closes fd.
struct LoopbackListener {
    int fd = -1;
    int port = 0;
};
LoopbackListener listen_on_loopback(int backlog);

}  // namespace ddprun
