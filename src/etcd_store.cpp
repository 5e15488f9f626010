// The Store interface over etcd's v3 API (see etcd_store.hpp): a key of the
// rendezvous is an etcd key under the prefix; compare-and-set and counters are
// transactions; get and wait block on a watch, never a poll.
#include "ddprun/etcd_store.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/etcd_client.hpp"
#include "ddprun/text.hpp"

namespace ddprun {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// etcd's default --max-txn-ops: more operations in one transaction are refused.
constexpr std::size_t k_max_txn_ops = 128;

// etcd's integers arrive as JSON strings (int64 in the gateway's mapping).
std::int64_t integer_field(const json& object, const char* name) {
    if (!object.contains(name)) return 0;
    const json& value = object[name];
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) return to_integer(value.get<std::string>()).value_or(0);
    return 0;
}

class EtcdStore final : public Store {
  public:
    explicit EtcdStore(EtcdStoreOptions options)
        : m_options(std::move(options)), m_client(m_options.client) {}

    void set(const std::string& key, const std::string& value) override {
        m_client.call("/v3/kv/put", {{"key", encoded(key)}, {"value", etcd_base64(value)}});
    }

    std::string get(const std::string& key) override {
        const auto deadline = Clock::now() + m_options.client.timeout;
        for (;;) {
            auto [value, revision] = range(key);
            if (value) return *value;
            wait_for(key, revision, deadline);
        }
    }

    std::int64_t add(const std::string& key, std::int64_t delta) override {
        // Read, then write if nobody wrote in between (the key's mod revision); retried
        // under contention.
        for (;;) {
            auto answer = m_client.call("/v3/kv/range", {{"key", encoded(key)}});
            std::int64_t current = 0;
            json compare;
            if (const json* kv = first_kv(answer)) {
                std::string text = etcd_unbase64(kv->value("value", std::string()));
                auto number = to_integer(text);
                if (!number)
                    throw StoreError(StoreError::Kind::Other,
                                     fmt::format("cannot add to '{}': it holds '{}', not a number",
                                                 key, text.substr(0, 40)));
                current = *number;
                compare = {{"key", encoded(key)},
                           {"target", "MOD"},
                           {"result", "EQUAL"},
                           {"mod_revision", std::to_string(integer_field(*kv, "mod_revision"))}};
            } else {
                compare = absent(key);
            }
            const std::int64_t next = current + delta;
            json txn = {{"compare", json::array({compare})},
                        {"success", json::array({put(key, std::to_string(next))})}};
            if (m_client.call("/v3/kv/txn", txn).value("succeeded", false)) return next;
        }
    }

    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        json compare = expected.empty() ? absent(key)
                                        : json{{"key", encoded(key)},
                                               {"target", "VALUE"},
                                               {"result", "EQUAL"},
                                               {"value", etcd_base64(expected)}};
        json txn = {{"compare", json::array({compare})},
                    {"success", json::array({put(key, desired)})},
                    {"failure", json::array({{{"request_range", {{"key", encoded(key)}}}}})}};
        json answer = m_client.call("/v3/kv/txn", txn);
        if (answer.value("succeeded", false)) return desired;
        // The current value, from the failure branch's range ("" when absent).
        if (answer.contains("responses") && answer["responses"].is_array()) {
            for (const json& response : answer["responses"]) {
                if (!response.contains("response_range")) continue;
                if (const json* kv = first_kv(response["response_range"]))
                    return etcd_unbase64(kv->value("value", std::string()));
            }
        }
        return {};
    }

    bool check(const std::vector<std::string>& keys) override {
        // A round trip per k_max_txn_ops keys: a transaction of ranges that always succeeds
        // (etcd refuses more operations in one transaction by default, --max-txn-ops).
        for (std::size_t first = 0; first < keys.size(); first += k_max_txn_ops) {
            const std::size_t last = std::min(keys.size(), first + k_max_txn_ops);
            json ranges = json::array();
            for (std::size_t i = first; i < last; ++i)
                ranges.push_back(
                    {{"request_range", {{"key", encoded(keys[i])}, {"count_only", true}}}});
            json answer = m_client.call("/v3/kv/txn", {{"success", ranges}});
            if (!answer.contains("responses") || !answer["responses"].is_array() ||
                answer["responses"].size() != last - first)
                return false;
            for (const json& response : answer["responses"]) {
                if (!response.contains("response_range") ||
                    integer_field(response["response_range"], "count") == 0)
                    return false;
            }
        }
        return true;
    }

    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        const auto deadline = Clock::now() + timeout;
        for (const auto& key : keys) {
            for (;;) {
                auto [value, revision] = range(key);
                if (value) break;
                if (Clock::now() >= deadline)
                    throw StoreError(StoreError::Kind::Timeout,
                                     fmt::format("timed out waiting for '{}'", key));
                wait_for(key, revision, deadline);
            }
        }
    }

    std::unique_ptr<Store> clone() override { return std::make_unique<EtcdStore>(m_options); }
    bool cancellable() const override { return true; }
    void cancel() override { m_client.cancel(); }

  private:
    std::string etcd_key(const std::string& key) const {
        // The rendezvous names its keys "ddprun/<run>/...": under the prefix instead.
        constexpr std::string_view ours = "ddprun/";
        return m_options.prefix + (key.starts_with(ours) ? key.substr(ours.size()) : key);
    }
    std::string encoded(const std::string& key) const { return etcd_base64(etcd_key(key)); }

    json put(const std::string& key, const std::string& value) const {
        return {{"request_put", {{"key", encoded(key)}, {"value", etcd_base64(value)}}}};
    }
    json absent(const std::string& key) const {
        return {{"key", encoded(key)},
                {"target", "CREATE"},
                {"result", "EQUAL"},
                {"create_revision", "0"}};
    }

    static const json* first_kv(const json& range_answer) {
        if (!range_answer.contains("kvs") || !range_answer["kvs"].is_array() ||
            range_answer["kvs"].empty())
            return nullptr;
        return &range_answer["kvs"][0];
    }

    // The value (if any) and the store's revision it was read at.
    std::pair<std::optional<std::string>, std::int64_t> range(const std::string& key) {
        json answer = m_client.call("/v3/kv/range", {{"key", encoded(key)}});
        std::int64_t revision =
            answer.contains("header") ? integer_field(answer["header"], "revision") : 0;
        if (const json* kv = first_kv(answer))
            return {etcd_unbase64(kv->value("value", std::string())), revision};
        return {std::nullopt, revision};
    }

    // Blocks until `key` is written after `revision`, or throws Timeout at `deadline`.
    void wait_for(const std::string& key, std::int64_t revision, Clock::time_point deadline) {
        try {
            m_client.watch_for_put(etcd_key(key), revision + 1, deadline);
        } catch (const StoreError& error) {
            if (error.kind() != StoreError::Kind::Timeout) throw;
            throw StoreError(StoreError::Kind::Timeout,
                             fmt::format("timed out waiting for '{}'", key));
        }
    }

    EtcdStoreOptions m_options;
    EtcdClient m_client;
};

}  // namespace

std::unique_ptr<Store> open_etcd_store(const EtcdStoreOptions& options) {
    auto store = std::make_unique<EtcdStore>(options);
    // One call now, so that an endpoint that is not etcd (or none at all) is
    // reported at once, in one line.
    store->check({"ddprun/"});
    return store;
}

}  // namespace ddprun
