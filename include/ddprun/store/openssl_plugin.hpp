// What ddprun does with OpenSSL, in a plugin of its own (libddprun_openssl.so)
// that is dlopen'ed on first use: the etcd backend's HTTP(S) connections and
// the job secret's HMAC-SHA256.
//
// Why a plugin: loading libcrypto.so.3 (4.5 MB, its constructors and 5000
// relocations) took about 1.7 ms of every start on the build machine, more
// than everything else ddprun does before main; a single-node job, --help and
// --version never touch it. Only an etcd job (HTTP through Beast, and TLS
// when asked) and a job with a secret load it, once per agent. The random
// bytes of a --hosts job's secret come from getrandom(2) and etcd's base64
// is ddprun's own (etcd_client.cpp), so nothing else needs OpenSSL.
//
// Across the boundary: C++ interfaces, since ddprun and the plugin are built
// from the same tree and share libstdc++; errors are StoreError (all inline),
// as the store plugin's are. The version in the entry's name keeps a plugin
// of a build with another interface from being used.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/base/plugin_path.hpp"
#include "ddprun/store/etcd_client.hpp"

namespace ddprun {

// The members of one etcd cluster over HTTP/1.1 (https with EtcdOptions::tls):
// one connection at a time, kept alive, a member that fails or does not answer
// within its share of the call's time skipped for the next; a TLS refusal or a
// plain request to an https member that every member repeats is the answer.
// Throws StoreError: Connection when no member answers, Other for a refusal,
// Timeout once cancelled.
class EtcdTransport {
  public:
    using Clock = std::chrono::steady_clock;
    struct Answer {
        unsigned status = 0;
        std::string body;
        std::string endpoint;  // the member that gave it
    };
    // How a stream() ended: `on_line` returned true (Stopped), the deadline
    // passed (TimedOut), or a member answered an HTTP error other than "no
    // leader" (Refused: its status, body and endpoint).
    struct StreamEnd {
        enum class Kind { Stopped, TimedOut, Refused };
        Kind kind = Kind::TimedOut;
        unsigned status = 0;
        std::string body;
        std::string endpoint;
    };

    virtual ~EtcdTransport() = default;
    // POSTs `body` to `path`; `token`: the Authorization header ("" for none).
    // 502-504 (an election) is asked again of the next member after a pause.
    virtual Answer post(const std::string& path, const std::string& body, const std::string& token,
                        Clock::time_point deadline) = 0;
    // POSTs on a connection of its own and hands each line of an answer that
    // never ends (a watch) to `on_line` as it arrives, until it returns true
    // or the deadline passes; a member that goes away mid-stream is replaced
    // by the next one, asked again.
    virtual StreamEnd stream(const std::string& path, const std::string& body,
                             const std::string& token, Clock::time_point deadline,
                             const std::function<bool(const std::string& line)>& on_line) = 0;
    // From another thread: ends a call in progress at once, and every later one.
    virtual void cancel() = 0;
    // The member answering now ("127.0.0.1:2379").
    virtual std::string current_endpoint() const = 0;
};

class OpenSslPlugin {
  public:
    // HMAC-SHA256 of `data` under `key`, 32 raw bytes.
    virtual std::string hmac_sha256(std::string_view key, std::string_view data) const = 0;
    // See check_tls_files (etcd_client.hpp).
    virtual std::optional<std::string> check_tls_files(const EtcdTls& tls) const = 0;
    // The members of `options.endpoints`; throws StoreError Other when the TLS
    // files cannot be used (one line naming the --rdzv_conf key).
    virtual std::unique_ptr<EtcdTransport> etcd_transport(const EtcdOptions& options) const = 0;

  protected:
    ~OpenSslPlugin() = default;  // the plugin's own, never deleted through this
};

inline constexpr const char* k_openssl_plugin_name = "libddprun_openssl.so";
inline constexpr const char* k_openssl_plugin_entry = "ddprun_openssl_plugin_v1";
using OpenSslPluginEntry = const OpenSslPlugin* (*)();

// The plugin, loaded on the first call. Throws StoreError Other, one line
// saying what is missing and what to do, when it cannot be loaded.
const OpenSslPlugin& openssl_plugin();

// Where openssl_plugin() loads it from, without loading it (for --version):
// locate_plugin() with $DDPRUN_OPENSSL_PLUGIN.
PluginLocation locate_openssl_plugin();

}  // namespace ddprun
