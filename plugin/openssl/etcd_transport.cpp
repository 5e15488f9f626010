// The etcd members over HTTP/1.1 or HTTPS through Boost.Beast (see
// EtcdTransport in openssl_plugin.hpp and EtcdClient in etcd_client.hpp).
//
// Why TLS through Beast's ssl_stream over OpenSSL: the same Beast code then
// speaks HTTP over TCP or over TLS (only the stream type differs), OpenSSL is
// the library the distribution keeps patched, and certificate-chain and
// host-name checks are OpenSSL's own (X509_VERIFY_PARAM), so a refusal names
// the problem in OpenSSL's words ("unable to get local issuer certificate",
// "IP address mismatch"). No TLS is written here; etcd_tls.hpp holds the
// context and the messages.
#include "etcd_transport.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "etcd_tls.hpp"
#include "store/etcd_answers.hpp"

namespace ddprun {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using Clock = std::chrono::steady_clock;

// The pause before asking again when etcd answers that it has no leader (an
// election takes about a second with etcd's defaults).
constexpr std::chrono::milliseconds k_election_pause{100};

std::string describe(const Endpoint& endpoint) {
    return fmt::format("{}:{}", endpoint.host, endpoint.port);
}

bool no_leader(unsigned status) {
    return status == 502 || status == 503 || status == 504;
}

void election_pause(Clock::time_point deadline) {
    std::this_thread::sleep_for(
        std::min<Clock::duration>(k_election_pause, deadline - Clock::now()));
}

struct Connection {
    Connection(asio::io_context& context, ssl::context* tls, const std::atomic<bool>& stop)
        : io(context), cancelled(&stop) {
        if (tls != nullptr)
            secure.emplace(context, *tls);
        else
            plain.emplace(context);
    }
    asio::io_context& io;
    // One of the two: the stream type is all that differs between http and https.
    std::optional<beast::tcp_stream> plain;
    std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
    beast::flat_buffer buffer;
    std::string endpoint;   // "host:port"
    bool answered = false;  // an answer came back on it already (it is a kept-alive one)

    // The TCP stream underneath, which carries the operations' bound.
    beast::tcp_stream& tcp() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

    // Runs `operation(stream, done)` on whichever stream this connection has.
    template <class Operation>
    beast::error_code transfer(Operation operation) {
        if (secure) return run([&](auto done) { operation(*secure, std::move(done)); });
        return run([&](auto done) { operation(*plain, std::move(done)); });
    }

    // Runs one operation to its end. Beast bounds only asynchronous operations
    // (stream.expires_at): each is started, then run on this connection's own
    // io_context, so a member that never answers costs the call's bound, no more.
    template <class Start>
    beast::error_code run(Start start) {
        beast::error_code result = asio::error::operation_aborted;
        start([&result](beast::error_code ec, auto&&...) { result = ec; });
        io.restart();
        // cancel() stops the io_context: run() returns with the handler not run.
        if (!cancelled->load()) io.run();
        return result;
    }
    const std::atomic<bool>* cancelled;
};

class BeastTransport final : public EtcdTransport {
  public:
    explicit BeastTransport(const EtcdOptions& options)
        : m_endpoints(options.endpoints),
          m_tls_files(options.tls),
          m_timeout(options.timeout),
          m_reached(options.reached) {
        if (m_tls_files) {
            try {
                m_tls = make_tls_context(*m_tls_files);
            } catch (const std::runtime_error& error) {
                throw StoreError(StoreError::Kind::Other, error.what());
            }
        }
    }
    ~BeastTransport() override {
        // The connection first: its socket belongs to the io_context.
        m_connection.reset();
    }
    BeastTransport(const BeastTransport&) = delete;
    BeastTransport& operator=(const BeastTransport&) = delete;

    Answer post(const std::string& path, const std::string& body, const std::string& token,
                Clock::time_point deadline) override;
    StreamEnd stream(const std::string& path, const std::string& body, const std::string& token,
                     Clock::time_point deadline,
                     const std::function<bool(const std::string&)>& on_line) override;

    void cancel() override {
        m_cancelled = true;
        m_io.stop();
    }

    std::string current_endpoint() const override {
        return describe(m_endpoints[m_current % m_endpoints.size()]);
    }

  private:
    void throw_if_cancelled() const {
        if (m_cancelled) throw StoreError(StoreError::Kind::Timeout, "the etcd call was cancelled");
    }
    void next_member() { m_current = (m_current + 1) % m_endpoints.size(); }
    // A connection to the first member that takes one; nullptr when the call's time ran
    // out before any member was tried. Throws when every member failed or refused.
    std::unique_ptr<Connection> connect_any(Clock::time_point deadline);
    std::string tls_failure_of(Connection& c, const beast::error_code& ec, bool handshake) const {
        return tls_failure(c.endpoint, ec, c.secure->native_handle(), *m_tls_files, handshake);
    }
    http::request<http::string_body> request(const Connection& c, const std::string& path,
                                             const std::string& body,
                                             const std::string& token) const;

