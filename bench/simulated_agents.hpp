// A group of simulated agents for bench/rendezvous_scale: threads of this
// process, each joining one round through its own store connection, all
// released at the same instant. The program runs one group in itself, or one
// in each of several forked processes (agent_processes.hpp) when one process
// may not hold every agent's descriptors.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun::bench {

// Agent i of an N-node job without --node_rank, as the agents of a real job
// describe themselves. Over the TCPStore agent 0 hosts the store and becomes
// node 0; over etcd the first agent to arrive does.
NodeInfo agent_info(int agents, int i);

// What one agent's join gave: the node rank it got, or why it failed, and
// the store operations it made (counted at the Store interface) with their
// keys' and values' bytes.
struct AgentOutcome {
    bool joined = false;
    int node_rank = -1;
    std::string error;
    int ops = 0;
    std::size_t bytes = 0;
};

struct GroupOutcome {
    std::vector<AgentOutcome> agents;  // the group's, in the order of its stores
    double cpu_ms = 0;  // this process's CPU from creating the threads to the last join's end
    std::chrono::steady_clock::time_point join_end;  // every thread joined
};

// Agents first .. first + stores.size() - 1 of an `agents`-agent job join
// round 0, each through its store (moved out of `stores`). Their threads are
// created, each builds its Rendezvous, then `release` runs (every thread
// waits) and when it returns all of them go at once. `agent0_hosts`: agent 0
// hosts the TCPStore and is node 0.
GroupOutcome run_agents(std::span<std::unique_ptr<Store>> stores, int first, int agents,
                        bool agent0_hosts, std::chrono::seconds timeout,
                        const std::function<void()>& release);

// CPU time (user + system) this process used so far, in ms.
double own_cpu_ms();

}  // namespace ddprun::bench
