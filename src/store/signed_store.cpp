// The job secret's guard over a Store (see signed_store.hpp).
#include "ddprun/store/signed_store.hpp"

#include <cstdint>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/openssl_plugin.hpp"

namespace ddprun {
namespace {

constexpr std::size_t k_mac_bytes = 32;
constexpr std::size_t k_mac_hex = 2 * k_mac_bytes;

// Compares two MACs of k_mac_bytes in a time that does not depend on where
// they differ (as CRYPTO_memcmp), so that timing tells a forger nothing.
bool same_in_constant_time(std::string_view a, std::string_view b) {
    if (a.size() != k_mac_bytes || b.size() != k_mac_bytes) return false;
    unsigned char difference = 0;
    for (std::size_t i = 0; i < k_mac_bytes; ++i)
        difference |= static_cast<unsigned char>(a[i] ^ b[i]);
    return difference == 0;
}

// Each field with its length first, so that no two (key, value) give the same bytes;
// a version tag, so that a later format cannot be confused with this one. The run id
// and the round are in the key (signed_store.hpp).
std::string mac_input(std::string_view key, std::string_view value) {
    std::string data = "ddprun-record-v1";
    auto field = [&data](std::string_view text) {
        const auto size = static_cast<std::uint64_t>(text.size());
        for (int shift = 56; shift >= 0; shift -= 8)
            data.push_back(static_cast<char>((size >> shift) & 0xff));
        data.append(text);
    };
    field(key);
    field(value);
    return data;
}

std::string quoted(std::string_view key) {
    return fmt::format("'{}'", key);
}

// Whoever has a secret is told the record is not this job's; whoever has none, that
// the others have one.
std::string not_signed(std::string_view key) {
    return fmt::format(
        "a record under {} is not signed with this job's secret (an agent with another secret "
        "or none, or another program, wrote it)",
        quoted(key));
}

// What every clone of one guard shares: the keys already warned about.
struct Warnings {
    std::mutex mutex;
    std::set<std::string> keys;
};

class SignedStore final : public Store {
  public:
    SignedStore(std::unique_ptr<Store> inner, std::string secret,
                std::shared_ptr<Warnings> warnings)
        : m_inner(std::move(inner)), m_secret(std::move(secret)), m_warnings(std::move(warnings)) {}

    void set(const std::string& key, const std::string& value) override {
        m_inner->set(key, sign(key, value));
    }
    std::string get(const std::string& key) override { return open(key, m_inner->get(key)); }
    // Counters carry no MAC (see signed_store.hpp).
    std::int64_t add(const std::string& key, std::int64_t delta) override {
        return m_inner->add(key, delta);
    }
    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        // "" means absent, never a signed empty value.
        const std::string signed_expected = expected.empty() ? expected : sign(key, expected);
        return open(key, m_inner->compare_set(key, signed_expected, sign(key, desired)));
    }
    bool check(const std::vector<std::string>& keys) override { return m_inner->check(keys); }
    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        m_inner->wait(keys, timeout);
    }
    std::vector<std::string> wait_get(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) override {
        return open_all(keys, m_inner->wait_get(keys, timeout));
    }
    std::vector<std::string> wait_get_after(const std::vector<std::string>& keys,
                                            std::int64_t revision,
                                            std::chrono::milliseconds timeout) override {
        return open_all(keys, m_inner->wait_get_after(keys, revision, timeout));
    }
    Claim claim(const std::string& key, const std::string& value,
                const std::vector<std::pair<std::string, std::string>>& records,
                const std::string& counter, const std::vector<std::string>& peeks) override {
        std::vector<std::pair<std::string, std::string>> signed_records;
        signed_records.reserve(records.size());
        for (const auto& [record_key, record] : records)
            signed_records.emplace_back(record_key, sign(record_key, record));
        Claim claimed = m_inner->claim(key, sign(key, value), signed_records, counter, peeks);
        claimed.holder = open(key, claimed.holder);
        for (std::size_t i = 0; i < claimed.peeked.size() && i < peeks.size(); ++i)
            if (claimed.peeked[i]) claimed.peeked[i] = open(peeks[i], *claimed.peeked[i]);
        return claimed;
    }
    std::unique_ptr<Store> clone() override {
        return std::make_unique<SignedStore>(m_inner->clone(), m_secret, m_warnings);
    }
    bool cancellable() const override { return m_inner->cancellable(); }
    void cancel() override { m_inner->cancel(); }