    std::vector<Endpoint> m_endpoints;
    std::optional<EtcdTls> m_tls_files;
    std::chrono::milliseconds m_timeout;
    asio::io_context m_io;
    std::unique_ptr<ssl::context> m_tls;  // https only
    std::atomic<bool> m_cancelled{false};
    std::size_t m_current = 0;  // the member tried first
    std::unique_ptr<Connection> m_connection;
    // Set once a client made from the same options reached etcd: from then on a member
    // that hangs up is going down or starting (etcd killed mid-call, restarted), not
    // one that serves https.
    std::shared_ptr<std::atomic<bool>> m_reached;
};

// What a call that reached no member says; `errors`: what each member did.
StoreError no_etcd_answers(const std::string& errors) {
    return StoreError(StoreError::Kind::Connection,
                      fmt::format("no etcd answers at --rdzv_endpoint ({})",
                                  errors.empty() ? "timed out" : errors));
}

// Tries each member once, from the current one on, sharing what is left of
// the call's time between those not yet tried. Over https the handshake is
// part of connecting: a member whose certificate is refused (or that refuses
// ours) is skipped like one that is down, and if none is left the TLS
// refusal is the error, not "no etcd answers". A call whose time ran out
// before any member was tried is the caller's to judge: a watch's short slice
// on a loaded machine is a watch that saw nothing yet, not an etcd gone (an
// elastic leader whose 1 ms wait was spent before it connected took it for
// the store lost and ended the job).
std::unique_ptr<Connection> BeastTransport::connect_any(Clock::time_point deadline) {
    const std::size_t count = m_endpoints.size();
    std::string errors;
    std::string refusals;  // TLS refusals, each a whole line
    for (std::size_t tried = 0; tried < count; ++tried) {
        throw_if_cancelled();
        const std::size_t index = (m_current + tried) % count;
        const Endpoint& endpoint = m_endpoints[index];
        auto left = deadline - Clock::now();
        if (left <= Clock::duration::zero()) break;
        auto connection = std::make_unique<Connection>(m_io, m_tls.get(), m_cancelled);
        Connection& c = *connection;
        c.endpoint = describe(endpoint);
        beast::error_code ec;
        asio::ip::tcp::resolver resolver(c.io);
        auto addresses = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
        if (!ec) {
            c.tcp().expires_after(left / static_cast<long>(count - tried));
            ec = c.run([&](auto done) { c.tcp().async_connect(addresses, std::move(done)); });
        }
        std::string problem = ec ? ec.message() : "";
        if (!ec && c.secure) {
            std::string refused;
            if (!expect_host(c.secure->native_handle(), endpoint.host, refused))
                throw StoreError(StoreError::Kind::Other,
                                 fmt::format("etcd at {}: {}", c.endpoint, refused));
            ec = c.run([&](auto done) {
                c.secure->async_handshake(ssl::stream_base::client, std::move(done));
            });
            if (ec && (is_tls_refusal(ec) || is_hang_up(ec))) {
                refusals += (refusals.empty() ? "" : "; ") + tls_failure_of(c, ec, true);
                continue;
            }
            if (ec) problem = "TLS handshake failed: " + ec.message();
        }
        if (!ec) {
            m_current = index;
            return connection;
        }
        errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", describe(endpoint), problem);
    }
    next_member();
    if (!refusals.empty()) throw StoreError(StoreError::Kind::Other, refusals);
    if (errors.empty()) return nullptr;  // no member tried: the time ran out before
    throw no_etcd_answers(errors);
}

http::request<http::string_body> BeastTransport::request(const Connection& c,
                                                         const std::string& path,
                                                         const std::string& body,
                                                         const std::string& token) const {
    http::request<http::string_body> request{http::verb::post, path, 11};
    request.set(http::field::host, c.endpoint);
    request.set(http::field::content_type, "application/json");
    if (!token.empty()) request.set(http::field::authorization, token);
    request.body() = body;
    request.prepare_payload();
    return request;
}

EtcdTransport::Answer BeastTransport::post(const std::string& path, const std::string& body,
                                           const std::string& token, Clock::time_point deadline) {
    const std::size_t count = m_endpoints.size();
    std::string errors;
    std::size_t refused = 0;  // members in a row that refused at the TLS level, or hung up
    for (std::size_t attempt = 0; Clock::now() < deadline; ++attempt) {
        throw_if_cancelled();
        if (!m_connection) m_connection = connect_any(deadline);
        if (!m_connection) throw no_etcd_answers({});
        Connection& c = *m_connection;
        auto sent = request(c, path, body, token);
        sent.keep_alive(true);
        http::response<http::string_body> response;
        beast::error_code ec;
        // Each member gets its share of the call's time, so that one that hangs (frozen,
        // cut off) leaves time for the others.
        const long share = attempt < count ? static_cast<long>(count - attempt) : 1;
        c.tcp().expires_after((deadline - Clock::now()) / share);
        ec = c.transfer(
            [&](auto& stream, auto done) { http::async_write(stream, sent, std::move(done)); });
        if (!ec)
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read(stream, c.buffer, response, std::move(done));
            });
        if (ec) {
            // This member failed or does not answer: the next one, within the call's time.
            // But a refusal that every member repeats is the answer: TLS 1.3 sends etcd's
            // verdict on the client certificate with the first answer, and an etcd that
            // serves https hangs up on a plain http request.
            std::string problem = fmt::format("{}: {}", c.endpoint, ec.message());
            if (c.secure && is_tls_refusal(ec)) {
                problem = tls_failure_of(c, ec, false);
                ++refused;
            } else if (!c.secure && !c.answered && !(m_reached && m_reached->load()) &&
                       (ec == http::error::end_of_stream || is_hang_up(ec))) {
                problem = fmt::format(
                    "etcd at {} hung up without an answer (if it serves https, add --rdzv_conf "
                    "protocol=https,ca_cert=PATH)",
                    c.endpoint);
                ++refused;
            } else {
                refused = 0;
            }
            errors += (errors.empty() ? "" : "; ") + problem;
            m_connection.reset();
            next_member();
            if (refused >= count) throw StoreError(StoreError::Kind::Other, problem);
            continue;
        }
        c.answered = true;
        Answer answer{response.result_int(), std::move(response.body()), c.endpoint};
        if (!response.keep_alive()) m_connection.reset();
        if (no_leader(answer.status)) {
            // Unavailable or timed out: the cluster is electing a leader, or this member
            // lost it. Another member, after a pause, within the call's time.
            errors = refusal(answer.endpoint, answer.status, answer.body);
            m_connection.reset();
            next_member();
            election_pause(deadline);
            continue;
        }
        return answer;
    }
    throw StoreError(StoreError::Kind::Connection,
                     fmt::format("no etcd member answered within {} ({})", duration_text(m_timeout),
                                 errors.empty() ? "timed out" : errors));
}

