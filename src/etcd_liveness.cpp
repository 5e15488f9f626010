// An agent's liveness through an etcd lease (see etcd_liveness.hpp).
#include "ddprun/etcd_liveness.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/text.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// etcd's int64 fields arrive as JSON strings through the gateway.
std::int64_t int64_field(const json& object, const char* name) {
    if (!object.is_object() || !object.contains(name)) return 0;
    const json& value = object[name];
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) return to_integer(value.get<std::string>()).value_or(0);
    return 0;
}

// The node rank at the end of an alive key ("<prefix>alive/3" -> 3), -1 if none.
int node_of(const std::string& key, const std::string& prefix) {
    if (!key.starts_with(prefix)) return -1;
    auto rank = to_integer(std::string_view(key).substr(prefix.size()));
    return rank && *rank >= 0 && *rank < (1 << 30) ? static_cast<int>(*rank) : -1;
}

// The key right after every key that starts with `prefix`: a watch's range end.
std::string prefix_end(std::string prefix) {
    prefix.back() = static_cast<char>(prefix.back() + 1);
    return prefix;
}

}  // namespace

EtcdLiveness::EtcdLiveness(const EtcdStoreOptions& options, std::string run_id,
                           std::chrono::milliseconds ttl)
    : m_client(options.client),
      m_key_prefix(options.prefix + run_id + "/"),
      m_ttl_seconds(std::max<std::int64_t>(2, (ttl.count() + 999) / 1000)) {}

std::string EtcdLiveness::prefix() const {
    return fmt::format("{}r{}/alive/", m_key_prefix, m_round);
}

std::int64_t EtcdLiveness::enter(int round, int node_rank) {
    if (m_lease == 0) {
        json grant = m_client.call("/v3/lease/grant", {{"TTL", std::to_string(m_ttl_seconds)}});
        m_lease = int64_field(grant, "ID");
        if (m_lease == 0)
            throw StoreError(StoreError::Kind::Other, "etcd granted no lease: " + grant.dump());
    }
    m_round = round;
    json put =
        m_client.call("/v3/kv/put", {{"key", etcd_base64(prefix() + std::to_string(node_rank))},
                                     {"value", etcd_base64("1")},
                                     {"lease", std::to_string(m_lease)}});
    // Deletions are watched from the round's start on.
    m_revision = put.contains("header") ? int64_field(put["header"], "revision") : 0;
    return m_revision;
}

void EtcdLiveness::follow(int round, std::int64_t lease, std::int64_t revision) {
    m_round = round;
    m_lease = lease;
    m_revision = revision;
}

void EtcdLiveness::keep_alive() {
    if (m_lease == 0) return;
    json answer = m_client.call("/v3/lease/keepalive", {{"ID", std::to_string(m_lease)}});
    const json& result = answer.contains("result") ? answer["result"] : answer;
    if (int64_field(result, "TTL") <= 0)
        throw StoreError(StoreError::Kind::Other,
                         fmt::format("this node's etcd lease expired (no renewal within {} s): the "
                                     "others gave it up",
                                     m_ttl_seconds));
}

std::vector<int> EtcdLiveness::lost_until(const std::vector<int>& watched,
                                          std::chrono::steady_clock::time_point deadline) {
    if (m_round < 0) return {};
    const std::string keys = prefix();
    auto batch = m_client.watch_events(keys, prefix_end(keys), m_revision + 1, deadline);
    std::vector<int> lost;
    for (const json& event : batch.events) {
        m_revision = std::max(m_revision, batch.revision);
        if (event.value("type", std::string()) != "DELETE" || !event.contains("kv")) continue;
        int node = node_of(etcd_unbase64(event["kv"].value("key", std::string())), keys);
        if (std::find(watched.begin(), watched.end(), node) != watched.end()) lost.push_back(node);
    }
    return lost;
}

std::vector<int> EtcdLiveness::missing(const std::vector<int>& watched) {
    if (m_round < 0) return {};
    const std::string keys = prefix();
    json answer = m_client.call("/v3/kv/range", {{"key", etcd_base64(keys)},
                                                 {"range_end", etcd_base64(prefix_end(keys))},
                                                 {"keys_only", true}});
    std::vector<int> present;
    if (answer.contains("kvs") && answer["kvs"].is_array())
        for (const json& kv : answer["kvs"])
            present.push_back(node_of(etcd_unbase64(kv.value("key", std::string())), keys));
    std::vector<int> absent;
    for (int node : watched)
        if (std::find(present.begin(), present.end(), node) == present.end())
            absent.push_back(node);
    return absent;
}

}  // namespace ddprun
