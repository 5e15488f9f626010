// The Store interface over etcd's v3 API (see etcd_store.hpp): a key of the
// rendezvous is an etcd key under the prefix; compare-and-set is a
// transaction, a counter is a set of keys of its own (below); get and wait
// block on a watch, never a poll.
//
// Counters. Every agent of a round adds to the same counters at once (assign,
// joined, then finished, acks). A read and a compare-and-set on the counter's
// key, retried when another agent wrote in between, costs about as many
// transactions per agent as there are agents ahead of it: close to N^2 in all
// (1024 agents took 65 s to join, docs/scale.md). Instead, add(K, 1) is one
// transaction that puts K "\0" "1" and reads it back: etcd counts the puts to a
// key in its `version`, and a transaction is atomic and ordered by revision,
// so the version it reads is the counter's value as of that put. Each add gets
// a distinct, exact result (as c10d's add does), none is ever retried, and
// none costs more as the count grows (counting a key per add, as this did
// before, made etcd walk N keys per add: docs/scale.md).
//  - "\0" because the rendezvous builds its keys from text: no key of its own
//    holds a NUL byte, so the counter "joined" and the record "joined/3"
//    cannot be confused, and [K, K "\x01") holds exactly K and its deltas:
//    one range, or one watch, sees both.
//  - Other deltas than 1 are keys of their own, K "\0" "n" id, summed with
//    the ones; add(K, 0) writes nothing, it only reads.
//  - A value written to K itself (set(), compare_set(), or a stray writer's
//    garbage) is the key's value while it exists, deltas or not, as set()
//    replaces a c10d counter; add() then adds to it with compare-and-set, the
//    old way (retried, but not on the rendezvous' path), and says when it is
//    not a number. compare_set() compares K itself only: nothing compares and
//    sets a counter.
#include "ddprun/store/etcd_store.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"
#include "ddprun/store/etcd_client.hpp"

namespace ddprun {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// etcd's default --max-txn-ops: more operations in one transaction are refused.
constexpr std::size_t k_max_txn_ops = 128;

const json* first_kv(const json& range_answer) {
    if (!range_answer.is_object() || !range_answer.contains("kvs") ||
        !range_answer["kvs"].is_array() || range_answer["kvs"].empty())
        return nullptr;
    return &range_answer["kvs"][0];
}

// The answers of a transaction's operations, in order (null where one is missing).
const json& txn_response(const json& answer, std::size_t index, const char* kind) {
    static const json none;
    if (!answer.contains("responses") || !answer["responses"].is_array() ||
        answer["responses"].size() <= index || !answer["responses"][index].is_object() ||
        !answer["responses"][index].contains(kind))
        return none;
    return answer["responses"][index][kind];
}

// A name for this connection's delta keys that no other agent's can share:
// 64 random bits, and a sequence number per add.
std::string make_counter_id() {
    std::random_device device;
    return fmt::format("{:08x}{:08x}", device(), device());
}

class EtcdStore final : public Store {
  public:
    explicit EtcdStore(EtcdStoreOptions options)
        : m_options(std::move(options)), m_client(m_options.client), m_id(make_counter_id()) {}

    void set(const std::string& key, const std::string& value) override {
        json request = {{"key", encoded(key)}, {"value", etcd_base64(value)}};
        if (m_options.lease) request["lease"] = std::to_string(m_options.lease->id());
        m_client.call("/v3/kv/put", request);
    }

    std::string get(const std::string& key) override {
        return wait_get({key}, m_options.client.timeout).front();
    }

    std::vector<std::string> wait_get(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) override {
        // A transaction of reads per k_max_txn_ops keys (node 0 reads every node's
        // record); a key that is a counter, or is not there yet, is then read on its own.
        const auto deadline = Clock::now() + timeout;
        std::vector<std::string> values(keys.size());
        for (std::size_t first = 0; first < keys.size(); first += k_max_txn_ops) {
            const std::size_t last = std::min(keys.size(), first + k_max_txn_ops);
            json ranges = json::array();
            for (std::size_t i = first; i < last; ++i)
                ranges.push_back({{"request_range", read_request(keys[i])}});
            json answer = m_client.call("/v3/kv/txn", {{"success", ranges}});
            for (std::size_t i = first; i < last; ++i) {
                auto [value, revision] =
                    read_answer(keys[i], txn_response(answer, i - first, "response_range"),
                                header_revision(answer));
                values[i] = value ? std::move(*value) : wait_for_value(keys[i], revision, deadline);
            }
        }
        return values;
    }

