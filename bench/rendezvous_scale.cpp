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
//     rendezvous_scale AGENTS [RUNS] [--backend=tcp|etcd] [--limit=SECONDS] [--processes=K]
//                      [--signed]
//
// --signed: every agent's connection is behind the job secret's guard
// (signed_store.hpp), as an agent's with a secret is: what signing costs. Its
// ops and bytes are the records' before signing (each signed record is 77
// bytes longer on the wire).
// Over etcd, agents that one process cannot hold (about 8 descriptors each)
// run in K forked processes, as few as the hard RLIMIT_NOFILE allows unless
// --processes says (agent_processes.hpp); then cpu_ms is the children's.
// One line per run on stdout:
//     agents=N connect_ms=X join_ms=Y ops_max=A ops_node0=B bytes_max=C bytes_node0=D cpu_ms=U
//     processes=K
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
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "agent_processes.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/etcd_store.hpp"
#include "ddprun/store/signed_store.hpp"
#include "ddprun/store/store.hpp"
#include "simulated_agents.hpp"
#include "support/etcd_server.hpp"

namespace {

using namespace std::chrono_literals;
using ddprun::Store;
using ddprun::bench::AgentOutcome;
using ddprun::bench::AgentProcesses;
using ddprun::bench::ChildPids;
using ddprun::bench::GroupOutcome;
using ddprun::bench::ProcessesOutcome;
using ddprun::bench::run_agents;
using Clock = std::chrono::steady_clock;

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

std::vector<std::unique_ptr<Store>> open_etcd(int count, int port, int run) {
    ddprun::EtcdStoreOptions options;
    options.client.endpoints = {{"127.0.0.1", port}};
    options.client.timeout = k_timeout;
    // Each run's keys apart from the others', as each job's are.
    options.prefix = fmt::format("/bench/run{}/", run);
    std::vector<std::unique_ptr<Store>> stores;
    for (int i = 0; i < count; ++i) stores.push_back(ddprun::open_etcd_store(options));
    return stores;
}

// --signed: the first `count` connections behind the guard, under one secret.
void sign_all(std::vector<std::unique_ptr<Store>>& stores, std::size_t count) {
    const std::string secret(ddprun::k_min_secret_bytes, 's');
    for (std::size_t i = 0; i < count && i < stores.size(); ++i)
        stores[i] = ddprun::sign_store(std::move(stores[i]), secret);
}

// What one run measured, whether its agents ran in this process or in several.
struct RunFigures {
    Clock::time_point connect_start, connect_end, join_start, join_end;
    std::vector<AgentOutcome> agents;  // agent i's at index i
    double cpu_ms = 0;                 // the agents' process(es)
};

// One join of `agents` agents, as threads of this process (`processes` 1) or
// spread over that many children; returns false (having said why) if any failed.
bool run_once(int agents, int processes, Backend backend, bool sign,
              const ddprun::EtcdCluster* etcd, int run, ChildPids& pids) {
    EtcdCounters before;
    double etcd_cpu_before = 0;
    auto read_before = [&] {
        if (backend != Backend::Etcd) return;
        before = read_etcd_counters(etcd->client_ports().at(0));
        etcd_cpu_before = process_cpu_ms(etcd->pid(0));
    };
    RunFigures figures;
    if (processes == 1) {
        figures.connect_start = Clock::now();
        Connections connections;
        if (backend == Backend::Tcp)
            connections = open_tcp(agents);
        else
            connections.stores = open_etcd(agents, etcd->client_ports().at(0), run);
        if (sign) sign_all(connections.stores, static_cast<std::size_t>(agents));
        figures.connect_end = Clock::now();
        read_before();
        GroupOutcome group = run_agents(
            std::span(connections.stores).first(static_cast<std::size_t>(agents)), 0, agents,
            connections.agent0_hosts, k_timeout, [&] { figures.join_start = Clock::now(); });
        figures.join_end = group.join_end;
        figures.agents = std::move(group.agents);
        figures.cpu_ms = group.cpu_ms;
    } else {
        const int port = etcd->client_ports().at(0);
        AgentProcesses children(
            agents, processes,
            [port, run, sign](int, int count) {
                auto stores = open_etcd(count, port, run);
                if (sign) sign_all(stores, stores.size());
                return stores;
            },
            k_timeout, pids);
        figures.connect_start = children.connect_start();
        figures.connect_end = children.connect_end();
        read_before();
        ProcessesOutcome outcome = children.release();
        figures.join_start = outcome.join_start;
        figures.join_end = outcome.join_end;
        figures.agents = std::move(outcome.agents);
        figures.cpu_ms = outcome.cpu_ms;
    }

    int ops_max = 0;
    int ops_node0 = -1;
    std::size_t bytes_max = 0;
    std::size_t bytes_node0 = 0;
    for (int i = 0; i < agents; ++i) {
        const auto& result = figures.agents[static_cast<std::size_t>(i)];
        if (!result.joined) {
            std::fprintf(stderr, "rendezvous_scale: agent %d of %d did not join: %s\n", i, agents,
                         result.error.c_str());
            return false;
        }
        if (result.node_rank == 0) {
            ops_node0 = result.ops;
            bytes_node0 = result.bytes;
        } else {
            ops_max = std::max(ops_max, result.ops);
            bytes_max = std::max(bytes_max, result.bytes);
        }
    }
    std::string line = fmt::format(
        "agents={} connect_ms={:.1f} join_ms={:.1f} ops_max={} ops_node0={} "
        "bytes_max={} bytes_node0={} cpu_ms={:.0f} processes={}",
        agents, ms_between(figures.connect_start, figures.connect_end),
        ms_between(figures.join_start, figures.join_end), ops_max, ops_node0, bytes_max,
        bytes_node0, figures.cpu_ms, processes);
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

// --limit: after `seconds` (none if 0), runs `give_up`, which must end the
// process, unless the program is done by then. The main thread, done or
// failing (killed children make a run fail), waits here for a give-up in
// progress instead of destroying what it is using.
class GiveUp {
  public:
    GiveUp(int seconds, std::function<void()> give_up) {
        if (seconds <= 0) return;
        m_thread = std::thread([this, seconds, give_up = std::move(give_up)] {
            std::unique_lock lock(m_mutex);
            if (m_cv.wait_for(lock, std::chrono::seconds(seconds), [this] { return m_done; }))
                return;
            m_giving_up = true;
            lock.unlock();
            give_up();
        });
    }
    ~GiveUp() {
        {
            std::unique_lock lock(m_mutex);
            while (m_giving_up) m_cv.wait(lock);  // until give_up ends the process
            m_done = true;
        }
        m_cv.notify_all();
        if (m_thread.joinable()) m_thread.join();
    }
    GiveUp(const GiveUp&) = delete;
    GiveUp& operator=(const GiveUp&) = delete;

  private:
    std::mutex m_mutex;
    std::condition_variable m_cv;
    bool m_done = false;
    bool m_giving_up = false;
    std::thread m_thread;
};

int usage() {
    std::fprintf(stderr,
                 "usage: rendezvous_scale AGENTS [RUNS] [--backend=tcp|etcd] [--limit=SECONDS] "
                 "[--processes=K] [--signed]  (AGENTS >= 2; K: etcd only, at most AGENTS)\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> numbers;
    Backend backend = Backend::Tcp;
    int limit_s = 0;
    int processes = 0;  // 0: as few as the descriptor limit allows
    bool sign = false;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "--backend=tcp" || arg == "--backend=c10d") {
            backend = Backend::Tcp;
        } else if (arg == "--backend=etcd") {
            backend = Backend::Etcd;
        } else if (arg.starts_with("--limit=")) {
            limit_s = std::atoi(argv[i] + std::strlen("--limit="));
            if (limit_s <= 0) return usage();
        } else if (arg == "--signed") {
            sign = true;
        } else if (arg.starts_with("--processes=")) {
            processes = std::atoi(argv[i] + std::strlen("--processes="));
            if (processes <= 0) return usage();
        } else if (arg.starts_with("-")) {
            return usage();
        } else {
            numbers.emplace_back(arg);
        }
    }
    if (numbers.empty() || numbers.size() > 2) return usage();
    const int agents = std::atoi(numbers[0].c_str());
    const int runs = numbers.size() == 2 ? std::atoi(numbers[1].c_str()) : 1;
    if (agents < 2 || runs < 1 || processes > agents) return usage();
    // The TCPStore is hosted in agent 0's process, and its plugin is libtorch,
    // whose threads make fork unsafe: its agents stay in one process.
    if (backend == Backend::Tcp && processes > 1) return usage();

    // Both ends of every connection live in this process (or its children), or
    // in it and the etcd it starts (which inherits the limit): N agents need a
    // few descriptors each, and a waiting etcd agent one more for its watch.
    rlimit limit{RLIM_INFINITY, RLIM_INFINITY};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
    // Over etcd an agent holds about 8 (measured): each connection has its own
    // io_context (a socket, an epoll, an eventfd and a timerfd), and a waiting
    // agent has two, the second for its watch. Agents that one process cannot
    // hold are spread over forked processes, as few as the limit allows (4096
    // here need 2 under a hard limit of 20,000); past the limit a join would
    // fail midway with "Too many open files": better to say so now.
    constexpr rlim_t k_etcd_fds_per_agent = 8;
    constexpr rlim_t k_spare_fds = 64;
    if (backend == Backend::Etcd && processes == 0 && limit.rlim_cur != RLIM_INFINITY) {
        const rlim_t per_process = limit.rlim_cur > k_spare_fds
                                       ? (limit.rlim_cur - k_spare_fds) / k_etcd_fds_per_agent
                                       : 1;
        const rlim_t needed = (static_cast<rlim_t>(agents) + per_process - 1) / per_process;
        processes = static_cast<int>(std::min<rlim_t>(needed, static_cast<rlim_t>(agents)));
    }
    if (processes == 0) processes = 1;
    const int largest = (agents + processes - 1) / processes;
    const rlim_t etcd_fds = static_cast<rlim_t>(largest) * k_etcd_fds_per_agent + k_spare_fds;
    if (backend == Backend::Etcd && etcd_fds > limit.rlim_cur) {
        std::fprintf(stderr,
                     "rendezvous_scale: %d agents in one process over etcd need about %llu "
                     "descriptors (%llu each), more than a process may open (%llu, the hard "
                     "limit); use more --processes\n",
                     largest, static_cast<unsigned long long>(etcd_fds),
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
    ChildPids children;  // of a run whose agents are spread over processes
    // No agent uses the cluster object, and the main thread only before and after
    // a join, which is where a run past its limit is not: it can go (its etcd
    // stopped by pid, its data dir removed), after the children (their
    // PR_SET_PDEATHSIG would also end them when this process ends).
    GiveUp give_up(limit_s, [limit_s, &etcd, &children] {
        std::fprintf(stderr, "rendezvous_scale: gave up after %d s (--limit)\n", limit_s);
        children.kill_all();
        etcd.reset();
        std::_Exit(1);
    });
    try {
        for (int run = 0; run < runs; ++run) {
            if (!run_once(agents, processes, backend, sign, etcd.get(), run, children)) return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rendezvous_scale: %s\n", e.what());
        return 1;
    }
    return 0;
}
