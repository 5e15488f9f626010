// Calls to etcd's v3 JSON gateway over Boost.Beast (see etcd_client.hpp).
#include "ddprun/etcd_client.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include <fmt/format.h>

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The pause before asking again when etcd answers that it has no leader (an
// election takes about a second with etcd's defaults).
constexpr std::chrono::milliseconds k_election_pause{100};

std::string describe(const Endpoint& endpoint) {
    return fmt::format("{}:{}", endpoint.host, endpoint.port);
}

// What a member that answered an HTTP error, or not JSON, said: one line.
std::string refusal(const std::string& endpoint, unsigned status, const std::string& body) {
    auto answer = json::parse(body, nullptr, false);
    if (answer.is_object()) {
        for (const char* field : {"message", "error"})
            if (answer.contains(field) && answer[field].is_string())
                return fmt::format("etcd at {} refused the request: {}", endpoint,
                                   answer[field].get<std::string>());
    }
    std::string text = body.substr(0, 80);
    std::replace_if(
        text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }, ' ');
    return fmt::format("{} is not etcd's v3 API (HTTP {}: '{}'); check --rdzv_endpoint", endpoint,
                       status, text);
}

}  // namespace

std::int64_t revision_of(const json& kv) {
    if (!kv.contains("mod_revision")) return 0;
    const json& value = kv["mod_revision"];
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) {
        try {
            return std::stoll(value.get<std::string>());
        } catch (const std::exception&) {
        }
    }
    return 0;
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
};

struct EtcdClient::Connection {
    Connection(asio::io_context& context, const std::atomic<bool>& stop)
        : io(context), stream(context), cancelled(&stop) {}
    asio::io_context& io;
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    std::string endpoint;  // "host:port"

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
// the call's time between those not yet tried.
std::unique_ptr<EtcdClient::Connection> EtcdClient::connect_any(Clock::time_point deadline) {
    const std::size_t count = m_options.endpoints.size();
    std::string errors;
    for (std::size_t tried = 0; tried < count; ++tried) {
        throw_if_cancelled();
        const std::size_t index = (m_current + tried) % count;
        const Endpoint& endpoint = m_options.endpoints[index];
        auto left = deadline - Clock::now();
        if (left <= Clock::duration::zero()) break;
        auto connection = std::make_unique<Connection>(m_loop->io, m_cancelled);
        connection->endpoint = describe(endpoint);
        beast::error_code ec;
        asio::ip::tcp::resolver resolver(connection->io);
        auto addresses = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
        if (!ec) {
            connection->stream.expires_after(left / static_cast<long>(count - tried));
            ec = connection->run(
                [&](auto done) { connection->stream.async_connect(addresses, std::move(done)); });
        }
        if (!ec) {
            m_current = index;
            return connection;
        }
        errors +=
            fmt::format("{}{}: {}", errors.empty() ? "" : "; ", describe(endpoint), ec.message());
    }
    m_current = (m_current + 1) % count;
    throw StoreError(StoreError::Kind::Connection,
                     fmt::format("no etcd answers at --rdzv_endpoint ({})",
                                 errors.empty() ? "timed out" : errors));
}

json EtcdClient::call(const std::string& path, const json& body) {
    const auto deadline = Clock::now() + m_options.timeout;
    const std::size_t count = m_options.endpoints.size();
    std::string errors;
    for (std::size_t attempt = 0; Clock::now() < deadline; ++attempt) {
        throw_if_cancelled();
        if (!m_connection) m_connection = connect_any(deadline);
        Connection& c = *m_connection;
        http::request<http::string_body> request{http::verb::post, path, 11};
        request.set(http::field::host, c.endpoint);
        request.set(http::field::content_type, "application/json");
        request.keep_alive(true);
        request.body() = body.dump();
        request.prepare_payload();
        http::response<http::string_body> response;
        beast::error_code ec;
        // Each member gets its share of the call's time, so that one that hangs (frozen,
        // cut off) leaves time for the others.
        const long share = attempt < count ? static_cast<long>(count - attempt) : 1;
        c.stream.expires_after((deadline - Clock::now()) / share);
        ec = c.run([&](auto done) { http::async_write(c.stream, request, std::move(done)); });
        if (!ec)
            ec = c.run([&](auto done) {
                http::async_read(c.stream, c.buffer, response, std::move(done));
            });
        if (ec) {
            // This member failed or does not answer: the next one, within the call's time.
            errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", c.endpoint, ec.message());
            m_connection.reset();
            m_current = (m_current + 1) % count;
            continue;
        }
        if (!response.keep_alive()) m_connection.reset();
        const unsigned status = response.result_int();
        if (status == 502 || status == 503 || status == 504) {
            // Unavailable or timed out: the cluster is electing a leader, or this member
            // lost it. Another member, after a pause, within the call's time.
            errors = refusal(c.endpoint, status, response.body());
            m_connection.reset();
            m_current = (m_current + 1) % count;
            std::this_thread::sleep_for(
                std::min<Clock::duration>(k_election_pause, deadline - Clock::now()));
            continue;
        }
        auto answer = json::parse(response.body(), nullptr, false);
        if (response.result() != http::status::ok || !answer.is_object())
            throw StoreError(StoreError::Kind::Other,
                             refusal(c.endpoint, response.result_int(), response.body()));
        return answer;
    }
    throw StoreError(StoreError::Kind::Connection,
                     fmt::format("no etcd member answered within {} ms ({})",
                                 m_options.timeout.count(), errors.empty() ? "timed out" : errors));
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
    // A watch is a response that never ends: a connection of its own, closed after.
    while (Clock::now() < deadline) {
        throw_if_cancelled();
        auto connection = connect_any(deadline);
        Connection& c = *connection;
        http::request<http::string_body> request{http::verb::post, "/v3/watch", 11};
        request.set(http::field::host, c.endpoint);
        request.set(http::field::content_type, "application/json");
        request.body() = request_body.dump();
        request.prepare_payload();
        http::response_parser<http::string_body> parser;
        parser.body_limit(boost::none);
        beast::error_code ec;
        c.stream.expires_at(deadline);
        ec = c.run([&](auto done) { http::async_write(c.stream, request, std::move(done)); });
        if (!ec)
            ec = c.run([&](auto done) {
                http::async_read_header(c.stream, c.buffer, parser, std::move(done));
            });
        if (!ec && parser.get().result() != http::status::ok) {
            ec = c.run(
                [&](auto done) { http::async_read(c.stream, c.buffer, parser, std::move(done)); });
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
        while (!ec && !parser.is_done()) {
            ec = c.run([&](auto done) {
                http::async_read_some(c.stream, c.buffer, parser, std::move(done));
            });
            const std::string& text = parser.get().body();
            for (auto newline = text.find('\n', parsed); newline != std::string::npos;
                 newline = text.find('\n', parsed)) {
                auto message = json::parse(text.substr(parsed, newline - parsed), nullptr, false);
                parsed = newline + 1;
                if (!message.is_object() || !message.contains("result")) continue;
                const json& result = message["result"];
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
        throw_if_cancelled();
        if (ec == beast::error::timeout) break;
        // The member went away mid-watch: another one, from the same revision.
        m_current = (m_current + 1) % m_options.endpoints.size();
    }
    return {};
}

}  // namespace ddprun
