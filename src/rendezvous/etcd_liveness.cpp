// An agent's liveness through an etcd lease (see etcd_liveness.hpp).
#include "ddprun/rendezvous/etcd_liveness.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/etcd_lease.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// The key right after every key that starts with `prefix`: a range's end.
std::string prefix_end(std::string prefix) {
    prefix.back() = static_cast<char>(prefix.back() + 1);
    return prefix;
}

// The node rank at the end of a round key ("r2/alive/3" -> 3), -1 if none.
int node_of(const std::string& name, const std::string& prefix) {
    if (!name.starts_with(prefix)) return -1;
    auto rank = to_integer(std::string_view(name).substr(prefix.size()));
    return rank && *rank >= 0 && *rank < (1 << 30) ? static_cast<int>(*rank) : -1;
}

// On the way out: an etcd that stopped answering must not hold the agent's exit.
EtcdStoreOptions bounded(EtcdStoreOptions options) {
    options.client.timeout =
        std::min<std::chrono::milliseconds>(options.client.timeout, std::chrono::seconds(2));
    return options;
}

// Deletes every key of the run in one transaction if `compare` holds (an empty
// one always does), then ends the job's lease. Whether it deleted them.
bool remove_run(const EtcdStoreOptions& options, const std::string& run_id, json compare) {
    const std::string prefix = JobKeys(run_id).run_prefix(options.prefix);
    json remove = {
        {"request_delete_range",
         {{"key", etcd_base64(prefix)}, {"range_end", etcd_base64(prefix_end(prefix))}}}};
    json txn = {{"compare", std::move(compare)}, {"success", json::array({std::move(remove)})}};
    if (!EtcdClient(options.client).call("/v3/kv/txn", txn).value("succeeded", false)) return false;
    if (options.lease) options.lease->revoke();
    return true;
}

}  // namespace

EtcdLiveness::EtcdLiveness(const EtcdStoreOptions& options, std::string run_id,
                           std::chrono::milliseconds ttl, std::string secret)
    : m_client(options.client),
      m_secret(std::move(secret)),
      m_key_prefix(JobKeys(std::move(run_id)).run_prefix(options.prefix)),
      m_ttl_seconds(std::max<std::int64_t>(2, (ttl.count() + 999) / 1000)) {}

std::string EtcdLiveness::round_prefix() const {
    return JobKeys::in_round(m_round, "alive/");
}

std::string EtcdLiveness::sealed(const std::string& name, const std::string& value) const {
    return m_secret.empty() ? value : sign_record(m_secret, m_key_prefix + name, value);
}

std::int64_t EtcdLiveness::hold(const std::string& name, const std::string& value) {
    if (m_lease == 0) {
        json grant = m_client.call("/v3/lease/grant", {{"TTL", std::to_string(m_ttl_seconds)}});
        m_lease = etcd_int64(grant, "ID");
        if (m_lease == 0)
            throw StoreError(StoreError::Kind::Other, "etcd granted no lease: " + grant.dump());
    }
    json put = m_client.call("/v3/kv/put", {{"key", etcd_base64(m_key_prefix + name)},
                                            {"value", etcd_base64(sealed(name, value))},
                                            {"lease", std::to_string(m_lease)}});
    return header_revision(put);
}

std::int64_t EtcdLiveness::enter(int round, int node_rank) {
    m_round = round;
    const std::int64_t revision = hold(round_prefix() + std::to_string(node_rank));
    watch(round_prefix(), revision);
    return revision;
}

void EtcdLiveness::follow(int round, std::int64_t lease, std::int64_t revision) {
    m_round = round;
    m_lease = lease;
    watch(round_prefix(), revision);
}

void EtcdLiveness::keep_alive() {
    if (m_lease == 0) return;
    json answer = m_client.call("/v3/lease/keepalive", {{"ID", std::to_string(m_lease)}});
    const json& result = answer.contains("result") ? answer["result"] : answer;
    if (etcd_int64(result, "TTL") <= 0)
        throw StoreError(StoreError::Kind::GivenUp,
                         fmt::format("rendezvous: the others gave this node up: its etcd lease "
                                     "expired (no renewal within {}: was it frozen or cut off?)",
                                     duration_text(std::chrono::seconds(m_ttl_seconds))));
}

