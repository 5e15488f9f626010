// The --metrics-port endpoint (metrics_server.hpp): an acceptor and one small
// state machine per connection (read a request, answer, close), all on the agent's
// io_context. Handlers hold the connection by shared_ptr and the server by weak_ptr,
// so that the server can go while reads and writes are still queued.
#include "ddprun/metrics/metrics_server.hpp"

#include <fmt/format.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace ddprun {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct MetricsServer::Impl : std::enable_shared_from_this<MetricsServer::Impl> {
    Impl(asio::io_context& io, Snapshot take)
        : acceptor(io), pause(io), snapshot(std::move(take)) {}

    tcp::acceptor acceptor;
    asio::steady_timer pause;  // after an accept error (out of descriptors): not a busy loop
    Snapshot snapshot;
    std::size_t open = 0;

    void accept();
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
  public:
    Connection(tcp::socket socket, std::weak_ptr<MetricsServer::Impl> server)
        : m_stream(std::move(socket)), m_server(std::move(server)) {
        m_parser.header_limit(MetricsServer::k_max_header);
        m_parser.body_limit(0);
    }
    ~Connection() {
        if (auto server = m_server.lock()) --server->open;
    }

    void read() {
        m_stream.expires_after(MetricsServer::k_request_time);
        http::async_read(
            m_stream, m_buffer, m_parser,
            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->answer(ec); });
    }

  private:
    void answer(beast::error_code ec) {
        if (ec == http::error::end_of_stream || ec == beast::error::timeout) return;  // gone
        auto& response = m_response;
        response.version(11);
        response.keep_alive(false);
        response.set(http::field::server, "ddprun");
        response.set(http::field::content_type, "text/plain; charset=utf-8");
        if (ec) {
            // Not HTTP, a header too big, a body: nothing but a 400.
            respond(http::status::bad_request, "bad request\n");
            return;
        }
        const auto& request = m_parser.get();
        const std::string_view target(request.target().data(), request.target().size());
        const std::string_view path = target.substr(0, target.find('?'));
        if (path != "/metrics" && path != "/healthz") {
            respond(http::status::not_found, "not found: ddprun serves /metrics and /healthz\n");
            return;
        }
        if (request.method() != http::verb::get) {
            response.set(http::field::allow, "GET");
            respond(http::status::method_not_allowed, "only GET\n");
            return;
        }
        auto server = m_server.lock();
        if (!server) return;
        AgentSnapshot snapshot = server->snapshot();
        if (path == "/healthz") {
            if (snapshot.healthy)
                respond(http::status::ok, "ok\n");
            else
                respond(http::status::service_unavailable,
                        fmt::format("unhealthy: {}\n", snapshot.unhealthy_why));
            return;
        }
        response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        respond(http::status::ok, prometheus_text(snapshot));
    }

    void respond(http::status status, std::string body) {
        m_response.result(status);
        m_response.body() = std::move(body);
        m_response.prepare_payload();
        m_stream.expires_after(MetricsServer::k_request_time);
        http::async_write(m_stream, m_response,
                          [self = shared_from_this()](beast::error_code, std::size_t) {
                              beast::error_code ignored;
                              self->m_stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                          });
    }

    beast::tcp_stream m_stream;
    std::weak_ptr<MetricsServer::Impl> m_server;
    beast::flat_buffer m_buffer{MetricsServer::k_max_header};
    http::request_parser<http::empty_body> m_parser;
    http::response<http::string_body> m_response;
};

}  // namespace

void MetricsServer::Impl::accept() {
    acceptor.async_accept([weak = weak_from_this()](beast::error_code ec, tcp::socket socket) {
        auto self = weak.lock();
        if (!self) return;
        if (ec == asio::error::operation_aborted) return;
        if (ec) {
            // Out of descriptors, or another accept error: try again a moment later.
            self->pause.expires_after(std::chrono::milliseconds(100));
            self->pause.async_wait([weak](beast::error_code wait_ec) {
                if (auto again = weak.lock(); again && !wait_ec) again->accept();
            });
            return;
        }
        if (self->open >= k_max_connections) {
            // Full: this one is closed at once; those open are served.
            beast::error_code ignored;
            socket.close(ignored);
        } else {
            ++self->open;
            std::make_shared<Connection>(std::move(socket), weak)->read();
        }
        self->accept();
    });
}

std::expected<std::unique_ptr<MetricsServer>, Error> MetricsServer::start(
    asio::io_context& io, const std::string& address, int port, Snapshot snapshot) {
    auto impl = std::make_shared<Impl>(io, std::move(snapshot));
    beast::error_code ec;
    auto ip = asio::ip::make_address(address, ec);
    if (ec) {
        // A host name (--local_addr may be one): its first address.
        tcp::resolver resolver(io);
        auto found = resolver.resolve(address, "", ec);
        if (ec || found.empty())
            return std::unexpected(usage_error(fmt::format(
                "--metrics-port: cannot listen on --local_addr: '{}' does not resolve ({}); "
                "pass an address, or leave --local_addr out to listen on every address",
                address, ec ? ec.message() : "no address")));
        ip = found.begin()->endpoint().address();
    }
    const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
    auto fail = [&](const char* what) -> std::unexpected<Error> {
        return std::unexpected(usage_error(fmt::format(
            "--metrics-port: cannot listen on {}:{} ({}: {}); pick a free port, or 0 for any",
            address, port, what, ec.message())));
    };
    if (impl->acceptor.open(endpoint.protocol(), ec); ec) return fail("socket");
    if (impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec); ec)
        return fail("SO_REUSEADDR");
    if (impl->acceptor.bind(endpoint, ec); ec) return fail("bind");
    if (impl->acceptor.listen(asio::socket_base::max_listen_connections, ec); ec)
        return fail("listen");
    impl->accept();
    return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}

MetricsServer::~MetricsServer() {
    beast::error_code ignored;
    m_impl->acceptor.close(ignored);
    m_impl->pause.cancel();
}

int MetricsServer::port() const {
    return m_impl->acceptor.local_endpoint().port();
}

std::size_t MetricsServer::connections() const {
    return m_impl->open;
}

}  // namespace ddprun
