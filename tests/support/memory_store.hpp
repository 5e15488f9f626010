// Test doubles of Store (store.hpp), shared by the unit tests and
// bench/rendezvous_scale: an in-process store and a store that counts the
// operations made through it. Kept out of libddprun, which production uses.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/store/store.hpp"

namespace ddprun {

// An in-process store (thread-safe; clone() shares the data). It fails as the
// TCPStore does, with a StoreError: Timeout past `timeout`, Other for an add()
// to a value that is not a number.
std::unique_ptr<Store> make_memory_store(std::chrono::milliseconds timeout);

// Counts the operations made through it (its clones count separately): the
// tests and bench/rendezvous_scale check that an agent's do not grow with N.
// bytes() is their payload: the keys and values sent and the values received,
// whatever a backend adds on the wire (framing, JSON, base64).
class CountingStore final : public Store {
  public:
    explicit CountingStore(std::unique_ptr<Store> inner) : m_inner(std::move(inner)) {}

    void set(const std::string& key, const std::string& value) override {
        ++m_ops;
        m_bytes += key.size() + value.size();
        m_inner->set(key, value);
    }
    std::string get(const std::string& key) override {
        ++m_ops;
        std::string value = m_inner->get(key);
        m_bytes += key.size() + value.size();
        return value;
    }
    std::int64_t add(const std::string& key, std::int64_t delta) override {
        ++m_ops;
        m_bytes += key.size() + sizeof delta * 2;  // the delta sent, the sum received
        return m_inner->add(key, delta);
    }
    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        ++m_ops;
        std::string after = m_inner->compare_set(key, expected, desired);
        m_bytes += key.size() + expected.size() + desired.size() + after.size();
        return after;
    }
    bool check(const std::vector<std::string>& keys) override {
        ++m_ops;
        for (const auto& key : keys) m_bytes += key.size();
        return m_inner->check(keys);
    }
    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        ++m_ops;
        for (const auto& key : keys) m_bytes += key.size();
        m_inner->wait(keys, timeout);
    }
    // A wait and a get per key, as a store that cannot do them in fewer round trips
    // makes them: the counts stay comparable across stores (etcd's own requests are
    // counted by etcd, bench/rendezvous_scale).
    std::vector<std::string> wait_get(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) override {
        m_ops += 1 + static_cast<int>(keys.size());
        std::vector<std::string> values = m_inner->wait_get(keys, timeout);
        for (std::size_t i = 0; i < keys.size(); ++i)
            m_bytes += 2 * keys[i].size() + values[i].size();
        return values;
    }
    std::vector<std::string> wait_get_after(const std::vector<std::string>& keys,
                                            std::int64_t revision,
                                            std::chrono::milliseconds timeout) override {
        m_ops += 1 + static_cast<int>(keys.size());
        std::vector<std::string> values = m_inner->wait_get_after(keys, revision, timeout);
        for (std::size_t i = 0; i < keys.size(); ++i)
            m_bytes += 2 * keys[i].size() + values[i].size();
        return values;
    }
    // Counted as the calls it stands for (a compare_set, a set per record, an add),
    // as wait_get is, and passed on whole so that etcd makes it one transaction.
    Claim claim(const std::string& key, const std::string& value,
                const std::vector<std::pair<std::string, std::string>>& records,
                const std::string& counter, const std::vector<std::string>& peeks) override {
        Claim claimed = m_inner->claim(key, value, records, counter, peeks);
        ++m_ops;
        m_bytes += key.size() + value.size() + claimed.holder.size();
        if (claimed.holder != value) return claimed;
        m_ops += 1 + static_cast<int>(records.size());
        m_bytes += counter.size() + sizeof claimed.count * 2;
        for (const auto& [record_key, record] : records)
            m_bytes += record_key.size() + record.size();
        for (std::size_t i = 0; i < peeks.size(); ++i)
            if (claimed.peeked[i]) m_bytes += peeks[i].size() + claimed.peeked[i]->size();
        return claimed;
    }
    std::unique_ptr<Store> clone() override {
        return std::make_unique<CountingStore>(m_inner->clone());
    }

    int ops() const { return m_ops; }
    std::size_t bytes() const { return m_bytes; }

  private:
    std::unique_ptr<Store> m_inner;
    int m_ops = 0;
    std::size_t m_bytes = 0;
};

}  // namespace ddprun
