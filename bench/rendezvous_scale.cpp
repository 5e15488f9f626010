// The rendezvous code alone at scale: N agents, simulated as threads of one
// process, each with its own connection to a real store, join one round. The
// store is a TCPStore (the plugin's, hosted by agent 0, as with
// --rdzv_backend=c10d) or an etcd that this program starts on loopback
// (--rdzv_backend=etcd: no agent hosts anything, each one talks to etcd's
// JSON gateway). Prints, per run, the time to open the N connections, the
// time until every agent has joined, and what the join cost each agent: store
// operations and their payload bytes (the largest among the agents that are
// not node 0, and node 0's), and, over etcd, the requests etcd served and the
// bytes it counted, per agent.
//
// Why it exists: the join must cost every agent a constant number of store
// operations whatever N is, and 1024 agents should join within seconds. Real
// agents (bench.py's section (h), rdzv-agents) cannot go past a few dozen on
// one machine, because each one loads libtorch; threads can. bench.py runs
// this program and prints the table (bench/README.md).
//
//     rendezvous_scale AGENTS [RUNS] [--backend=tcp|etcd] [--limit=SECONDS]
//
// One line per run on stdout:
//     agents=N connect_ms=X join_ms=Y ops_max=A ops_node0=B bytes_max=C bytes_node0=D cpu_ms=U
// and over etcd, per agent (all agents' total over N, node 0 included), then
// the CPU time the etcd process used during the join:
//     ... requests=R range=G txn=T put=P watch=W grpc_bytes=Z etcd_cpu_ms=E
// Exit status: 0, 1 when a run failed or --limit passed (the reason on
// stderr), 2 for a usage error, 3 when etcd is not installed. --limit bounds
// the whole program and stops its etcd first: a caller's SIGKILL would leave
// the etcd's data dir behind.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ddprun/etcd_store.hpp"
#include "ddprun/rendezvous.hpp"
#include "ddprun/store.hpp"
#include "support/etcd_server.hpp"
#include "support/memory_store.hpp"

namespace {

using namespace std::chrono_literals;
using ddprun::CountingStore;
using ddprun::Store;

// Generous: thousands of threads on 2 loaded cores must not time out.
constexpr auto k_timeout = 300s;

enum class Backend { Tcp, Etcd };

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
// describe themselves. Over the TCPStore agent 0 hosts the store and becomes
// node 0; over etcd the first agent to arrive does.
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
    std::size_t bytes = 0;
};

// CPU time (user + system) used by this process, and by the etcd process, in
// ms: where a join's time goes on a machine whose cores both of them share.
double own_cpu_ms() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto ms = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
    };
    return ms(usage.ru_utime) + ms(usage.ru_stime);
}

double process_cpu_ms(pid_t pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto close = text.rfind(')');
    if (close == std::string::npos) return 0;
    // After the name: field 3 (state) on; utime and stime are fields 14 and 15.
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int index = 3; index <= 15 && fields >> field; ++index)
        if (index >= 14) ticks += std::strtod(field.c_str(), nullptr);
    return ticks * 1e3 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double ms_between(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// What etcd served since it started, from its Prometheus page (/metrics):
// requests by gRPC method (the JSON gateway turns each HTTP request into one;
// a watch is one stream) and the bytes of those requests and answers as etcd
// counts them (protobuf, not the gateway's JSON).
struct EtcdCounters {
    std::map<std::string, double> requests;  // "Range", "Txn", "Put", "Watch", ...
    double bytes = 0;
};

EtcdCounters read_etcd_counters(int port) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
    http::request<http::empty_body> request{http::verb::get, "/metrics", 11};
    request.set(http::field::host, fmt::format("127.0.0.1:{}", port));
    http::write(stream, request);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    http::read(stream, buffer, parser);
    beast::error_code ignored;
    stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);

    EtcdCounters counters;
    std::istringstream lines(parser.get().body());
    std::string line;
    constexpr std::string_view started = "grpc_server_started_total{";
    constexpr std::string_view method = "grpc_method=\"";
    while (std::getline(lines, line)) {
        auto space = line.rfind(' ');
        if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
        const double value = std::strtod(line.c_str() + space + 1, nullptr);
        if (line.starts_with("etcd_network_client_grpc_received_bytes_total ") ||
            line.starts_with("etcd_network_client_grpc_sent_bytes_total ")) {
            counters.bytes += value;
        } else if (line.starts_with(started) && line.find("etcdserverpb.") != std::string::npos) {
            auto at = line.find(method);
            if (at == std::string::npos) continue;
            at += method.size();
            counters.requests[line.substr(at, line.find('"', at) - at)] += value;
        }
    }
    return counters;
}

