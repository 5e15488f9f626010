// libddprun_store.so: libtorch's c10d::TCPStore behind ddprun::Store. It is a
// plugin that src/store.cpp dlopens only when a job spans nodes, so that
// ddprun itself never links libtorch and a single-node run never loads it.
//
// Everything c10d throws becomes a one-line StoreError here. The quirks of
// c10d 1.13 (Debian 12) this file works around (tests/unit/test_store.cpp
// checks each but the last):
//  - a get/wait that times out leaves its reply in flight, and the next request
//    on that connection reads the stale answer: after any failure the
//    connection is dropped and the next call opens a new one;
//  - the connect timeout is truncated to whole seconds (under 1 s fails at once);
//  - compareSet on a missing key with a non-empty expected value answers the
//    expected value, and it never wakes clients waiting for the key;
//  - wait() with a zero timeout waits forever;
//  - set() gets no reply, so another client may not see the value yet when
//    it returns;
//  - add() on a value that is not a number makes the server drop the connection;
//  - an endpoint that is not a store hangs the client (no answer, no bound) or
//    kills the process (a reset reaches c10d's own thread): probed first;
//  - a client retries a refused connect for its whole timeout: right while the
//    store's host starts, wrong once a store answered there (its host is gone;
//    ddprun never restarts a store), so a reconnect gets k_reconnect_window;
//  - it logs through glog to stderr, between ddprun's own one-line messages.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ddprun/base/duration_text.hpp>
#include <ddprun/base/tcp_connect.hpp>
#include <ddprun/base/text.hpp>
#include <ddprun/store/store.hpp>

#include "server_sockets.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/exception.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>

