// Calls to etcd's v3 JSON gateway over Boost.Beast (see etcd_client.hpp).
#include "ddprun/etcd_client.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <thread>

#include <fmt/format.h>

#include "ddprun/text.hpp"
#include "etcd_answers.hpp"
#include "etcd_tls.hpp"

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The pause before asking again when etcd answers that it has no leader (an
// election takes about a second with etcd's defaults).
constexpr std::chrono::milliseconds k_election_pause{100};

std::string describe(const Endpoint& endpoint) {
    return fmt::format("{}:{}", endpoint.host, endpoint.port);
}

}  // namespace

std::int64_t etcd_int64(const json& object, const char* name) {
    if (!object.is_object() || !object.contains(name)) return 0;
    const json& value = object[name];
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) return to_integer(value.get<std::string>()).value_or(0);
    return 0;
}

std::int64_t revision_of(const json& kv) {
    return etcd_int64(kv, "mod_revision");
}

std::int64_t header_revision(const json& answer) {
    return answer.contains("header") ? etcd_int64(answer["header"], "revision") : 0;
}

std::string etcd_base64(const std::string& raw) {
    std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(raw.data()),
                            static_cast<int>(raw.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::string etcd_unbase64(const std::string& text) {
    if (text.empty()) return {};
    std::string out(3 * (text.size() / 4) + 3, '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(text.data()),
                            static_cast<int>(text.size()));
    if (n < 0) throw StoreError(StoreError::Kind::Other, "etcd sent a value that is not base64");
    // EVP_DecodeBlock counts the padding as zero bytes.
    std::size_t padding = 0;
    for (auto it = text.rbegin(); it != text.rend() && *it == '='; ++it) ++padding;
    out.resize(static_cast<std::size_t>(n) - std::min<std::size_t>(padding, 2));
    return out;
}

struct EtcdClient::Loop {
    asio::io_context io;
    std::unique_ptr<ssl::context> tls;  // https only
};

struct EtcdClient::Connection {
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

EtcdClient::EtcdClient(EtcdOptions options)
    : m_options(std::move(options)), m_loop(std::make_unique<Loop>()) {
    if (m_options.endpoints.empty())
        throw StoreError(StoreError::Kind::Other, "no etcd endpoint given (--rdzv_endpoint)");
    if (m_options.tls) {
        try {
            m_loop->tls = make_tls_context(*m_options.tls);
        } catch (const std::runtime_error& error) {
            throw StoreError(StoreError::Kind::Other, error.what());
        }
    }
}

EtcdClient::~EtcdClient() {
    // Connections first: their sockets belong to the loop's io_context.
    m_connection.reset();
}

void EtcdClient::throw_if_cancelled() const {
    if (m_cancelled) throw StoreError(StoreError::Kind::Timeout, "the etcd call was cancelled");
}

void EtcdClient::cancel() {
    m_cancelled = true;
    m_loop->io.stop();
}

std::string EtcdClient::current_endpoint() const {
    return describe(m_options.endpoints[m_current % m_options.endpoints.size()]);
}

// Tries each member once, from the current one on, sharing what is left of
// the call's time between those not yet tried. Over https the handshake is
// part of connecting: a member whose certificate is refused (or that refuses
// ours) is skipped like one that is down, and if none is left the TLS
// refusal is the error, not "no etcd answers".
std::unique_ptr<EtcdClient::Connection> EtcdClient::connect_any(Clock::time_point deadline) {
    const std::size_t count = m_options.endpoints.size();
    std::string errors;
    std::string refusals;  // TLS refusals, each a whole line
    for (std::size_t tried = 0; tried < count; ++tried) {
        throw_if_cancelled();
        const std::size_t index = (m_current + tried) % count;
        const Endpoint& endpoint = m_options.endpoints[index];
        auto left = deadline - Clock::now();
        if (left <= Clock::duration::zero()) break;
        auto connection = std::make_unique<Connection>(m_loop->io, m_loop->tls.get(), m_cancelled);
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
                refusals +=
                    (refusals.empty() ? "" : "; ") +
                    tls_failure(c.endpoint, ec, c.secure->native_handle(), *m_options.tls, true);
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
    m_current = (m_current + 1) % count;
    if (!refusals.empty()) throw StoreError(StoreError::Kind::Other, refusals);
    throw StoreError(StoreError::Kind::Connection,
                     fmt::format("no etcd answers at --rdzv_endpoint ({})",
                                 errors.empty() ? "timed out" : errors));
}

EtcdClient::Answer EtcdClient::post(const std::string& path, const std::string& body,
                                    const std::string& token, Clock::time_point deadline) {
    const std::size_t count = m_options.endpoints.size();
    std::string errors;
    std::size_t refused = 0;  // members in a row that refused at the TLS level, or hung up
    for (std::size_t attempt = 0; Clock::now() < deadline; ++attempt) {
        throw_if_cancelled();
        if (!m_connection) m_connection = connect_any(deadline);
        Connection& c = *m_connection;
        http::request<http::string_body> request{http::verb::post, path, 11};
        request.set(http::field::host, c.endpoint);
        request.set(http::field::content_type, "application/json");
        if (!token.empty()) request.set(http::field::authorization, token);
        request.keep_alive(true);
        request.body() = body;
        request.prepare_payload();
        http::response<http::string_body> response;
        beast::error_code ec;
        // Each member gets its share of the call's time, so that one that hangs (frozen,
        // cut off) leaves time for the others.
        const long share = attempt < count ? static_cast<long>(count - attempt) : 1;
        c.tcp().expires_after((deadline - Clock::now()) / share);
        ec = c.transfer(
            [&](auto& stream, auto done) { http::async_write(stream, request, std::move(done)); });
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
                problem =
                    tls_failure(c.endpoint, ec, c.secure->native_handle(), *m_options.tls, false);
                ++refused;
            } else if (!c.secure && !c.answered &&
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
            m_current = (m_current + 1) % count;
            if (refused >= count) throw StoreError(StoreError::Kind::Other, problem);
            continue;
        }
        c.answered = true;
        Answer answer{response.result_int(), std::move(response.body()), c.endpoint};
        if (!response.keep_alive()) m_connection.reset();
        if (answer.status == 502 || answer.status == 503 || answer.status == 504) {
            // Unavailable or timed out: the cluster is electing a leader, or this member
            // lost it. Another member, after a pause, within the call's time.
            errors = refusal(answer.endpoint, answer.status, answer.body);
            m_connection.reset();
            m_current = (m_current + 1) % count;
            std::this_thread::sleep_for(
                std::min<Clock::duration>(k_election_pause, deadline - Clock::now()));
            continue;
        }
        return answer;
    }
    throw StoreError(StoreError::Kind::Connection,
                     fmt::format("no etcd member answered within {} ms ({})",
                                 m_options.timeout.count(), errors.empty() ? "timed out" : errors));
}

json EtcdClient::call(const std::string& path, const json& body) {
    const auto deadline = Clock::now() + m_options.timeout;
    const std::string text = body.dump();
    std::string sent = token(deadline);
    Answer answer = post(path, text, sent, deadline);
    if (m_options.credentials && answer.status != 200 &&
        token_refused(answer.status, answer.body)) {
        // A new token, once: a second refusal is etcd's answer.
        sent = token(deadline, sent);
        answer = post(path, text, sent, deadline);
    }
    auto parsed = json::parse(answer.body, nullptr, false);
    if (answer.status != 200 || !parsed.is_object())
        throw StoreError(StoreError::Kind::Other,
                         refusal(answer.endpoint, answer.status, answer.body,
                                 m_options.credentials ? m_options.credentials->user : ""));
    return parsed;
}

json EtcdClient::watch_for_put(const std::string& key, const std::string& range_end,
                               std::int64_t start_revision, Clock::time_point deadline) {
    for (std::int64_t from = start_revision; Clock::now() < deadline;) {
        auto batch = watch_events(key, range_end, from, deadline);
        for (const json& event : batch.events)
            if (!event.contains("type") || event["type"] == "PUT")
                return event.contains("kv") ? event["kv"] : json::object();
        if (batch.events.empty()) break;  // the deadline passed
        from = std::max(from, batch.revision + 1);
    }
    throw StoreError(StoreError::Kind::Timeout, fmt::format("timed out waiting for '{}'", key));
}

EtcdClient::Events EtcdClient::watch_events(const std::string& key, const std::string& range_end,
                                            std::int64_t start_revision,
                                            Clock::time_point deadline) {
    json create = {{"key", etcd_base64(key)}, {"start_revision", start_revision}};
    if (!range_end.empty()) create["range_end"] = etcd_base64(range_end);
    const json request_body = {{"create_request", create}};
    std::string sent = token(deadline);
    bool renewed = false;
    // A watch is a response that never ends: a connection of its own, closed after.
    while (Clock::now() < deadline) {
        throw_if_cancelled();
        auto connection = connect_any(deadline);
        Connection& c = *connection;
        http::request<http::string_body> request{http::verb::post, "/v3/watch", 11};
        request.set(http::field::host, c.endpoint);
        request.set(http::field::content_type, "application/json");
        if (!sent.empty()) request.set(http::field::authorization, sent);
        request.body() = request_body.dump();
        request.prepare_payload();
        http::response_parser<http::string_body> parser;
        parser.body_limit(boost::none);
        beast::error_code ec;
        c.tcp().expires_at(deadline);
        ec = c.transfer(
            [&](auto& stream, auto done) { http::async_write(stream, request, std::move(done)); });
        if (!ec)
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read_header(stream, c.buffer, parser, std::move(done));
            });
        if (ec && c.secure && is_tls_refusal(ec))
            throw StoreError(
                StoreError::Kind::Other,
                tls_failure(c.endpoint, ec, c.secure->native_handle(), *m_options.tls, false));
        if (!ec && parser.get().result() != http::status::ok) {
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read(stream, c.buffer, parser, std::move(done));
            });
            const unsigned status = parser.get().result_int();
            if (status == 502 || status == 503 || status == 504) {  // no leader: as in call()
                m_current = (m_current + 1) % m_options.endpoints.size();
                std::this_thread::sleep_for(
                    std::min<Clock::duration>(k_election_pause, deadline - Clock::now()));
                continue;
            }
            throw StoreError(StoreError::Kind::Other,
                             refusal(c.endpoint, parser.get().result_int(), parser.get().body()));
        }
        // One JSON message per line; the first that carries events ends the watch.
        std::size_t parsed = 0;
        std::string cancelled;  // why etcd cancelled the watch, if it did
        while (!ec && !parser.is_done() && cancelled.empty()) {
            ec = c.transfer([&](auto& stream, auto done) {
                http::async_read_some(stream, c.buffer, parser, std::move(done));
            });
            const std::string& text = parser.get().body();
            for (auto newline = text.find('\n', parsed); newline != std::string::npos;
                 newline = text.find('\n', parsed)) {
                auto message = json::parse(text.substr(parsed, newline - parsed), nullptr, false);
                parsed = newline + 1;
                if (!message.is_object() || !message.contains("result")) continue;
                const json& result = message["result"];
                if (result.value("canceled", false)) {
                    // etcd refused the watch (a token it forgot, no permission).
                    cancelled = result.value("cancel_reason", std::string("no reason given"));
                    break;
                }
                if (!result.contains("events") || !result["events"].is_array() ||
                    result["events"].empty())
                    continue;
                Events batch;
                batch.events = result["events"].get<std::vector<json>>();
                for (const json& event : batch.events)
                    if (event.contains("kv"))
                        batch.revision = std::max(batch.revision, revision_of(event["kv"]));
                return batch;
            }
        }
        if (!cancelled.empty()) {
            if (m_options.credentials && !renewed && token_refused(0, cancelled)) {
                renewed = true;
                sent = token(deadline, sent);
                continue;
            }
            const std::string user = m_options.credentials ? m_options.credentials->user : "";
            throw StoreError(StoreError::Kind::Other,
                             refusal(c.endpoint, 200, json{{"message", cancelled}}.dump(), user));
        }
        throw_if_cancelled();
        if (ec == beast::error::timeout) break;
        if (c.secure && is_tls_refusal(ec))
            throw StoreError(
                StoreError::Kind::Other,
                tls_failure(c.endpoint, ec, c.secure->native_handle(), *m_options.tls, false));
        // The member went away mid-watch: another one, from the same revision.
        m_current = (m_current + 1) % m_options.endpoints.size();
    }
    return {};
}

}  // namespace ddprun