  private:
    std::string sign(const std::string& key, const std::string& value) const {
        if (m_secret.empty()) return value;
        return sign_record(m_secret, key, value);
    }

    std::string open(const std::string& key, const std::string& stored) {
        auto value = open_record(m_secret, key, stored);
        if (value) return std::move(*value);
        {
            std::lock_guard lock(m_warnings->mutex);
            if (m_warnings->keys.insert(key).second) spdlog::warn("{}", value.error());
        }
        throw RecordRejected(key, value.error());
    }

    std::vector<std::string> open_all(const std::vector<std::string>& keys,
                                      std::vector<std::string> stored) {
        for (std::size_t i = 0; i < stored.size() && i < keys.size(); ++i)
            stored[i] = open(keys[i], stored[i]);
        return stored;
    }

    std::unique_ptr<Store> m_inner;
    std::string m_secret;  // empty: no secret; signed records are then rejected
    std::shared_ptr<Warnings> m_warnings;
};

}  // namespace

std::string hmac_sha256(std::string_view key, std::string_view data) {
    std::string mac = openssl_plugin().hmac_sha256(key, data);
    if (mac.size() != k_mac_bytes) throw std::runtime_error("OpenSSL HMAC-SHA256 failed");
    return mac;
}

std::string to_hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(2 * bytes.size());
    for (char c : bytes) {
        const auto byte = static_cast<unsigned char>(c);
        hex.push_back(digits[byte >> 4]);
        hex.push_back(digits[byte & 0xf]);
    }
    return hex;
}

std::optional<std::string> from_hex(std::string_view hex) {
    if (hex.size() % 2 != 0) return std::nullopt;
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string bytes;
    bytes.reserve(hex.size() / 2);
    for (std::size_t i = 0; i < hex.size(); i += 2) {
        int high = digit(hex[i]), low = digit(hex[i + 1]);
        if (high < 0 || low < 0) return std::nullopt;
        bytes.push_back(static_cast<char>(high * 16 + low));
    }
    return bytes;
}

std::string sign_record(std::string_view secret, std::string_view key, std::string_view value) {
    std::string stored(k_signed_prefix);
    stored += to_hex(hmac_sha256(secret, mac_input(key, value)));
    stored += ' ';
    stored += value;
    return stored;
}

std::expected<std::string, std::string> open_record(std::string_view secret, std::string_view key,
                                                    std::string_view stored) {
    const bool looks_signed = stored.starts_with(k_signed_prefix);
    if (secret.empty()) {
        if (!looks_signed) return std::string(stored);
        return std::unexpected(fmt::format(
            "a record under {} is signed with a job secret and this agent has none: give every "
            "agent the same secret (--rdzv_conf secret_file=PATH, DDPRUN_RDZV_SECRET_FILE or "
            "DDPRUN_RDZV_SECRET)",
            quoted(key)));
    }
    const std::size_t value_at = k_signed_prefix.size() + k_mac_hex + 1;
    if (!looks_signed || stored.size() < value_at || stored[value_at - 1] != ' ')
        return std::unexpected(not_signed(key));
    auto mac = from_hex(stored.substr(k_signed_prefix.size(), k_mac_hex));
    if (!mac) return std::unexpected(not_signed(key));
    const std::string_view value = stored.substr(value_at);
    const std::string expected = hmac_sha256(secret, mac_input(key, value));
    if (!same_in_constant_time(expected, *mac)) return std::unexpected(not_signed(key));
    return std::string(value);
}

std::expected<std::string, NoRecord> read_record(Store& store, const std::string& key) {
    if (!store.check({key})) return std::unexpected(NoRecord::Missing);
    try {
        return store.get(key);
    } catch (const RecordRejected&) {
        return std::unexpected(NoRecord::Rejected);
    }
}

std::unique_ptr<Store> sign_store(std::unique_ptr<Store> inner, std::string secret) {
    // A plugin that cannot load fails the join now, in one line, not the first record.
    if (!secret.empty()) openssl_plugin();
    return std::make_unique<SignedStore>(std::move(inner), std::move(secret),
                                         std::make_shared<Warnings>());
}

}  // namespace ddprun