namespace {

using ddprun::duration_text;
using ddprun::StoreError;
using Kind = StoreError::Kind;

// The host's own connections go over loopback: the server listens on every
// address, and the name the other nodes use may not resolve to this host here.
constexpr const char* k_loopback = "127.0.0.1";
constexpr std::chrono::milliseconds k_forever = std::chrono::milliseconds::max();
// How long a connection to a store that answered before may be refused before the store
// counts as gone. Waiting out the whole read timeout (60 s by default) there held a
// surviving agent in its end of round long after the store's host had exited.
constexpr std::chrono::milliseconds k_reconnect_window = std::chrono::seconds(1);
// A connect window of one attempt: whether a store that dropped a connection is still there.
constexpr std::chrono::milliseconds k_one_attempt{0};
// What a user can do about an occupied port, in the flags they know.
constexpr const char* k_port_hint =
    "pick a free port with --rdzv_endpoint=HOST:PORT (or --master_port)";

std::vector<std::uint8_t> to_bytes(const std::string& text) {
    return {text.begin(), text.end()};
}
std::string to_string(const std::vector<std::uint8_t>& bytes) {
    return {bytes.begin(), bytes.end()};
}

// c10d messages can span lines and carry backtraces; a StoreError is one line.
std::string first_line(std::string_view text) {
    text = text.substr(0, text.find('\n'));
    constexpr std::size_t k_max = 300;
    if (text.size() > k_max) return std::string(text.substr(0, k_max)) + " [...]";
    return std::string(text);
}

std::string describe_keys(const std::vector<std::string>& keys) {
    if (keys.empty()) return "no keys";
    std::string text = "'" + keys.front() + "'";
    if (keys.size() > 1) text += " and " + std::to_string(keys.size() - 1) + " more";
    return text;
}

bool contains(std::string_view text, std::string_view word) {
    return text.find(word) != std::string_view::npos;
}

bool says_timeout(std::string_view message) {
    return contains(message, "Timeout") || contains(message, "timeout") ||
           contains(message, "timed out");
}

// The message and kind of the exception being handled. Must be called from a
// catch block.
std::pair<Kind, std::string> classify_current_exception() {
    try {
        throw;
#if TORCH_VERSION_MAJOR >= 2
        // 2.x: c10d's errors are c10::DistError's, so c10::Errors too: the specific
        // ones first.
    } catch (const c10d::TimeoutError& e) {
        return {Kind::Timeout, first_line(e.what_without_backtrace())};
    } catch (const c10::DistNetworkError& e) {
        std::string message = first_line(e.what_without_backtrace());
        return {says_timeout(message) ? Kind::Timeout : Kind::Connection, message};
#endif
        // On 2.x also a get or wait that ran out of time: a DistStoreError
        // ("wait timeout after 500ms, keys: ..."), not a TimeoutError.
    } catch (const c10::Error& e) {
        std::string message = first_line(e.what_without_backtrace());
        return {says_timeout(message) ? Kind::Timeout : Kind::Other, message};
#if TORCH_VERSION_MAJOR < 2
        // 1.13: c10d's own errors are std::runtime_errors, not c10::Errors.
    } catch (const c10d::TimeoutError& e) {
        return {Kind::Timeout, first_line(e.what())};
    } catch (const c10d::C10dError& e) {
        return {Kind::Connection, first_line(e.what())};
#endif
    } catch (const std::system_error& e) {
        int code = e.code().value();
        bool timeout = code == EAGAIN || code == EWOULDBLOCK || code == ETIMEDOUT;
        return {timeout ? Kind::Timeout : Kind::Connection, first_line(e.code().message())};
    } catch (const std::exception& e) {
        std::string message = first_line(e.what());
        if (says_timeout(message)) return {Kind::Timeout, message};
        if (contains(message, "Connection") || contains(message, "Broken pipe"))
            return {Kind::Connection, message};
        return {Kind::Other, message};
    } catch (...) {
        return {Kind::Other, "unknown error"};
    }
}

// c10d truncates the connect timeout to seconds; round up so that a short
// timeout still gets one real attempt.
std::chrono::milliseconds connect_timeout(std::chrono::milliseconds timeout) {
    auto seconds = (timeout.count() + 999) / 1000;
    return std::chrono::seconds(std::max<std::int64_t>(seconds, 1));
}

// torch 2.4 and later default to the libuv server, which Debian's torch (and other
// builds without libuv) lack: the store would not start there. The classic server
// is in every build and is the one this file's behaviour is tested against; it
// serves the few connections an agent per node makes. (A template, as a
// requires-expression outside one would be an error where the field is missing.)
template <class Options>
void use_the_classic_server(Options& options) {
    if constexpr (requires { options.useLibUV; }) options.useLibUV = false;
}

// Whether this libtorch's server takes a listening socket its caller made
// (TCPStoreOptions::masterListenFd, torch 2.x). A template, as use_the_classic_server.
template <class Options>
constexpr bool k_takes_a_listening_socket = requires(Options& options) {
    options.masterListenFd;
};

// What a user reads when the store cannot be hosted on `port`.
[[noreturn]] void throw_cannot_host(int port, bool port_in_use, const std::string& why) {
    if (port_in_use) {
        throw StoreError(Kind::Other, "cannot host the rendezvous store: port " +
                                          std::to_string(port) +
                                          " is already in use on this host; " + k_port_hint);
    }
    throw StoreError(Kind::Other, "cannot host the rendezvous store on port " +
                                      std::to_string(port) + ": " + why);
}

// Where the libtorch takes one, c10d's server gets a listening socket made here, so that
// every connection it accepts waits at most k_request_gap for a request's rest
// (server_sockets.hpp). Throws StoreError where the port cannot be listened on, always:
// torch 2.x's own bind ignores a taken port where TORCHELASTIC_USE_AGENT_STORE is set
// and MASTER_PORT names it, and its store is then a client of whatever listens there.
template <class Options>
void listen_for_the_server(Options& options) {
    if constexpr (k_takes_a_listening_socket<Options>) {
        auto listener = ddprun_plugin::listen_for_store(options.port, ddprun_plugin::k_request_gap);
        if (!listener) {
            throw_cannot_host(options.port, listener.error().error == EADDRINUSE,
                              listener.error().what);
        }
        // c10d checks that the socket is bound to options.port: port 0's choice.
        options.port = static_cast<std::uint16_t>(listener->port);
        // c10d's server owns it from here and closes it, when the TCPStore fails too: with
        // the classic server nothing before Socket::listenFromFd throws, and that wraps it
        // at once (after a getsockname, which cannot fail on a socket bound here). So it is
        // never closed here.
        options.masterListenFd = listener->fd.release();
    }
}

c10d::TCPStoreOptions tcp_options(int port, bool is_server, std::chrono::milliseconds timeout) {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = is_server;
    options.waitWorkers = false;
    options.timeout = connect_timeout(timeout);
    options.multiTenant = false;
    use_the_classic_server(options);
    return options;
}

class TcpStore final : public ddprun::Store {
  public:
    // Hosts the store (listening on every address) when is_server; connects
    // either way. Throws StoreError. `known_store`: a store answered there before
    // (a clone's), so a silent endpoint is a frozen store, not another program.
    TcpStore(std::string host, int port, bool is_server, std::chrono::milliseconds timeout,
             bool known_store = false)
        : m_host(std::move(host)), m_port(port), m_timeout(timeout), m_known_store(known_store) {
        if (is_server) {
            start_server();
            m_host = k_loopback;
        }
        std::lock_guard lock(m_mutex);
        connected(m_timeout);
        // Where c10d made the listening socket, a connection that completed before it had
        // its timeout was queued ahead of this client's, so the server has accepted it by
        // now (one queue, first come first served): it gets the timeout here.
        if constexpr (!k_takes_a_listening_socket<c10d::TCPStoreOptions>) {
            if (m_server) ddprun_plugin::bound_server_reads(m_port, ddprun_plugin::k_request_gap);
        }
    }