// The store's connections of one run, agent i's at index i.
struct Connections {
    std::vector<std::unique_ptr<Store>> stores;
    bool agent0_hosts = false;  // TCPStore: agent 0 listens, and is node 0
};

Connections open_tcp(int agents) {
    const int port = free_port();
    if (port < 0) throw std::runtime_error(fmt::format("no free port: {}", std::strerror(errno)));
    Connections connections;
    connections.agent0_hosts = true;
    auto host = ddprun::open_tcp_store({"127.0.0.1", port, true, k_timeout});
    connections.stores.push_back(host->clone());
    // The host's own object serves the listening socket; it must outlive the run, and
    // its clone is the agent's connection like any other. Kept as the last element.
    for (int i = 1; i < agents; ++i)
        connections.stores.push_back(ddprun::open_tcp_store({"127.0.0.1", port, false, k_timeout}));
    connections.stores.push_back(std::move(host));
    return connections;
}

Connections open_etcd(int agents, const std::string& endpoint_host, int port, int run) {
    ddprun::EtcdStoreOptions options;
    options.client.endpoints = {{endpoint_host, port}};
    options.client.timeout = k_timeout;
    // Each run's keys apart from the others', as each job's are.
    options.prefix = fmt::format("/bench/run{}/", run);
    Connections connections;
    for (int i = 0; i < agents; ++i) connections.stores.push_back(ddprun::open_etcd_store(options));
    return connections;
}

// One join of `agents` agents; returns false (having said why) if any failed.
bool run_once(int agents, Backend backend, const ddprun::EtcdCluster* etcd, int run) {
    const auto connect_start = std::chrono::steady_clock::now();
    Connections connections = backend == Backend::Tcp
                                  ? open_tcp(agents)
                                  : open_etcd(agents, "127.0.0.1", etcd->client_ports().at(0), run);
    const auto connect_end = std::chrono::steady_clock::now();
    EtcdCounters before;
    double etcd_cpu_before = 0;
    if (backend == Backend::Etcd) {
        before = read_etcd_counters(etcd->client_ports().at(0));
        etcd_cpu_before = process_cpu_ms(etcd->pid(0));
    }
    const double cpu_before = own_cpu_ms();

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
            CountingStore counting(std::move(connections.stores[index]));
            ddprun::Rendezvous rendezvous(counting, "bench");
            // No "waiting for ..." lines: an agent's, every 30 s, cost store reads
            // of their own (node 0 publishes who is missing, the others read it),
            // which would count as the join's in a run that takes longer.
            rendezvous.set_join_progress(k_timeout, [](const std::string&) {});
            ready.count_down();
            go.wait();
            try {
                const bool hosts = connections.agent0_hosts && i == 0;
                results[index].joined = rendezvous.join(0, agent_info(agents, i), hosts, k_timeout,
                                                        connections.agent0_hosts);
            } catch (const std::exception& e) {  // a StoreError must not end the process
                results[index].joined = std::unexpected(ddprun::rendezvous_error(e.what()));
            }
            results[index].ops = counting.ops();
            results[index].bytes = counting.bytes();
        });
    }
    ready.arrive_and_wait();
    const auto join_start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& thread : threads) thread.join();
    const auto join_end = std::chrono::steady_clock::now();
    const double cpu_ms = own_cpu_ms() - cpu_before;

    int ops_max = 0;
    int ops_node0 = -1;
    std::size_t bytes_max = 0;
    std::size_t bytes_node0 = 0;
    for (int i = 0; i < agents; ++i) {
        const auto& result = results[static_cast<std::size_t>(i)];
        if (!result.joined) {
            std::fprintf(stderr, "rendezvous_scale: agent %d of %d did not join: %s\n", i, agents,
                         result.joined.error().message.c_str());
            return false;
        }
        if (result.joined->node_rank == 0) {
            ops_node0 = result.ops;
            bytes_node0 = result.bytes;
        } else {
            ops_max = std::max(ops_max, result.ops);
            bytes_max = std::max(bytes_max, result.bytes);
        }
    }
    std::string line = fmt::format(
        "agents={} connect_ms={:.1f} join_ms={:.1f} ops_max={} ops_node0={} "
        "bytes_max={} bytes_node0={} cpu_ms={:.0f}",
        agents, ms_between(connect_start, connect_end), ms_between(join_start, join_end), ops_max,
        ops_node0, bytes_max, bytes_node0, cpu_ms);
    if (backend == Backend::Etcd) {
        const double etcd_cpu_ms = process_cpu_ms(etcd->pid(0)) - etcd_cpu_before;
        EtcdCounters after = read_etcd_counters(etcd->client_ports().at(0));
        auto per_agent = [&](const std::string& method) {
            return (after.requests[method] - before.requests[method]) / agents;
        };
        double requests = 0;
        for (const auto& [method, count] : after.requests) requests += per_agent(method);
        // The metrics page itself is HTTP, not gRPC: it is not in these counts.
        line += fmt::format(
            " requests={:.2f} range={:.2f} txn={:.2f} put={:.2f} watch={:.2f} "
            "grpc_bytes={:.0f} etcd_cpu_ms={:.0f}",
            requests, per_agent("Range"), per_agent("Txn"), per_agent("Put"), per_agent("Watch"),
            (after.bytes - before.bytes) / agents, etcd_cpu_ms);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    return true;
}

