// Store: the key-value service agents coordinate through. Production uses
// libtorch's c10d::TCPStore, reached through a plugin (libddprun_store.so)
// that is dlopen'ed only for multi-node jobs, so a single-node run never loads
// libtorch. The tests use MemoryStore (tests/support). Every call may block (network) and must be
// made off the agent's event loop; each has a bound (the store's timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/base/plugin_path.hpp"

namespace ddprun {

// Any store failure: timeout, connection lost, refused. what() is one line.
class StoreError : public std::runtime_error {
  public:
    // GivenUp: the store says the others gave this agent up (its etcd lease expired).
    enum class Kind { Timeout, Connection, GivenUp, Other };
    StoreError(Kind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}
    Kind kind() const { return m_kind; }

  private:
    Kind m_kind;
};

class Store {
  public:
    virtual ~Store() = default;
    virtual void set(const std::string& key, const std::string& value) = 0;
    // Blocks until the key exists or the store's timeout passes (StoreError Timeout).
    virtual std::string get(const std::string& key) = 0;
    virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
    // Sets `key` to `desired` if its current value is `expected` ("" = absent);
    // returns the value after the call (so the caller knows who won).
    virtual std::string compare_set(const std::string& key, const std::string& expected,
                                    const std::string& desired) = 0;
    // True if every key exists. Never blocks beyond one round trip.
    virtual bool check(const std::vector<std::string>& keys) = 0;
    // Blocks until every key exists, or `timeout` passes (StoreError Timeout).
    virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
    // Blocks until every key exists or `timeout` passes (StoreError Timeout), then
    // returns their values, in order: wait() and a get() of each in one call, which a
    // store may answer in fewer round trips (etcd: one transaction per 128 keys, and
    // the watch that sees a key written carries its value).
    virtual std::vector<std::string> wait_get(const std::vector<std::string>& keys,
                                              std::chrono::milliseconds timeout) {
        wait(keys, timeout);
        std::vector<std::string> values;
        values.reserve(keys.size());
        for (const auto& key : keys) values.push_back(get(key));
        return values;
    }
    // What claim() leaves: the claimed key's value after the call (`value` if this
    // caller won it), the counter's value after this caller's add (0 if it lost),
    // the value of each of `peeks` that the store read on the way and found, and
    // the store's revision the claim was made at where it has one (etcd), else 0.
    struct Claim {
        std::string holder;
        std::int64_t count = 0;
        std::vector<std::optional<std::string>> peeked;  // one per peek
        std::int64_t revision = 0;
    };
    // compare_set(key, "", value); if that won, set() each of `records` and
    // add(counter, 1). A rendezvous joiner does exactly this, and over etcd every
    // request costs the server about 0.3 ms of CPU (docs/scale.md): a store that
    // can do it in one atomic request (etcd: one transaction) overrides it, and
    // may then read `peeks` in the same request, which saves the caller a read
    // each. The keys and values are those the separate calls would have
    // written; the default reads nothing more.
    virtual Claim claim(const std::string& key, const std::string& value,
                        const std::vector<std::pair<std::string, std::string>>& records,
                        const std::string& counter, const std::vector<std::string>& peeks = {}) {
        Claim claimed{compare_set(key, "", value), 0, {}, 0};
        claimed.peeked.resize(peeks.size());
        if (claimed.holder != value) return claimed;
        for (const auto& [record_key, record] : records) set(record_key, record);
        claimed.count = add(counter, 1);
        return claimed;
    }
    // wait_get() of keys that a claim() at `revision` (Claim::revision) peeked
    // and did not find: a store with revisions (etcd) watches them from there,
    // one request instead of a read and a watch. Revision 0: wait_get().
    virtual std::vector<std::string> wait_get_after(const std::vector<std::string>& keys,
                                                    std::int64_t revision,
                                                    std::chrono::milliseconds timeout) {
        (void)revision;
        return wait_get(keys, timeout);
    }
    // A second connection to the same store, for use from another thread.
    virtual std::unique_ptr<Store> clone() = 0;
    // Whether cancel() ends a wait in progress (etcd). c10d's waits end only at their
    // timeout: wait in short slices there.
    virtual bool cancellable() const { return false; }
    // From another thread: ends a wait in progress at once (StoreError Timeout), and
    // every later call, where the store is cancellable.
    virtual void cancel() {}
};

// Whether every key exists within `timeout`: a wait that runs out is an outcome the
// protocol expects (false), not an exception; any other failure throws StoreError.
bool wait_for(Store& store, const std::vector<std::string>& keys,
              std::chrono::milliseconds timeout);

struct StoreOptions {
    std::string host;
    int port = 0;
    bool is_server = false;                    // this agent hosts the store (listens on port)
    std::chrono::milliseconds timeout{30000};  // bound of every operation, and of connecting
};

// Opens a TCPStore through the plugin. Errors (plugin or libtorch missing,
// port in use, cannot connect) are StoreError with a one-line message that
// names what to do.
std::unique_ptr<Store> open_tcp_store(const StoreOptions& options);

// True when the store plugin can be loaded (this build has libtorch).
bool tcp_store_available();

// True when a TCPStore client made with torch's defaults can start with the plugin's
// libtorch; false where the defaults ask for libuv and it has none (Debian's torch
// 2.x), or the plugin cannot be loaded. Loads the plugin; takes a few milliseconds.
bool tcp_store_defaults_start();

// Where open_tcp_store would load the plugin from, without loading it (for
// --version): locate_plugin() with $DDPRUN_STORE_PLUGIN (plugin_path.hpp).
PluginLocation locate_store_plugin();

// The libtorch version the plugin at `path` was built against ("2.14.1"), read from
// the file without loading it (the plugin carries k_store_plugin_torch_marker followed
// by its TORCH_VERSION); empty when the file cannot be read or carries none.
std::string store_plugin_torch_version(const std::string& path);
// The same from the plugin file's bytes (a MappedFile's).
std::string torch_version_in_store_plugin(std::string_view plugin_file);
inline constexpr std::string_view k_store_plugin_torch_marker =
    "ddprun-store-plugin built against libtorch ";

// The plugin's entry point, looked up with dlsym. The version is in the name so
// that a plugin left over from a build with a different Store cannot be used
// (v2: Store gained wait_get; v3: claim; v4: claim's peeks and revision, wait_get_after).
// On failure it returns null, sets *error_kind to a StoreError::Kind and writes
// a one-line message (NUL-terminated, truncated to error_len) to error.
inline constexpr const char* k_store_plugin_name = "libddprun_store.so";
inline constexpr const char* k_store_plugin_entry = "ddprun_open_tcp_store_v4";
using StorePluginEntry = Store* (*)(const char* host, int port, int is_server, long timeout_ms,
                                    int* error_kind, char* error, std::size_t error_len);

// The plugin's answer to whether a TCPStore made with c10d's defaults starts with its
// libtorch (1), or asks for a libuv server the build lacks (0). Looked up beside the
// entry; a plugin without it predates the question.
inline constexpr const char* k_store_plugin_defaults_start = "ddprun_tcp_store_defaults_start_v1";
using StorePluginDefaultsStart = int (*)();

}  // namespace ddprun