EtcdLiveness::Held EtcdLiveness::campaign(const std::string& name, const std::string& value) {
    if (m_lease == 0) throw StoreError(StoreError::Kind::Other, "no etcd lease to campaign with");
    const std::string full_key = m_key_prefix + name;
    const std::string key = etcd_base64(full_key);
    json txn = {{"compare", json::array({{{"key", key},
                                          {"target", "CREATE"},
                                          {"result", "EQUAL"},
                                          {"create_revision", "0"}}})},
                {"success", json::array({{{"request_put",
                                           {{"key", key},
                                            {"value", etcd_base64(sealed(name, value))},
                                            {"lease", std::to_string(m_lease)}}}}})},
                {"failure", json::array({{{"request_range", {{"key", key}}}}})}};
    json answer = m_client.call("/v3/kv/txn", txn);
    Held held{value, header_revision(answer)};
    if (answer.value("succeeded", false)) return held;
    std::string stored;
    if (answer.contains("responses") && answer["responses"].is_array())
        for (const json& response : answer["responses"]) {
            const json& range = response.value("response_range", json::object());
            if (range.contains("kvs") && range["kvs"].is_array() && !range["kvs"].empty())
                stored = etcd_unbase64(range["kvs"][0].value("value", std::string()));
        }
    // Whoever holds the key decides who leads: a holder's value must be signed.
    auto opened = open_record(m_secret, full_key, stored);
    if (!opened) throw RecordRejected(full_key, opened.error());
    held.value = std::move(*opened);
    return held;
}

void EtcdLiveness::watch(const std::string& name, std::int64_t revision) {
    m_watched = name;
    m_revision = revision;
}

std::vector<std::string> EtcdLiveness::deleted_until(
    std::chrono::steady_clock::time_point deadline) {
    if (m_watched.empty()) return {};
    const std::string key = m_key_prefix + m_watched;
    const bool prefix = m_watched.back() == '/';
    auto batch = m_client.watch_events(key, prefix ? prefix_end(key) : std::string(),
                                       m_revision + 1, deadline);
    std::vector<std::string> deleted;
    for (const json& event : batch.events) {
        m_revision = std::max(m_revision, batch.revision);
        if (event.value("type", std::string()) != "DELETE" || !event.contains("kv")) continue;
        std::string name = etcd_unbase64(event["kv"].value("key", std::string()));
        if (name.starts_with(m_key_prefix)) deleted.push_back(name.substr(m_key_prefix.size()));
    }
    return deleted;
}

std::vector<int> EtcdLiveness::lost_until(const std::vector<int>& watched,
                                          std::chrono::steady_clock::time_point deadline) {
    if (m_round < 0) return {};
    std::vector<int> lost;
    for (const std::string& name : deleted_until(deadline)) {
        int node = node_of(name, round_prefix());
        if (std::find(watched.begin(), watched.end(), node) != watched.end()) lost.push_back(node);
    }
    return lost;
}

std::vector<std::string> EtcdLiveness::present(const std::string& name) {
    const std::string key = m_key_prefix + name;
    // The values too, with a secret: a key another program put is no agent.
    json request = {{"key", etcd_base64(key)}, {"range_end", etcd_base64(prefix_end(key))}};
    if (m_secret.empty()) request["keys_only"] = true;
    json answer = m_client.call("/v3/kv/range", request);
    std::vector<std::string> names;
    if (answer.contains("kvs") && answer["kvs"].is_array())
        for (const json& kv : answer["kvs"]) {
            std::string full = etcd_unbase64(kv.value("key", std::string()));
            if (!full.starts_with(key)) continue;
            if (!m_secret.empty()) {
                auto opened =
                    open_record(m_secret, full, etcd_unbase64(kv.value("value", std::string())));
                if (!opened) {
                    if (m_warned.insert(full).second) spdlog::warn("{}; ignored", opened.error());
                    continue;
                }
            }
            names.push_back(full.substr(key.size()));
        }
    return names;
}

std::vector<int> EtcdLiveness::missing(const std::vector<int>& watched) {
    if (m_round < 0) return {};
    std::vector<int> present_nodes;
    for (const std::string& name : present(round_prefix()))
        present_nodes.push_back(node_of(round_prefix() + name, round_prefix()));
    std::vector<int> absent;
    for (int node : watched)
        if (std::find(present_nodes.begin(), present_nodes.end(), node) == present_nodes.end())
            absent.push_back(node);
    return absent;
}

bool count_out_of_run(EtcdStoreOptions options, const std::string& run_id, int nnodes) {
    options = bounded(std::move(options));
    // Under the run's keys, so that it goes with them.
    if (open_etcd_store(options)->add(JobKeys(run_id).out(), 1) < nnodes) return false;
    return remove_run(options, run_id, json::array());
}

bool end_elastic_run_if_last(EtcdStoreOptions options, const std::string& run_id) {
    options = bounded(std::move(options));
    // etcd compares a range holding no key as a key of version 0.
    json none_in = json::array();
    for (const std::string& held :
         {JobKeys::in_elastic("alive/"), JobKeys::in_elastic("arriving/")}) {
        const std::string key = JobKeys(run_id).run_prefix(options.prefix) + held;
        none_in.push_back({{"key", etcd_base64(key)},
                           {"range_end", etcd_base64(prefix_end(key))},
                           {"target", "VERSION"},
                           {"result", "EQUAL"},
                           {"version", "0"}});
    }
    return remove_run(options, run_id, std::move(none_in));
}

}  // namespace ddprun
