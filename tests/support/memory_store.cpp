// MemoryStore: the Store the rendezvous tests run N agents over, without
// libtorch or a network. It keeps what matters of c10d's TCPStore semantics
// (compare_set answers the value after the call, get and wait block until the
// key exists or the timeout passes) and none of its quirks.
#include "support/memory_store.hpp"

#include <condition_variable>
#include <map>
#include <mutex>

#include "ddprun/base/text.hpp"

namespace ddprun {
namespace {

// The data MemoryStore clones share.
struct MemoryData {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::string, std::less<>> values;
};

class MemoryStore final : public Store {
  public:
    MemoryStore(std::shared_ptr<MemoryData> data, std::chrono::milliseconds timeout)
        : m_data(std::move(data)), m_timeout(timeout) {}

    void set(const std::string& key, const std::string& value) override {
        {
            std::lock_guard lock(m_data->mutex);
            m_data->values[key] = value;
        }
        m_data->changed.notify_all();
    }

    std::string get(const std::string& key) override {
        std::unique_lock lock(m_data->mutex);
        wait_locked(lock, {key}, m_timeout);
        return m_data->values.find(key)->second;
    }

    std::int64_t add(const std::string& key, std::int64_t delta) override {
        std::int64_t result = 0;
        {
            std::lock_guard lock(m_data->mutex);
            auto [it, inserted] = m_data->values.try_emplace(key, "0");
            auto current = to_integer(it->second);
            if (!current) {
                throw StoreError(StoreError::Kind::Other, "memory store: cannot add to '" + key +
                                                              "': it holds '" + it->second +
                                                              "', not a number");
            }
            result = *current + delta;
            it->second = std::to_string(result);
        }
        m_data->changed.notify_all();
        return result;
    }

    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        std::string result;
        bool changed = false;
        {
            std::lock_guard lock(m_data->mutex);
            auto it = m_data->values.find(key);
            std::string current = it == m_data->values.end() ? std::string() : it->second;
            if (current == expected) {
                m_data->values[key] = desired;
                result = desired;
                changed = true;
            } else {
                result = current;
            }
        }
        if (changed) m_data->changed.notify_all();
        return result;
    }

    bool check(const std::vector<std::string>& keys) override {
        std::lock_guard lock(m_data->mutex);
        return all_present(keys);
    }

    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        std::unique_lock lock(m_data->mutex);
        wait_locked(lock, keys, timeout);
    }

    std::unique_ptr<Store> clone() override {
        return std::make_unique<MemoryStore>(m_data, m_timeout);
    }

  private:
    bool all_present(const std::vector<std::string>& keys) const {
        for (const auto& key : keys)
            if (!m_data->values.contains(key)) return false;
        return true;
    }

    void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                     std::chrono::milliseconds timeout) {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        if (!m_data->changed.wait_until(lock, deadline, [&] { return all_present(keys); })) {
            std::string first = keys.empty() ? std::string() : keys.front();
            throw StoreError(
                StoreError::Kind::Timeout,
                "memory store: timed out after " + std::to_string(timeout.count()) +
                    "ms waiting for '" + first + "'" +
                    (keys.size() > 1 ? " and " + std::to_string(keys.size() - 1) + " more"
                                     : std::string()));
        }
    }

    std::shared_ptr<MemoryData> m_data;
    std::chrono::milliseconds m_timeout;
};

}  // namespace

std::unique_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) {
    return std::make_unique<MemoryStore>(std::make_shared<MemoryData>(), timeout);
}

}  // namespace ddprun
