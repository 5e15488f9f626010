// HeartbeatMonitor: the judgement of which nodes are gone or frozen, from the
// heartbeat readings Rendezvous::read_heartbeats() returns. Kept apart from the
// protocol because it does no I/O: it is fed readings and the time, so it is
// tested without a store and without sleeping.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace ddprun {

// Decides which nodes' heartbeats have stopped.
class HeartbeatMonitor {
  public:
    using Clock = std::chrono::steady_clock;

    // Watches `nodes`; each has until `start + timeout` to be seen beating.
    HeartbeatMonitor(const std::vector<int>& nodes, std::chrono::milliseconds timeout,
                     Clock::time_point start);

    // One reading of `node`'s heartbeat (nullopt: none yet). A node is alive
    // at `now` when its reading differs from the previous one.
    void observe(int node, std::optional<std::int64_t> seq, Clock::time_point now);

    // Stops watching `node` (it left).
    void forget(int node) { m_nodes.erase(node); }

    // The nodes whose heartbeat has not changed for `timeout`, ascending.
    std::vector<int> stale(Clock::time_point now) const;

  private:
    struct Seen {
        std::optional<std::int64_t> seq;
        Clock::time_point changed;
    };
    std::chrono::milliseconds m_timeout;
    std::map<int, Seen> m_nodes;
};

}  // namespace ddprun