    std::int64_t add(const std::string& key, std::int64_t delta) override {
        for (;;) {
            json txn = {{"compare", json::array({absent(key)})},
                        {"success", counter_reads(key)},
                        {"failure", json::array({{{"request_range", {{"key", encoded(key)}}}}})}};
            if (delta != 0) txn["success"].insert(txn["success"].begin(), counter_put(key, delta));
            json answer = m_client.call("/v3/kv/txn", txn);
            const std::size_t first = delta != 0 ? 1 : 0;
            if (answer.value("succeeded", false)) return counter_value(key, answer, first).value;
            // K itself holds a value: add to it if nobody writes it in between.
            const json* kv = first_kv(txn_response(answer, 0, "response_range"));
            if (kv == nullptr) continue;  // gone meanwhile
            const std::int64_t next = number_in(key, *kv) + delta;
            if (delta == 0) return next;
            json compare = {{"key", encoded(key)},
                            {"target", "MOD"},
                            {"result", "EQUAL"},
                            {"mod_revision", std::to_string(etcd_int64(*kv, "mod_revision"))}};
            json cas = {{"compare", json::array({compare})},
                        {"success", json::array({put(key, std::to_string(next))})}};
            if (m_client.call("/v3/kv/txn", cas).value("succeeded", false)) return next;
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
        if (const json* kv = first_kv(txn_response(answer, 0, "response_range")))
            return etcd_unbase64(kv->value("value", std::string()));
        return {};
    }

    // One transaction instead of 2 + records.size() requests: the claim, the
    // records, the counter's delta and its count, and the peeks. When the counter's
    // key itself holds a value (set(), or a stray writer's garbage) add() must read
    // it: the calls one by one then, as the default does.
    Claim claim(const std::string& key, const std::string& value,
                const std::vector<std::pair<std::string, std::string>>& records,
                const std::string& counter, const std::vector<std::string>& peeks) override {
        json success = json::array({put(key, value)});
        for (const auto& [record_key, record] : records) success.push_back(put(record_key, record));
        success.push_back(counter_put(counter, 1));
        const std::size_t first_read = success.size();
        for (json& read : counter_reads(counter)) success.push_back(std::move(read));
        const std::size_t first_peek = success.size();
        for (const auto& peek : peeks) success.push_back({{"request_range", read_request(peek)}});
        json txn = {{"compare", json::array({absent(key), absent(counter)})},
                    {"success", std::move(success)},
                    {"failure", json::array({{{"request_range", {{"key", encoded(key)}}}}})}};
        json answer = m_client.call("/v3/kv/txn", txn);
        if (answer.value("succeeded", false)) {
            Claim claimed{value, counter_value(counter, answer, first_read).value, {}, 0};
            claimed.revision = header_revision(answer);
            for (std::size_t i = 0; i < peeks.size(); ++i) {
                auto [peeked, read_at] =
                    read_answer(peeks[i], txn_response(answer, first_peek + i, "response_range"),
                                claimed.revision);
                // A counter's value took a read of its own, after the claim.
                if (read_at != claimed.revision) claimed.revision = 0;
                claimed.peeked.push_back(std::move(peeked));
            }
            return claimed;
        }
        if (const json* kv = first_kv(txn_response(answer, 0, "response_range")))
            return {etcd_unbase64(kv->value("value", std::string())), 0,
                    std::vector<std::optional<std::string>>(peeks.size()), 0};
        return Store::claim(key, value, records, counter, peeks);
    }

    std::vector<std::string> wait_get_after(const std::vector<std::string>& keys,
                                            std::int64_t revision,
                                            std::chrono::milliseconds timeout) override {
        if (revision <= 0) return wait_get(keys, timeout);
        // Each key was missing at `revision`: a watch from there sees its put, past or
        // future, without reading it first.
        const auto deadline = Clock::now() + timeout;
        std::vector<std::string> values;
        values.reserve(keys.size());
        for (const auto& key : keys) values.push_back(wait_for_value(key, revision, deadline));
        return values;
    }

    bool check(const std::vector<std::string>& keys) override {
        return missing(keys, true).keys.empty();
    }

    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        // One check of all the keys (a round trip per k_max_txn_ops of them), then a watch
        // for the first one missing, and so on: node 0 waits for every node's record, and
        // one read per key would make its wait grow with N.
        const auto deadline = Clock::now() + timeout;
        std::vector<std::string> pending = keys;
        for (;;) {
            Missing absent = missing(pending, false);
            if (absent.keys.empty()) return;
            if (Clock::now() >= deadline)
                throw StoreError(StoreError::Kind::Timeout,
                                 fmt::format("timed out waiting for '{}'", absent.keys.front()));
            wait_for(absent.keys.front(), absent.revision, deadline);
            pending = std::move(absent.keys);
        }
    }