EtcdTransport::StreamEnd BeastTransport::stream(
    const std::string& path, const std::string& body, const std::string& token,
    Clock::time_point deadline, const std::function<bool(const std::string&)>& on_line) {
    while (Clock::now() < deadline) {
        throw_if_cancelled();
        auto connection = connect_any(deadline);
        if (!connection) break;  // the deadline passed: TimedOut
        Connection& c = *connection;
        auto sent = request(c, path, body, token);
        http::response_parser<http::string_body> parser;
        parser.body_limit(boost::none);
        beast::error_code ec;
        c.tcp().expires_at(deadline);
        ec = c.transfer(
            [&](auto& stream, auto done) { http::async_write(stream, sent, std::move(done)); });
        if (!ec)
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read_header(stream, c.buffer, parser, std::move(done));
            });
        if (ec && c.secure && is_tls_refusal(ec))
            throw StoreError(StoreError::Kind::Other, tls_failure_of(c, ec, false));
        if (!ec && parser.get().result() != http::status::ok) {
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read(stream, c.buffer, parser, std::move(done));
            });
            const unsigned status = parser.get().result_int();
            if (no_leader(status)) {  // as in post()
                next_member();
                election_pause(deadline);
                continue;
            }
            return {StreamEnd::Kind::Refused, status, parser.get().body(), c.endpoint};
        }
        // One message per line, handed over as each line is complete.
        std::size_t parsed = 0;
        while (!ec && !parser.is_done()) {
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read_some(stream, c.buffer, parser, std::move(done));
            });
            const std::string& text = parser.get().body();
            for (auto newline = text.find('\n', parsed); newline != std::string::npos;
                 newline = text.find('\n', parsed)) {
                std::string line = text.substr(parsed, newline - parsed);
                parsed = newline + 1;
                if (on_line(line)) return {StreamEnd::Kind::Stopped, 200, {}, c.endpoint};
            }
        }
        throw_if_cancelled();
        if (ec == beast::error::timeout) break;
        if (c.secure && is_tls_refusal(ec))
            throw StoreError(StoreError::Kind::Other, tls_failure_of(c, ec, false));
        // The member went away mid-stream: another one, asked again.
        next_member();
    }
    return {};
}

}  // namespace

std::unique_ptr<EtcdTransport> make_beast_transport(const EtcdOptions& options) {
    return std::make_unique<BeastTransport>(options);
}

}  // namespace ddprun