    ~TcpStore() override {
        // Close our connection before the server it talks to.
        m_client.reset();
        m_server.reset();
    }

    void set(const std::string& key, const std::string& value) override {
        run_again_if_cut_off("set", key, [&](c10d::TCPStore& client) {
            client.set(key, to_bytes(value));
            // c10d's set gets no reply. One round trip on the same connection
            // (the server serves it in order) makes the value visible to every
            // client by the time set returns, as the tests' MemoryStore's is.
            client.check({key});
        });
    }

    std::string get(const std::string& key) override {
        return run_again_if_cut_off(
            "get", key, [&](c10d::TCPStore& client) { return to_string(client.get(key)); });
    }

    std::int64_t add(const std::string& key, std::int64_t delta) override {
        try {
            auto request = [&](c10d::TCPStore& client) { return client.add(key, delta); };
            // Reading a counter may run twice; a change to one may not (it may have counted).
            if (delta == 0) return run_again_if_cut_off("add to", key, request);
            return run("add to", key, request);
        } catch (const StoreError& error) {
            if (error.kind() != Kind::Connection) throw;
            explain_failed_add(key);
            throw;
        }
    }

    std::string compare_set(const std::string& key, const std::string& expected,
                            const std::string& desired) override {
        return run_again_if_cut_off("compare_set", key, [&](c10d::TCPStore& client) {
            std::string result =
                to_string(client.compareSet(key, to_bytes(expected), to_bytes(desired)));
            bool ambiguous = !expected.empty() && result == expected;
            if (ambiguous && (expected != desired || !client.check({key}))) return std::string();
            if (result == desired && expected != desired) {
                // Wake the waiters compareSet does not wake. Safe for keys
                // that are only ever compare_set from absent, as ddprun's are.
                client.set(key, to_bytes(desired));
            }
            return result;
        });
    }

    bool check(const std::vector<std::string>& keys) override {
        if (keys.empty()) return true;
        return run_again_if_cut_off("check", keys.front(),
                                    [&](c10d::TCPStore& client) { return client.check(keys); });
    }

