// Why it is apart from rendezvous_scale.cpp: the same group of threads runs
// in the program's own process or in each forked one (agent_processes.cpp).
#include "simulated_agents.hpp"

#include <sys/resource.h>

#include <exception>
#include <latch>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "support/memory_store.hpp"

namespace ddprun::bench {

NodeInfo agent_info(int agents, int i) {
    NodeInfo info;
    info.node_rank = -1;
    info.host = fmt::format("host{}", i);
    info.addr = fmt::format("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255);
    info.nproc = 8;
    info.master_port = i == 0 ? 29500 : 0;
    info.pid = 1000 + i;
    info.fingerprint = Fingerprint{agents, "./train --lr 0.1", 0, "bench", "0.1.0"};
    return info;
}

double own_cpu_ms() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto ms = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
    };
    return ms(usage.ru_utime) + ms(usage.ru_stime);
}

GroupOutcome run_agents(std::span<std::unique_ptr<Store>> stores, int first, int agents,
                        bool agent0_hosts, std::chrono::seconds timeout,
                        const std::function<void()>& release) {
    const double cpu_before = own_cpu_ms();
    const auto count = static_cast<int>(stores.size());
    GroupOutcome outcome;
    outcome.agents.resize(stores.size());

    // Every thread exists before the clock starts, and all are released at
    // once, as agents of a real job arrive together: the time is the
    // protocol's and the store's, not thread creation's.
    std::latch ready(count + 1);
    std::latch go(1);
    std::vector<std::thread> threads;
    threads.reserve(stores.size());
    for (int k = 0; k < count; ++k) {
        threads.emplace_back([&, k] {
            const auto index = static_cast<std::size_t>(k);
            const int i = first + k;
            CountingStore counting(std::move(stores[index]));
            Rendezvous rendezvous(counting, "bench");
            // No "waiting for ..." lines: an agent's, every 30 s, cost store reads
            // of their own (node 0 publishes who is missing, the others read it),
            // which would count as the join's in a run that takes longer.
            rendezvous.set_join_progress(timeout, [](const std::string&) {});
            ready.count_down();
            go.wait();
            auto& result = outcome.agents[index];
            try {
                const bool hosts = agent0_hosts && i == 0;
                auto joined =
                    rendezvous.join(0, agent_info(agents, i), hosts, timeout, agent0_hosts);
                result.joined = joined.has_value();
                if (joined)
                    result.node_rank = joined->node_rank;
                else
                    result.error = joined.error().message;
            } catch (const std::exception& e) {  // a StoreError must not end the process
                result.error = e.what();
            }
            result.ops = counting.ops();
            result.bytes = counting.bytes();
        });
    }
    ready.arrive_and_wait();
    release();
    go.count_down();
    for (auto& thread : threads) thread.join();
    outcome.join_end = std::chrono::steady_clock::now();
    outcome.cpu_ms = own_cpu_ms() - cpu_before;
    return outcome;
}

}  // namespace ddprun::bench
