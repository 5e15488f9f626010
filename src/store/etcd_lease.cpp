// An agent's key lease (see etcd_lease.hpp).
#include "ddprun/store/etcd_lease.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace ddprun {

EtcdKeyLease::EtcdKeyLease(EtcdOptions client, std::chrono::seconds ttl)
    : m_options(std::move(client)), m_ttl(std::max(ttl, std::chrono::seconds(2))) {}

EtcdKeyLease::~EtcdKeyLease() {
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_wake.notify_all();
    // A renewal under way (etcd unreachable, say) must not hold the agent's exit.
    if (m_renew_client) m_renew_client->cancel();
    if (m_renewer.joinable()) m_renewer.join();
}

std::int64_t EtcdKeyLease::id() {
    std::lock_guard lock(m_mutex);
    if (m_id != 0) return m_id;
    EtcdClient client(m_options);
    auto grant = client.call("/v3/lease/grant", {{"TTL", std::to_string(m_ttl.count())}});
    m_id = etcd_int64(grant, "ID");
    if (m_id == 0)
        throw StoreError(StoreError::Kind::Other, "etcd granted no lease: " + grant.dump());
    // Each renewal is bounded by the client's timeout; one that fails is retried at the
    // next third of the TTL, so two may fail before the keys are at risk.
    EtcdOptions renewing = m_options;
    renewing.timeout = std::min<std::chrono::milliseconds>(renewing.timeout, m_ttl / 3);
    m_renew_client = std::make_unique<EtcdClient>(renewing);
    m_renewer = std::thread([this] { renew_until_stopped(); });
    return m_id;
}

void EtcdKeyLease::renew_until_stopped() {
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, m_ttl / 3, [this] { return m_stopping; })) {
        const std::int64_t id = m_id;
        lock.unlock();
        try {
            m_renew_client->call("/v3/lease/keepalive", {{"ID", std::to_string(id)}});
        } catch (const StoreError& e) {
            spdlog::debug("renewing the lease of this agent's etcd keys: {}", e.what());
        }
        lock.lock();
    }
}

}  // namespace ddprun