    void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
        if (keys.empty()) return;
        if (timeout.count() <= 0) {
            if (!check(keys)) throw_wait_timeout(keys, timeout);
            return;
        }
        // A wait that runs again waits for what is left of its timeout.
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        run_again_if_cut_off(
            "wait for", keys.front(),
            [&](c10d::TCPStore& client) {
                try {
                    client.wait(keys,
                                std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             deadline - std::chrono::steady_clock::now()),
                                         std::chrono::milliseconds(1)));
                } catch (const c10::Error& e) {
                    if (!says_timeout(e.what_without_backtrace())) throw;
                    throw_wait_timeout(keys, timeout);
                }
            },
            timeout);
    }

    std::unique_ptr<ddprun::Store> clone() override {
        return std::make_unique<TcpStore>(m_host, m_port, false, m_timeout, true);
    }

  private:
    // No client may hold the store by stopping halfway through a request
    // (server_sockets.hpp).
    void start_server() {
        auto options = tcp_options(m_port, true, m_timeout);
        listen_for_the_server(options);
        try {
            m_server = std::make_unique<c10d::TCPStore>(k_loopback, options);
        } catch (...) {
            auto [kind, message] = classify_current_exception();
            throw_cannot_host(m_port, contains(message, "Address already in use"), message);
        }
        // Port 0 asks the system for a free one; later connections need the real one.
        m_port = m_server->getPort();
        if constexpr (k_takes_a_listening_socket<c10d::TCPStoreOptions>) return;
        // The descriptor scan, only for a libtorch without masterListenFd (1.13), whose
        // server makes its listening socket itself.
        if (ddprun_plugin::bound_server_reads(m_port, ddprun_plugin::k_request_gap).listening == 0)
            throw_cannot_host(m_port, false,
                              "its listening socket is not among this process's descriptors "
                              "(is /proc mounted?)");
    }

    // Returns once a c10d store answers at m_host:m_port, or when nothing accepts
    // connections there by `deadline` (c10d then reports it). Throws StoreError if
    // something accepts but does not answer within `answer_within`, closes or resets
    // the connection, or answers nonsense: c10d 1.13 would wait for its answer without
    // a bound, or die of the reset on its own thread (std::terminate).
    void probe_store(std::chrono::milliseconds connect_window,
                     std::chrono::milliseconds answer_within) {
        // Each attempt as long as the kernel tries, as c10d's own connect.
        auto fd = ddprun::connect_tcp(m_host, m_port, std::nullopt, connect_window);
        if (!fd && fd.error() == ddprun::ConnectFailure::Unresolved)
            return;  // c10d reports the bad host
        if (!fd) {
            // c10d would try again for as long, one attempt a second.
            const std::string within =
                connect_window.count() > 0 ? " within " + duration_text(connect_window) : "";
            throw StoreError(Kind::Connection,
                             "cannot connect to the rendezvous store at " + endpoint() + within +
                                 " (nothing accepts connections there: is its host up?)");
        }
        auto unanswered = check_answers(fd->get(), answer_within);
        fd->reset();
        if (!unanswered) {
            m_known_store = true;
        } else if (m_known_store) {
            throw StoreError(unanswered->silent ? Kind::Timeout : Kind::Connection,
                             "rendezvous store at " + endpoint() + ": " + unanswered->why);
        } else {
            throw StoreError(Kind::Connection, "no rendezvous store at " + endpoint() + ": " +
                                                   unanswered->why +
                                                   "; is another program using port " +
                                                   std::to_string(m_port) + "? " + k_port_hint);
        }
    }

    // How a probe went unanswered: what went wrong, and whether it was silence.
    struct Unanswered {
        bool silent = false;
        std::string why;
    };

    // Sends c10d's CHECK request for one key on `fd` and reads the one-byte answer
    // (0 ready, 1 not ready), within `answer_within`. Nothing if it answered.
    std::optional<Unanswered> check_answers(int fd, std::chrono::milliseconds answer_within) const {
        // QueryType CHECK, the number of keys, then each key's length and bytes;
        // lengths are native 64-bit, as c10d's tcputil::sendValue writes them.
        // torch 2.x's server serves a connection only after a VALIDATE query with its
        // magic number, and its QueryType begins with VALIDATE, moving CHECK from 4 to 5
        // (c10d/store/TCPStoreBackend.hpp in 2.14; c10d's client does the same).
        std::string request;
#if TORCH_VERSION_MAJOR >= 2
        constexpr std::uint8_t k_validate = 0;
        constexpr std::uint32_t k_validation_magic = 0x3C85F7CE;
        constexpr std::uint8_t k_check = 5;
        request += static_cast<char>(k_validate);
        request.append(reinterpret_cast<const char*>(&k_validation_magic),
                       sizeof k_validation_magic);
#else
        constexpr std::uint8_t k_check = 4;
#endif
        const std::string key = "/ddprun/probe";
        const std::uint64_t count = 1;
        const std::uint64_t length = key.size();
        request += static_cast<char>(k_check);
        request.append(reinterpret_cast<const char*>(&count), sizeof count);
        request.append(reinterpret_cast<const char*>(&length), sizeof length);
        request += key;
        if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size())) {
            return Unanswered{
                false, std::string("it closed the connection (") + std::strerror(errno) + ")"};
        }
        pollfd pfd{fd, POLLIN, 0};
        int ready =
            ::poll(&pfd, 1,
                   static_cast<int>(std::clamp<std::int64_t>(answer_within.count(), 1, INT32_MAX)));
        if (ready == 0)
            return Unanswered{true, "it accepted the connection but did not answer within " +
                                        duration_text(answer_within)};
        std::uint8_t answer = 0xff;
        ssize_t got = ready < 0 ? -1 : ::recv(fd, &answer, 1, 0);
        if (got < 0)
            return Unanswered{
                false, std::string("it dropped the connection (") + std::strerror(errno) + ")"};
        if (got == 0) return Unanswered{false, "it closed the connection without answering"};
        if (answer > 1)
            return Unanswered{false, "it answered something that is not the store's protocol"};
        return std::nullopt;
    }

    // The live connection, opened if the last one failed; a new one must answer within
    // `answer_within`. Needs m_mutex.
    c10d::TCPStore& connected(std::chrono::milliseconds answer_within,
                              std::chrono::milliseconds connect_window = k_forever) {
        if (m_client) return *m_client;
        // Only a store that never answered here may still be starting (see the top of the file).
        if (m_known_store) connect_window = std::min(connect_window, k_reconnect_window);
        connect_window = std::min(connect_window, connect_timeout(m_timeout));
        // c10d's client sleeps a whole second after a refused connect; an agent that starts
        // a moment before the store's host would lose that second. Probing the port every
        // 10 ms first costs nothing when the host is up, and the probe's request tells a
        // store from another program on the port.
        probe_store(connect_window, std::min(answer_within, m_timeout));
        // The probe got an answer: a refusal now means the store has just gone.
        const auto c10d_window = connect_timeout(std::min(m_timeout, k_reconnect_window));
        try {
            m_client =
                std::make_unique<c10d::TCPStore>(m_host, tcp_options(m_port, false, c10d_window));
        } catch (...) {
            auto [kind, message] = classify_current_exception();
            throw StoreError(Kind::Connection,
                             "cannot connect to the rendezvous store at " + endpoint() +
                                 " within " + duration_text(c10d_window) + " (" + message + ")");
        }
        m_client->setTimeout(m_timeout);
        return *m_client;
    }

    // Runs one request; any failure drops the connection (see the top of the
    // file) and becomes a StoreError naming the operation and key. A request that
    // must reconnect first gets at most `answer_within` for the store to answer.
    template <class Request>
    auto run(const char* operation, const std::string& key, Request&& request,
             std::chrono::milliseconds answer_within = k_forever,
             std::chrono::milliseconds connect_window = k_forever)
        -> std::invoke_result_t<Request&, c10d::TCPStore&> {
        std::lock_guard lock(m_mutex);
        c10d::TCPStore& client = connected(answer_within, connect_window);
        try {
            return request(client);
        } catch (const StoreError&) {
            m_client.reset();
            throw;
        } catch (...) {
            m_client.reset();
            auto [kind, message] = classify_current_exception();
            std::string prefix = std::string("rendezvous store at ") + endpoint() + ": ";
            if (kind == Kind::Timeout) {
                throw StoreError(kind, prefix + "timed out after " + duration_text(m_timeout) +
                                           " trying to " + operation + " '" + key + "'");
            }
            if (kind == Kind::Connection) {
                throw StoreError(kind, prefix + "lost the connection (" + message + ") trying to " +
                                           operation + " '" + key + "'");
            }
            throw StoreError(kind, prefix + "cannot " + operation + " '" + key + "': " + message);
        }
    }

    // For requests that may run twice (every one but an add that changes a counter): the
    // server drops a connection of a store that is still there when
    //  - c10d 1.13's server wakes a key's waiters while it serves a write, and one of them
    //    has just closed its connection (ddprun drops a connection whose wait timed out):
    //    the send fails and the server drops the writer's connection instead;
    //  - this client stopped halfway through a request (frozen, cut off) for longer than
    //    the server waits for the rest (server_sockets.hpp): the request was never served.
    // A store that is still there accepts the first connection attempt and takes the
    // request again at once; one that is gone refuses it, and the error stands at once.
    template <class Request>
    auto run_again_if_cut_off(const char* operation, const std::string& key, Request&& request,
                              std::chrono::milliseconds answer_within = k_forever)
        -> std::invoke_result_t<Request&, c10d::TCPStore&> {
        try {
            return run(operation, key, request, answer_within);
        } catch (const StoreError& error) {
            if (error.kind() != Kind::Connection) throw;
        }
        return run(operation, key, request, answer_within, k_one_attempt);
    }

    [[noreturn]] void throw_wait_timeout(const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) {
        throw StoreError(Kind::Timeout, "rendezvous store at " + endpoint() + ": timed out after " +
                                            duration_text(timeout) + " waiting for " +
                                            describe_keys(keys));
    }

    // The server drops a client whose add() meets a value that is not a
    // number. Say so instead of blaming the network. Needs a live server.
    void explain_failed_add(const std::string& key) {
        std::string value;
        try {
            std::lock_guard lock(m_mutex);
            c10d::TCPStore& client = connected(m_timeout);
            if (!client.check({key})) return;
            value = to_string(client.get(key));
        } catch (...) {
            m_client.reset();
            return;
        }
        if (ddprun::to_integer(value)) return;
        if (value.size() > 40) value = value.substr(0, 40) + "...";
        throw StoreError(Kind::Other, "rendezvous store at " + endpoint() + ": cannot add to '" +
                                          key + "': it holds '" + value + "', not a number");
    }

    std::string endpoint() const {
        return m_host + ":" + std::to_string(m_port);
    }

    std::string m_host;
    int m_port;
    std::chrono::milliseconds m_timeout;
    bool m_known_store;                        // a store answered at this endpoint once
    std::unique_ptr<c10d::TCPStore> m_server;  // hosts the store; requests go through m_client
    std::unique_ptr<c10d::TCPStore> m_client;  // null after a failure until the next request
    std::mutex m_mutex;                        // one request at a time per connection
};