    std::unique_ptr<Store> clone() override { return std::make_unique<EtcdStore>(m_options); }
    bool cancellable() const override { return true; }
    void cancel() override { m_client.cancel(); }

  private:
    std::string etcd_key(const std::string& key) const {
        const std::string& root = m_options.job_root;
        return m_options.prefix +
               (!root.empty() && key.starts_with(root) ? key.substr(root.size()) : key);
    }
    std::string encoded(const std::string& key) const { return etcd_base64(etcd_key(key)); }

    // K "\0": the counter's deltas follow; K "\x01": the end of K and its deltas.
    std::string counter_base(const std::string& key) const {
        return etcd_key(key) + std::string(1, '\0');
    }
    std::string key_end(const std::string& key) const { return etcd_key(key) + "\x01"; }

    json put_raw(const std::string& etcd_key, const std::string& value) const {
        json request = {{"key", etcd_base64(etcd_key)}, {"value", etcd_base64(value)}};
        if (m_options.lease) request["lease"] = std::to_string(m_options.lease->id());
        return {{"request_put", std::move(request)}};
    }
    json put(const std::string& key, const std::string& value) const {
        return put_raw(etcd_key(key), value);
    }
    json absent(const std::string& key) const {
        return {{"key", encoded(key)},
                {"target", "CREATE"},
                {"result", "EQUAL"},
                {"create_revision", "0"}};
    }

    // A delta's put: to K "\0" "1" for 1 (its version counts them), else a key of its own.
    json counter_put(const std::string& key, std::int64_t delta) {
        if (delta == 1) return put_raw(counter_base(key) + "1", "1");
        return put_raw(counter_base(key) + "n" + fmt::format("{}.{}", m_id, ++m_adds),
                       std::to_string(delta));
    }

    // The two reads that give a counter's value: the ones' key, and the other deltas.
    json counter_reads(const std::string& key) const {
        const std::string base = counter_base(key);
        return json::array(
            {{{"request_range", {{"key", etcd_base64(base + "1")}}}},
             {{"request_range",
               {{"key", etcd_base64(base + "n")}, {"range_end", etcd_base64(base + "o")}}}}});
    }

    struct CounterValue {
        std::int64_t value = 0;
        bool exists = false;  // some delta was written
    };
    // The answers of counter_reads(), from operation `first` of a transaction.
    CounterValue counter_value(const std::string& key, const json& answer,
                               std::size_t first) const {
        CounterValue counter;
        if (const json* ones = first_kv(txn_response(answer, first, "response_range"))) {
            counter.value = etcd_int64(*ones, "version");
            counter.exists = true;
        }
        const json& others = txn_response(answer, first + 1, "response_range");
        if (others.is_object() && others.contains("kvs") && others["kvs"].is_array()) {
            for (const json& kv : others["kvs"]) {
                counter.value += number_in(key, kv);
                counter.exists = true;
            }
        }
        return counter;
    }

    // The integer a key-value holds, or a StoreError that says it holds something else.
    static std::int64_t number_in(const std::string& key, const json& kv) {
        std::string text = etcd_unbase64(kv.value("value", std::string()));
        auto number = to_integer(text);
        if (!number)
            throw StoreError(StoreError::Kind::Other,
                             fmt::format("cannot add to '{}': it holds '{}', not a number", key,
                                         text.substr(0, 40)));
        return *number;
    }

    // A range that reads K and the first of its deltas, and counts them all: K's value
    // when K exists (it sorts first), else whether it is a counter.
    json read_request(const std::string& key) const {
        return {{"key", encoded(key)}, {"range_end", etcd_base64(key_end(key))}, {"limit", 1}};
    }

