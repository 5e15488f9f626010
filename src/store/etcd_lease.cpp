// An agent's key lease (see etcd_lease.hpp).
#include "ddprun/store/etcd_lease.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "ddprun/base/text.hpp"

namespace ddprun {

using json = nlohmann::json;

EtcdKeyLease::EtcdKeyLease(EtcdOptions client, std::chrono::seconds ttl, std::string shared_key)
    : m_options(std::move(client)),
      m_ttl(std::max(ttl, std::chrono::seconds(2))),
      m_shared_key(std::move(shared_key)) {}

EtcdKeyLease::~EtcdKeyLease() {
    stop_renewing();
}

void EtcdKeyLease::stop_renewing() {
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_wake.notify_all();
    // A renewal under way (etcd unreachable, say) must not hold the agent's exit.
    if (m_renew_client) m_renew_client->cancel();
    if (m_renewer.joinable()) m_renewer.join();
}

void EtcdKeyLease::revoke() {
    stop_renewing();
    std::lock_guard lock(m_mutex);
    if (m_id == 0) return;
    // On the way out: an etcd that stopped answering must not hold the agent's exit.
    EtcdOptions bounded = m_options;
    bounded.timeout = std::min<std::chrono::milliseconds>(bounded.timeout, std::chrono::seconds(2));
    EtcdClient(bounded).call("/v3/lease/revoke", {{"ID", std::to_string(m_id)}});
}

std::int64_t EtcdKeyLease::id() {
    std::lock_guard lock(m_mutex);
    if (m_id != 0) return m_id;
    EtcdClient client(m_options);
    m_id = join_shared(client);
    // Each renewal is bounded by the client's timeout; one that fails is retried at the
    // next third of the TTL, so two may fail before the keys are at risk.
    EtcdOptions renewing = m_options;
    renewing.timeout = std::min<std::chrono::milliseconds>(renewing.timeout, m_ttl / 3);
    m_renew_client = std::make_unique<EtcdClient>(renewing);
    m_renewer = std::thread([this] { renew_until_stopped(); });
    return m_id;
}

std::int64_t EtcdKeyLease::grant(EtcdClient& client) {
    auto granted = client.call("/v3/lease/grant", {{"TTL", std::to_string(m_ttl.count())}});
    const std::int64_t id = etcd_int64(granted, "ID");
    if (id == 0)
        throw StoreError(StoreError::Kind::Other, "etcd granted no lease: " + granted.dump());
    return id;
}

// The lease named under the shared key while it is alive; else a new one, put
// there if the key is still as read (another agent may put its own first: that
// one is then used). A value that names no live lease (it lapsed, or another
// program wrote it) is replaced the same way.
std::int64_t EtcdKeyLease::join_shared(EtcdClient& client) {
    const std::string key = etcd_base64(m_shared_key);
    for (int attempt = 0; attempt < 8; ++attempt) {
        json read = client.call("/v3/kv/range", {{"key", key}});
        std::int64_t read_revision = 0;  // 0: the key is absent
        if (read.contains("kvs") && read["kvs"].is_array() && !read["kvs"].empty()) {
            const json& kv = read["kvs"][0];
            read_revision = revision_of(kv);
            if (auto named = to_integer(etcd_unbase64(kv.value("value", std::string())));
                named && *named != 0) {
                json renewed = client.call("/v3/lease/keepalive", {{"ID", std::to_string(*named)}});
                const json& result = renewed.contains("result") ? renewed["result"] : renewed;
                if (etcd_int64(result, "TTL") > 0) return *named;
            }
        }
        const std::int64_t mine = grant(client);
        json compare = read_revision == 0 ? json{{"key", key},
                                                 {"target", "CREATE"},
                                                 {"result", "EQUAL"},
                                                 {"create_revision", "0"}}
                                          : json{{"key", key},
                                                 {"target", "MOD"},
                                                 {"result", "EQUAL"},
                                                 {"mod_revision", std::to_string(read_revision)}};
        json put = {{"key", key},
                    {"value", etcd_base64(std::to_string(mine))},
                    {"lease", std::to_string(mine)}};
        json txn = {{"compare", json::array({compare})},
                    {"success", json::array({{{"request_put", put}}})}};
        if (client.call("/v3/kv/txn", txn).value("succeeded", false)) return mine;
        client.call("/v3/lease/revoke", {{"ID", std::to_string(mine)}});
    }
    throw StoreError(StoreError::Kind::Other,
                     "the job's shared etcd lease under '" + m_shared_key +
                         "' changed at every read (another program writes there?)");
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
