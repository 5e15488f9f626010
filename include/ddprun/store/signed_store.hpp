// SignedStore: the job secret's guard over any Store. Anyone who can
// reach the rendezvous port can write the job's keys, and a well-formed forged
// record is worse than garbage (a forged "every node finished" would be a false
// success). With a secret, every record an agent writes carries an
// HMAC-SHA256 over the key and the value, and every record it reads is checked
// before anyone parses it. This relies on the keys holding the run id and the
// round ("ddprun/<run id>/r<round>/...", "ddprun/<run id>/e/..."): a record
// cannot be replayed under another key, round or run (the one key without
// them, "ddprun/run_id", holds the run id in its value). A record of an
// earlier job with the same run id and the same secret would pass: the
// --hosts launcher makes a fresh secret per job; a user who keeps one secret
// file gives each job its own --rdzv_id (an etcd run's keys outlive it).
//
// Stored form: "hmac-sha256=<64 hex digits> <value>". The MAC is deterministic,
// so compare_set's `expected` is signed as the writer signed it.
//
// Counters (add) cannot carry a MAC: they pass through unchecked. Every
// counter of the protocol only wakes agents or numbers records, which are then
// read signed; each use says what a forged count can do (rendezvous.cpp,
// elastic.cpp, coordinator_heartbeat.cpp). check() and wait() say only that a
// key exists: where existence alone would be acted on (a kill), the record is
// read.
//
// Without a secret the guard still recognises signed records, so that an agent
// without the secret and one with it fail at join with a line that says so.
#pragma once

#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/store/store.hpp"

namespace ddprun {

// A record under `key` that fails the check: not signed, signed with another
// secret, truncated, or signed while this agent has no secret. Kind Other, so
// that code that treats garbage under a key as the end of the join does the same.
class RecordRejected : public StoreError {
  public:
    RecordRejected(std::string key, const std::string& message)
        : StoreError(Kind::Other, message), m_key(std::move(key)) {}
    const std::string& key() const { return m_key; }

  private:
    std::string m_key;
};

// The shortest secret taken: 32 bytes, as horovodrun's key.
inline constexpr std::size_t k_min_secret_bytes = 32;

inline constexpr std::string_view k_signed_prefix = "hmac-sha256=";

// HMAC-SHA256 of `data` under `key` (OpenSSL), 32 raw bytes.
std::string hmac_sha256(std::string_view key, std::string_view data);

// The stored form of `value` under `key`.
std::string sign_record(std::string_view secret, std::string_view key, std::string_view value);

// The value of a stored record, or why it is rejected (one line naming the key).
// An empty secret accepts any record that is not signed.
std::expected<std::string, std::string> open_record(std::string_view secret, std::string_view key,
                                                    std::string_view stored);

// A record read where it may be missing or forged, both outcomes a protocol expects:
// its value, or which of the two (a rejected one the store warned about). Throws
// StoreError only for the unexpected: the store lost or refusing.
enum class NoRecord { Missing, Rejected };
std::expected<std::string, NoRecord> read_record(Store& store, const std::string& key);

// `inner` behind the guard. Each rejected key is warned about once per job
// (every clone shares the record of what was warned).
std::unique_ptr<Store> sign_store(std::unique_ptr<Store> inner, std::string secret);

// Lowercase hex and back (the secret travels over a --hosts lifeline as hex).
std::string to_hex(std::string_view bytes);
std::optional<std::string> from_hex(std::string_view hex);

}  // namespace ddprun
