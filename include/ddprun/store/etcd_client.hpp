// EtcdClient: calls to etcd's v3 API through its JSON gateway (/v3/kv/range,
// /v3/kv/put, /v3/kv/txn, /v3/watch, ...), one HTTP/1.1 connection at a time,
// for the etcd rendezvous backend (etcd_store.hpp).
//
// Why the JSON gateway over Boost.Beast, and not gRPC: Beast is already part
// of the Boost the project depends on, the gateway is served by every etcd
// 3.4+ on its client port, and it keeps the agent free of gRPC's and
// protobuf's start-up cost and memory (the point of the backend is an agent
// that costs what a single-node one does). nlohmann-json reads the answers;
// no HTTP is parsed by hand.
//
// The HTTP(S) connections are the OpenSSL plugin's (EtcdTransport in
// openssl_plugin.hpp, dlopen'ed when the first client is made): TLS through
// Beast's ssl_stream over OpenSSL, which single-node jobs never load.
//
// Authentication: with a user, the client asks /v3/auth/authenticate for a
// token and sends it, as the gateway expects, as the bare value of the
// Authorization header (no "Bearer"). etcd forgets a simple token after
// --auth-token-ttl without use: an "invalid auth token" answer makes the
// client authenticate again, once, and repeat the request. The token is
// shared by every client made from the same options, so an agent
// authenticates once, not once per connection (a bcrypt check on etcd each).
//
// Several endpoints are members of one etcd cluster: a member that refuses
// the connection, fails or does not answer within the call's bound is
// skipped for the next one. Errors are StoreError (store.hpp): Connection when
// no member answers, Timeout when a watch saw nothing within its bound, Other
// when etcd refused the request.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/base/ports.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

// https: etcd's certificate is checked against `ca_cert` (the system's CAs
// when empty) and must name the endpoint's host or IP address; `cert` and
// `key`, when given, are the client's certificate (mutual TLS).
struct EtcdTls {
    std::string ca_cert;
    std::string cert;
    std::string key;
};

// The token etcd handed out for a user, shared by the clients of one agent.
struct EtcdToken {
    std::mutex mutex;
    bool known = false;  // authenticated once
    std::string value;   // what to send; empty when etcd has authentication off
};

struct EtcdCredentials {
    std::string user;
    std::string password;
    // Copies share it (see above).
    std::shared_ptr<EtcdToken> token = std::make_shared<EtcdToken>();
};

struct EtcdOptions {
    std::vector<Endpoint> endpoints;               // members of one cluster
    std::chrono::milliseconds timeout{30000};      // each call, connecting included
    std::optional<EtcdTls> tls{};                  // https; none: plain http
    std::optional<EtcdCredentials> credentials{};  // etcd user and password
    // Once a client made from these options (or a copy of them) has reached etcd, a
    // call that finds no member answering (refused, unreachable: etcd restarting, a
    // link down for a moment) tries again for this long, within its timeout; 0: not.
    // Before that first answer a wrong endpoint is a mistake, reported at once.
    std::chrono::milliseconds outage_grace{0};
    std::shared_ptr<std::atomic<bool>> reached = std::make_shared<std::atomic<bool>>(false);
};

// Loads the CA, the client certificate and its key as a connection would,
// and says in one line what is wrong with them (unreadable, not PEM, a key
// that is not the certificate's), naming --rdzv_conf's key and the path.
// Throws StoreError when the OpenSSL plugin cannot be loaded.
std::optional<std::string> check_tls_files(const EtcdTls& tls);

class EtcdTransport;

class EtcdClient {
  public:
    // Throws StoreError Other: no endpoint, TLS files that cannot be used, or
    // an OpenSSL plugin that cannot be loaded.
    explicit EtcdClient(EtcdOptions options);
    ~EtcdClient();
    EtcdClient(const EtcdClient&) = delete;
    EtcdClient& operator=(const EtcdClient&) = delete;

    // POSTs `body` to `path` (e.g. "/v3/kv/range") on the current member, the
    // next ones if it fails, and returns the answer. Throws StoreError.
    nlohmann::json call(const std::string& path, const nlohmann::json& body);

    // Watches `key` (raw, not base64; to `range_end`, exclusive, if not empty)
    // from `start_revision` on: returns the key-value of the first put of a key
    // in it (as the gateway sends it: key and value base64), or throws
    // StoreError Timeout at `deadline`.
    nlohmann::json watch_for_put(const std::string& key, const std::string& range_end,
                                 std::int64_t start_revision,
                                 std::chrono::steady_clock::time_point deadline);

    // Watches `key` (to `range_end`, exclusive, for a prefix; empty: the key
    // alone) from `start_revision` on, until the first events arrive or
    // `deadline` passes (then no events). Throws StoreError when no member answers.
    struct Events {
        std::vector<nlohmann::json> events;  // as the gateway sends them (type, kv)
        std::int64_t revision = 0;           // the highest mod revision among them
    };
    Events watch_events(const std::string& key, const std::string& range_end,
                        std::int64_t start_revision,
                        std::chrono::steady_clock::time_point deadline);

    // From another thread: ends a call or watch in progress at once (it throws
    // StoreError Timeout), and every later one. For closing an agent.
    void cancel();

    // The member answering now ("127.0.0.1:2379"), for messages.
    std::string current_endpoint() const;
    const EtcdOptions& options() const { return m_options; }

  private:
    // The token to send ("" without a user), authenticating first if needed.
    // `refused`: the token etcd just refused, replaced unless another client
    // of the agent did so already.
    std::string token(std::chrono::steady_clock::time_point deadline,
                      const std::optional<std::string>& refused = std::nullopt);
    // `attempt` (one request to the members), again while none answers, as long as
    // m_options.outage_grace allows (see there).
    template <class Attempt>
    auto riding_outage(std::chrono::steady_clock::time_point deadline, Attempt attempt);

    EtcdOptions m_options;
    // The members and the connection (one thread at a time; cancel() from any).
    std::unique_ptr<EtcdTransport> m_transport;
};

// A key-value's mod revision (the gateway writes int64 as a string).
std::int64_t revision_of(const nlohmann::json& kv);
// An int64 field of an answer (the gateway writes int64 as a string), 0 if absent.
std::int64_t etcd_int64(const nlohmann::json& object, const char* name);
// The revision in an answer's header, 0 if none.
std::int64_t header_revision(const nlohmann::json& answer);

// base64, as the gateway carries keys and values.
std::string etcd_base64(const std::string& raw);
std::string etcd_unbase64(const std::string& text);

}  // namespace ddprun
