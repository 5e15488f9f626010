// The status records at scale (docs/status.md, what it costs): N agents'
// status publication over a real TCPStore, as each agent's heartbeat thread runs
// it once per status period (rendezvous/status_publisher.hpp), with node 0 watching
// stragglers (it reads every other node's record) and one `ddprun status` reader
// (status/status.hpp's read_job, which reads every node's). The agents are
// simulated: their publications run one after another on one connection, node 0's
// and the reader's each on their own, against the store the plugin hosts in this
// process; a store serves requests one at a time whoever sends them, so what it
// serves, and costs, per period is the same.
//
//     status_scale AGENTS [PERIODS]
//
// One line on stdout, per period on average:
//     agents=N ranks=R ops_agents=A ops_node0=Z ops_reader=D bytes_node0=B
//     agent_cpu_us=C node0_ms=W node0_cpu_ms=U reader_ms=X reader_cpu_ms=Y
//     store_cpu_ms=S store_reader_cpu_ms=T
// ops_agents: every other agent's store operations together; agent_cpu_us: one of
// them, on average; store_cpu_ms: what the store's server thread spent on the
// period's publications (this process's CPU less the publishing thread's),
// store_reader_cpu_ms on the reader's look. Exit status: 0, 1 on a failure (on
// stderr), 2 for a usage error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "ddprun/base/clock.hpp"
#include "ddprun/rendezvous/status_publisher.hpp"
#include "ddprun/status/status.hpp"
#include "ddprun/store/store_counts.hpp"
#include "simulated_agents.hpp"
#include "support/free_port.hpp"

namespace {

using namespace ddprun;
using namespace std::chrono_literals;

constexpr int k_ranks_per_node = 8;

double thread_cpu_ms() {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double wall_ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

// Node `node` of an `agents`-node job: 8 ranks beating about 10 steps a second, and
// one slow rank on node 1, as a job with a straggler has.
NodeStatus record(int agents, int node) {
    NodeStatus s;
    s.node_rank = node;
    s.state = "running";
    s.host = "gpu" + std::to_string(node);
    s.pid = 100000 + node;
    s.first_rank = node * k_ranks_per_node;
    s.nproc = k_ranks_per_node;
    s.workers_alive = k_ranks_per_node;
    s.time_ms = wall_ms();
    for (int local = 0; local < k_ranks_per_node; ++local)
        s.ranks.push_back(
            {s.first_rank + local, 12345, 80, node == 1 && local == 0 ? 1.0 : 10.0 + 0.01 * local});
    if (node == 0) {
        s.nnodes = agents;
        s.world_size = agents * k_ranks_per_node;
        s.max_restarts = 3;
    }
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: status_scale AGENTS [PERIODS]\n");
        return 2;
    }
    const int agents = std::atoi(argv[1]);
    const int periods = argc > 2 ? std::atoi(argv[2]) : 3;
    if (agents < 2 || agents > 100000 || periods < 1) {
        std::fprintf(stderr, "status_scale: AGENTS must be 2 or more, PERIODS 1 or more\n");
        return 2;
    }
#ifdef STORE_PLUGIN
    ::setenv("DDPRUN_STORE_PLUGIN", STORE_PLUGIN, 0);
#endif
    try {
        const int port = free_test_port();
        auto server = open_tcp_store({"127.0.0.1", port, true, 30s});
        auto connect = [&](std::shared_ptr<StoreCounts> counts) {
            return count_store(open_tcp_store({"127.0.0.1", port, false, 30s}), std::move(counts));
        };
        auto agent_counts = std::make_shared<StoreCounts>();
        auto zero_counts = std::make_shared<StoreCounts>();
        auto reader_counts = std::make_shared<StoreCounts>();
        auto agent_store = connect(agent_counts);
        auto zero_store = connect(zero_counts);
        auto reader_store = connect(reader_counts);
        const std::string run_id = "status-scale";
        std::vector<StatusPublisher> publishers;
        for (int node = 0; node < agents; ++node)
            publishers.emplace_back(run_id, StragglerLimits{0.5, 60s});

        double agent_cpu = 0, zero_wall = 0, zero_cpu = 0, reader_wall = 0, reader_cpu = 0;
        double store_cpu = 0, store_reader_cpu = 0;
        std::int64_t agent_ops = 0, zero_ops = 0, reader_ops = 0;
        std::size_t zero_bytes = 0;
        for (int period = -1; period < periods; ++period) {  // -1: every record there first
            const auto now = std::chrono::steady_clock::now();
            const double process_start = bench::own_cpu_ms();
            const double thread_start = thread_cpu_ms();
            double process_published = 0;
            const std::int64_t ops[] = {agent_counts->requests, zero_counts->requests,
                                        reader_counts->requests};
            for (int node = 1; node < agents; ++node)
                publishers[static_cast<std::size_t>(node)].tick(*agent_store, record(agents, node),
                                                                now);
            const double agents_done = thread_cpu_ms();
            auto started = std::chrono::steady_clock::now();
            publishers[0].tick(*zero_store, record(agents, 0), now);
            const double zero_done = thread_cpu_ms();
            const double zero_ms = wall_ms_since(started);
            process_published = bench::own_cpu_ms();
            started = std::chrono::steady_clock::now();
            auto view = read_job(*reader_store, run_id, "bench", false);
            if (!view) throw std::runtime_error(view.error().message);
            const double reader_ms = wall_ms_since(started);
            const double reader_done = thread_cpu_ms();
            if (period < 0) continue;
            agent_cpu += (agents_done - thread_start) / (agents - 1);
            zero_cpu += zero_done - agents_done;
            zero_wall += zero_ms;
            reader_cpu += reader_done - zero_done;
            reader_wall += reader_ms;
            store_cpu += (process_published - process_start) - (zero_done - thread_start);
            store_reader_cpu +=
                (bench::own_cpu_ms() - process_published) - (reader_done - zero_done);
            agent_ops += agent_counts->requests - ops[0];
            zero_ops += zero_counts->requests - ops[1];
            reader_ops += reader_counts->requests - ops[2];
            zero_bytes += to_json(record(agents, 0), run_id).size();
        }
        const double n = periods;
        std::printf(
            "agents=%d ranks=%d ops_agents=%.0f ops_node0=%.0f ops_reader=%.0f bytes_node0=%zu "
            "agent_cpu_us=%.1f node0_ms=%.2f node0_cpu_ms=%.2f reader_ms=%.2f reader_cpu_ms=%.2f "
            "store_cpu_ms=%.2f store_reader_cpu_ms=%.2f\n",
            agents, agents * k_ranks_per_node, static_cast<double>(agent_ops) / n,
            static_cast<double>(zero_ops) / n, static_cast<double>(reader_ops) / n,
            zero_bytes / static_cast<std::size_t>(periods), agent_cpu / n * 1000, zero_wall / n,
            zero_cpu / n, reader_wall / n, reader_cpu / n, store_cpu / n, store_reader_cpu / n);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "status_scale: %s\n", e.what());
        return 1;
    }
}
