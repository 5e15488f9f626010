// The Coordinator's status records (see coordinator.hpp, status_publisher.hpp): the
// heartbeat thread hands this agent's latest record to its StatusPublisher once per
// status period, or at once when the record's state changed, and passes node 0's
// namings of stragglers to the agent.
#include "ddprun/base/clock.hpp"
#include "ddprun/cluster/coordinator.hpp"

using namespace std::chrono_literals;

namespace ddprun {

std::chrono::milliseconds Coordinator::status_period(std::chrono::milliseconds heartbeat_timeout) {
    return std::clamp<std::chrono::milliseconds>(heartbeat_timeout / 3, 1s, 5s);
}

void Coordinator::set_status(NodeStatus status) {
    std::lock_guard lock(m_mutex);
    if (!m_status || m_status->state != status.state || m_status->exit_code != status.exit_code ||
        m_status->round != status.round) {
        m_status_urgent = true;
        m_wake.notify_all();
    }
    m_status = std::move(status);
}

void Coordinator::publish_status(Store& store, StatusPublication& publication) {
    const auto now = std::chrono::steady_clock::now();
    NodeStatus mine;
    {
        std::lock_guard lock(m_mutex);
        const bool urgent = m_status_urgent.exchange(false);
        if (!m_status || m_status->node_rank < 0) return;  // not in a round yet
        if (now < publication.next && !urgent) return;
        mine = *m_status;
    }
    publication.next = now + status_period(m_options.heartbeat_timeout);
    mine.time_ms = wall_ms();
    for (const Straggler& straggler : publication.publisher.tick(store, std::move(mine), now))
        if (m_on_straggler) reach_agent([this, straggler] { m_on_straggler(straggler); });
}

}  // namespace ddprun