int usage() {
    std::fprintf(stderr,
                 "usage: rendezvous_scale AGENTS [RUNS] [--backend=tcp|etcd] [--limit=SECONDS]"
                 "  (AGENTS >= 2)\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> numbers;
    Backend backend = Backend::Tcp;
    int limit_s = 0;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "--backend=tcp" || arg == "--backend=c10d") {
            backend = Backend::Tcp;
        } else if (arg == "--backend=etcd") {
            backend = Backend::Etcd;
        } else if (arg.starts_with("--limit=")) {
            limit_s = std::atoi(argv[i] + std::strlen("--limit="));
            if (limit_s <= 0) return usage();
        } else if (arg.starts_with("-")) {
            return usage();
        } else {
            numbers.emplace_back(arg);
        }
    }
    if (numbers.empty() || numbers.size() > 2) return usage();
    const int agents = std::atoi(numbers[0].c_str());
    const int runs = numbers.size() == 2 ? std::atoi(numbers[1].c_str()) : 1;
    if (agents < 2 || runs < 1) return usage();

    // Both ends of every connection live in this process, or in it and the
    // etcd it starts (which inherits the limit): N agents need a few
    // descriptors each, and a waiting etcd agent one more for its watch.
    rlimit limit{RLIM_INFINITY, RLIM_INFINITY};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    // Over etcd an agent holds about 8 (measured): each connection has its own
    // io_context (a socket, an epoll, an eventfd and a timerfd), and a waiting
    // agent has two, the second for its watch. Past the limit a join would fail
    // midway with "Too many open files"; better to say so now.
    constexpr rlim_t k_etcd_fds_per_agent = 8;
    const rlim_t etcd_fds = static_cast<rlim_t>(agents) * k_etcd_fds_per_agent + 64;
    if (backend == Backend::Etcd && etcd_fds > limit.rlim_cur) {
        std::fprintf(stderr,
                     "rendezvous_scale: %d agents over etcd need about %llu descriptors (%llu "
                     "each), more than this process may open (%llu, the hard limit)\n",
                     agents, static_cast<unsigned long long>(etcd_fds),
                     static_cast<unsigned long long>(k_etcd_fds_per_agent),
                     static_cast<unsigned long long>(limit.rlim_cur));
        return 1;
    }
    std::unique_ptr<ddprun::EtcdCluster> etcd;
    if (backend == Backend::Tcp) {
#ifdef STORE_PLUGIN
        // The plugin built with this program, unless the caller chose one,
        // loaded now so that the first run's connect time does not include
        // loading libtorch. If it cannot be loaded, the first open_tcp_store
        // says why.
        ::setenv("DDPRUN_STORE_PLUGIN", STORE_PLUGIN, 0);
#endif
        (void)ddprun::tcp_store_available();
    } else {
        etcd = std::make_unique<ddprun::EtcdCluster>(1);
        if (!etcd->ready()) {
            std::fprintf(stderr, "rendezvous_scale: %s\n", etcd->error().c_str());
            return ::access("/usr/bin/etcd", X_OK) == 0 ? 1 : 3;
        }
    }
    if (limit_s > 0) {
        // A timer, not a wait for something: the joins may never end.
        std::thread([limit_s, &etcd] {
            std::this_thread::sleep_for(std::chrono::seconds(limit_s));
            std::fprintf(stderr, "rendezvous_scale: gave up after %d s (--limit)\n", limit_s);
            // No agent uses the cluster object, and the main thread only before and
            // after a join, which is where a run past its limit is not: it can go (its
            // etcd stopped by pid, its data dir removed).
            etcd.reset();
            std::_Exit(1);
        }).detach();
    }
    try {
        for (int run = 0; run < runs; ++run) {
            if (!run_once(agents, backend, etcd.get(), run)) return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rendezvous_scale: %s\n", e.what());
        return 1;
    }
    return 0;
}
