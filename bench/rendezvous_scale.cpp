// The rendezvous code alone at scale: N agents, simulated as threads of one
// process, each with its own connection to a real TCPStore (the plugin's),
// join one round. Prints, per run, the time to open the N connections, the
// time until every agent has joined, and how many store operations the join
// cost each agent (the largest among the agents that do not host the store,
// and node 0's).
//
// Why it exists: the join must cost every agent a constant number of store
// operations whatever N is, and 1024 agents should join within seconds. Real
// agents (bench.py's section (h), rdzv-agents) cannot go past a few dozen on
// one machine, because each one loads libtorch; threads can. bench.py runs
// this program and prints the table (bench/README.md).
//
//     rendezvous_scale AGENTS [RUNS]
//
// One line per run on stdout:
//     agents=N connect_ms=X join_ms=Y ops_max=A ops_node0=B
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ddprun/rendezvous.hpp"
#include "ddprun/store.hpp"
#include "support/memory_store.hpp"

namespace {

using namespace std::chrono_literals;
using ddprun::CountingStore;
using ddprun::Store;

// Generous: 1024 threads on 2 loaded cores must not time out.
constexpr auto k_timeout = 300s;

// A port nobody listens on now (another process may take it before the store
// does; then the run fails and says so, it never measures the wrong thing).
int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
}

// Agent i of an N-node job without --node_rank, as the agents of a real job
// describe themselves; agent 0 hosts the store and becomes node 0.
ddprun::NodeInfo agent_info(int agents, int i) {
    ddprun::NodeInfo info;
    info.node_rank = -1;
    info.host = fmt::format("host{}", i);
    info.addr = fmt::format("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255);
    info.nproc = 8;
    info.master_port = i == 0 ? 29500 : 0;
    info.pid = 1000 + i;
    info.fingerprint = ddprun::Fingerprint{agents, "./train --lr 0.1", 0, "bench", "0.1.0"};
    return info;
}

struct AgentResult {
    std::expected<ddprun::RoundMembership, ddprun::Error> joined =
        std::unexpected(ddprun::rendezvous_error("never ran"));
    int ops = 0;
};

double ms_between(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// One join of `agents` agents; returns false (having said why) if any failed.
bool run_once(int agents) {
    const int port = free_port();
    if (port < 0) {
        std::fprintf(stderr, "rendezvous_scale: no free port: %s\n", std::strerror(errno));
        return false;
    }
    const auto connect_start = std::chrono::steady_clock::now();
    auto host = ddprun::open_tcp_store({"127.0.0.1", port, true, k_timeout});
    std::vector<std::unique_ptr<Store>> connections;
    connections.push_back(host->clone());
    for (int i = 1; i < agents; ++i)
        connections.push_back(ddprun::open_tcp_store({"127.0.0.1", port, false, k_timeout}));
    const auto connect_end = std::chrono::steady_clock::now();

    // Every thread exists before the clock starts, and all are released at
    // once, as agents of a real job arrive together: the time is the
    // protocol's and the store's, not thread creation's.
    std::vector<AgentResult> results(static_cast<std::size_t>(agents));
    std::latch ready(agents + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(agents));
    for (int i = 0; i < agents; ++i) {
        threads.emplace_back([&, i] {
            auto index = static_cast<std::size_t>(i);
            CountingStore counting(std::move(connections[index]));
            ddprun::Rendezvous rendezvous(counting, "bench");
            ready.count_down();
            go.wait();
            try {
                results[index].joined =
                    rendezvous.join(0, agent_info(agents, i), i == 0, k_timeout);
            } catch (const std::exception& e) {  // a StoreError must not end the process
                results[index].joined = std::unexpected(ddprun::rendezvous_error(e.what()));
            }
            results[index].ops = counting.ops();
        });
    }
    ready.arrive_and_wait();
    const auto join_start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& thread : threads) thread.join();
    const auto join_end = std::chrono::steady_clock::now();

    int ops_max = 0;
    int ops_node0 = -1;
    for (int i = 0; i < agents; ++i) {
        const auto& result = results[static_cast<std::size_t>(i)];
        if (!result.joined) {
            std::fprintf(stderr, "rendezvous_scale: agent %d of %d did not join: %s\n", i, agents,
                         result.joined.error().message.c_str());
            return false;
        }
        if (result.joined->node_rank == 0)
            ops_node0 = result.ops;
        else
            ops_max = std::max(ops_max, result.ops);
    }
    std::printf("agents=%d connect_ms=%.1f join_ms=%.1f ops_max=%d ops_node0=%d\n", agents,
                ms_between(connect_start, connect_end), ms_between(join_start, join_end), ops_max,
                ops_node0);
    std::fflush(stdout);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const int agents = argc >= 2 ? std::atoi(argv[1]) : 0;
    const int runs = argc >= 3 ? std::atoi(argv[2]) : 1;
    if (argc < 2 || argc > 3 || agents < 2 || runs < 1) {
        std::fprintf(stderr, "usage: rendezvous_scale AGENTS [RUNS]  (AGENTS >= 2)\n");
        return 2;
    }
    // The plugin built with this program, unless the caller chose one, loaded
    // now so that the first run's connect time does not include loading
    // libtorch. If it cannot be loaded, the first open_tcp_store says why.
    ::setenv("DDPRUN_STORE_PLUGIN", STORE_PLUGIN, 0);
    (void)ddprun::tcp_store_available();
    // Both ends of every connection live in this process: 1024 agents need a
    // few thousand descriptors.
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    try {
        for (int run = 0; run < runs; ++run) {
            if (!run_once(agents)) return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rendezvous_scale: %s\n", e.what());
        return 1;
    }
    return 0;
}