void copy_error(const std::string& message, char* error, std::size_t error_len) {
    if (error == nullptr || error_len == 0) return;
    std::size_t n = std::min(message.size(), error_len - 1);
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
}

// ddprun speaks for itself in one-line messages; c10d's glog lines stay off unless the
// user asks for them the way torch documents.
void quiet_c10d() {
    static std::once_flag quiet;
    std::call_once(quiet, [] {
        if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 4;
    });
}

// See ddprun_tcp_store_defaults_start_v1. (A template, as use_the_classic_server.)
template <class Options>
bool defaults_start(Options& options) {
    if constexpr (requires { options.useLibUV; }) {
        if (!options.useLibUV) return true;
        options.port = 0;
        options.isServer = true;
        options.waitWorkers = false;
        try {
            c10d::TCPStore probe(k_loopback, options);
        } catch (...) {
            return !contains(classify_current_exception().second, "libuv");
        }
    }
    return true;
}

}  // namespace

// Which libtorch this plugin was built against, for --version and for the message when
// that libtorch cannot be loaded; read from the file, never by loading it (store.cpp).
extern "C" __attribute__((visibility("default"), used)) const char ddprun_store_torch_version[] =
    "ddprun-store-plugin built against libtorch " TORCH_VERSION;

// Whether a TCPStore made with c10d's defaults starts with this libtorch: false where
// they ask for the libuv server and this build has none (Debian's torch 2.x). The
// workers' torch makes its client of the agent's store that way (torch 2.14's
// rendezvous.py drops use_libuv there), so the agent shares its store only where
// this holds (docs/environment.md). The check c10d makes comes before any socket;
// a throwaway server on a free loopback port is how to reach it, libtorch exports
// no other (is_libuv_tcpstore_backend_available is internal).
extern "C" __attribute__((visibility("default"))) int ddprun_tcp_store_defaults_start_v1() {
    static_assert(std::is_same_v<decltype(&ddprun_tcp_store_defaults_start_v1),
                                 ddprun::StorePluginDefaultsStart>);
    quiet_c10d();
    c10d::TCPStoreOptions options;
    return defaults_start(options) ? 1 : 0;
}

extern "C" __attribute__((visibility("default"))) ddprun::Store* ddprun_open_tcp_store_v4(
    const char* host, int port, int is_server, long timeout_ms, int* error_kind, char* error,
    std::size_t error_len) {
    static_assert(std::is_same_v<decltype(&ddprun_open_tcp_store_v4), ddprun::StorePluginEntry>);
    try {
        quiet_c10d();
        return new TcpStore(host != nullptr ? host : "", port, is_server != 0,
                            std::chrono::milliseconds(timeout_ms));
    } catch (const StoreError& e) {
        if (error_kind != nullptr) *error_kind = static_cast<int>(e.kind());
        copy_error(e.what(), error, error_len);
    } catch (const std::exception& e) {
        if (error_kind != nullptr) *error_kind = static_cast<int>(Kind::Other);
        copy_error(first_line(e.what()), error, error_len);
    } catch (...) {
        if (error_kind != nullptr) *error_kind = static_cast<int>(Kind::Other);
        copy_error("unknown error opening the rendezvous store", error, error_len);
    }
    return nullptr;
}
