// A Store that counts its calls (see store_counts.hpp).
#include "ddprun/store/store_counts.hpp"

namespace ddprun {
namespace {

class CountedStore final : public Store {
  public:
    CountedStore(std::unique_ptr<Store> inner, std::shared_ptr<StoreCounts> counts)
        : m_inner(std::move(inner)), m_counts(std::move(counts)) {}

    void set(const std::string& key, const std::string& value) override {
        call([&] { m_inner->set(key, value); });
    }
    std::string get(const std::string& key) override {
        return call([&] { return m_inner->get(key); });
    }
    std::int64_t add(const std::string& key, std::int64_t delta) override {
        return call([&] { return m_inner->add(key, delta); });
    }
    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        return call([&] { return m_inner->compare_set(key, expected, desired); });
    }
    bool check(const std::vector<std::string>& keys) override {
        return call([&] { return m_inner->check(keys); });
    }
    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        call([&] { m_inner->wait(keys, timeout); }, true);
    }
    std::vector<std::string> wait_get(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) override {
        return call([&] { return m_inner->wait_get(keys, timeout); }, true);
    }
    Claim claim(const std::string& key, const std::string& value,
                const std::vector<std::pair<std::string, std::string>>& records,
                const std::string& counter, const std::vector<std::string>& peeks) override {
        return call([&] { return m_inner->claim(key, value, records, counter, peeks); });
    }
    std::vector<std::string> wait_get_after(const std::vector<std::string>& keys,
                                            std::int64_t revision,
                                            std::chrono::milliseconds timeout) override {
        return call([&] { return m_inner->wait_get_after(keys, revision, timeout); }, true);
    }
    std::unique_ptr<Store> clone() override { return count_store(m_inner->clone(), m_counts); }
    bool cancellable() const override { return m_inner->cancellable(); }
    void cancel() override { m_inner->cancel(); }

  private:
    // `waits`: a timeout is the call's normal end, not a failure.
    template <class Call>
    auto call(Call&& inner_call, bool waits = false) -> decltype(inner_call()) {
        ++m_counts->requests;
        try {
            return inner_call();
        } catch (const StoreError& e) {
            if (!waits || e.kind() != StoreError::Kind::Timeout) ++m_counts->errors;
            throw;
        }
    }

    std::unique_ptr<Store> m_inner;
    std::shared_ptr<StoreCounts> m_counts;
};

}  // namespace

std::unique_ptr<Store> count_store(std::unique_ptr<Store> inner,
                                   std::shared_ptr<StoreCounts> counts) {
    return std::make_unique<CountedStore>(std::move(inner), std::move(counts));
}

}  // namespace ddprun
