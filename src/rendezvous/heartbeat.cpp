// HeartbeatMonitor (see heartbeat.hpp): a node is alive while its reading
// changes; the sequence numbers are compared, never their size, so an agent
// that restarts its count still counts as beating.
#include "ddprun/rendezvous/heartbeat.hpp"

namespace ddprun {

HeartbeatMonitor::HeartbeatMonitor(const std::vector<int>& nodes, std::chrono::milliseconds timeout,
                                   Clock::time_point start)
    : m_timeout(timeout) {
    for (int node : nodes) m_nodes[node] = Seen{std::nullopt, start};
}

void HeartbeatMonitor::observe(int node, std::optional<std::int64_t> seq, Clock::time_point now) {
    auto [it, inserted] = m_nodes.try_emplace(node, Seen{seq, now});
    if (inserted) return;
    if (seq && seq != it->second.seq) it->second = Seen{seq, now};
}

std::vector<int> HeartbeatMonitor::stale(Clock::time_point now) const {
    std::vector<int> nodes;
    for (const auto& [node, seen] : m_nodes)
        if (now - seen.changed >= m_timeout) nodes.push_back(node);
    return nodes;
}

}  // namespace ddprun