    // The key's value (if any) from the answer to read_request(): K's own, or else its
    // counter's (one more round trip); and the store's revision it was read at.
    std::pair<std::optional<std::string>, std::int64_t> read_answer(const std::string& key,
                                                                    const json& range,
                                                                    std::int64_t revision) {
        if (const json* kv = first_kv(range);
            kv != nullptr && etcd_unbase64(kv->value("key", std::string())) == etcd_key(key))
            return {etcd_unbase64(kv->value("value", std::string())), revision};
        if (etcd_int64(range, "count") == 0) return {std::nullopt, revision};
        // A counter: its value, read at once (K itself may have been set meanwhile).
        json txn = {{"compare", json::array({absent(key)})},
                    {"success", counter_reads(key)},
                    {"failure", json::array({{{"request_range", {{"key", encoded(key)}}}}})}};
        json counted = m_client.call("/v3/kv/txn", txn);
        revision = header_revision(counted);
        if (!counted.value("succeeded", false)) {
            if (const json* kv = first_kv(txn_response(counted, 0, "response_range")))
                return {etcd_unbase64(kv->value("value", std::string())), revision};
            return {std::nullopt, revision};
        }
        CounterValue counter = counter_value(key, counted, 0);
        if (!counter.exists) return {std::nullopt, revision};
        return {std::to_string(counter.value), revision};
    }

    // Blocks until `key` exists, found missing at `revision`; throws Timeout at `deadline`.
    std::string wait_for_value(const std::string& key, std::int64_t revision,
                               Clock::time_point deadline) {
        for (;;) {
            if (Clock::now() >= deadline)
                throw StoreError(StoreError::Kind::Timeout,
                                 fmt::format("timed out waiting for '{}'", key));
            // The put that ends the watch carries its value: when it is the key's own,
            // that is the answer, not read again (every agent waits for node 0's
            // membership record, whose size grows with N).
            json kv = wait_for(key, revision, deadline);
            if (etcd_unbase64(kv.value("key", std::string())) == etcd_key(key))
                return etcd_unbase64(kv.value("value", std::string()));
            json answer = m_client.call("/v3/kv/range", read_request(key));
            auto [value, read_at] = read_answer(key, answer, header_revision(answer));
            if (value) return *value;
            revision = read_at;
        }
    }

    // The keys among `keys` that do not exist (neither K nor a delta of it), in order, and
    // the revision of the read that found the first one missing (its watch starts after
    // it). A transaction of count_only ranges per k_max_txn_ops keys; `first_only` stops
    // at the first transaction with a key missing.
    struct Missing {
        std::vector<std::string> keys;
        std::int64_t revision = 0;
    };
    Missing missing(const std::vector<std::string>& keys, bool first_only) {
        Missing result;
        for (std::size_t first = 0; first < keys.size(); first += k_max_txn_ops) {
            const std::size_t last = std::min(keys.size(), first + k_max_txn_ops);
            json ranges = json::array();
            for (std::size_t i = first; i < last; ++i)
                ranges.push_back({{"request_range",
                                   {{"key", encoded(keys[i])},
                                    {"range_end", etcd_base64(key_end(keys[i]))},
                                    {"count_only", true}}}});
            json answer = m_client.call("/v3/kv/txn", {{"success", ranges}});
            for (std::size_t i = first; i < last; ++i) {
                if (etcd_int64(txn_response(answer, i - first, "response_range"), "count") > 0)
                    continue;
                if (result.keys.empty()) result.revision = header_revision(answer);
                result.keys.push_back(keys[i]);
            }
            if (first_only && !result.keys.empty()) break;
        }
        return result;
    }

    // Blocks until `key` (or a delta of it) is written after `revision`, or throws Timeout
    // at `deadline`. Returns the key-value written.
    json wait_for(const std::string& key, std::int64_t revision, Clock::time_point deadline) {
        try {
            return m_client.watch_for_put(etcd_key(key), key_end(key), revision + 1, deadline);
        } catch (const StoreError& error) {
            if (error.kind() != StoreError::Kind::Timeout) throw;
            throw StoreError(StoreError::Kind::Timeout,
                             fmt::format("timed out waiting for '{}'", key));
        }
    }

    EtcdStoreOptions m_options;
    EtcdClient m_client;
    std::string m_id;          // of this connection's deltas other than 1
    std::uint64_t m_adds = 0;  // deltas written through this connection
};

}  // namespace

std::unique_ptr<Store> open_etcd_store(const EtcdStoreOptions& options) {
    auto store = std::make_unique<EtcdStore>(options);
    // One call now, so that an endpoint that is not etcd (or none at all) is
    // reported at once, in one line.
    store->check({options.job_root});
    return store;
}

}  // namespace ddprun
