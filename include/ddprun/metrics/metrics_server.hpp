// MetricsServer: --metrics-port's HTTP endpoint (docs/metrics.md), served on the
// agent's own io_context, so a snapshot is taken where the agent's state lives and
// nothing runs beside the agent's loop. Every step is asynchronous (Boost.Beast):
// a slow or hostile client never blocks the loop.
//
//   GET /metrics  200, the snapshot in Prometheus' text format
//   GET /healthz  200 "ok" while the agent is healthy, 503 and why once it is not
//   anything else 404 (another path), 405 (another method), 400 (not HTTP)
//
// Bounds: k_max_connections open at once (more are closed as they come), a
// request's header k_max_header bytes and no body, k_request_time to send it;
// one request per connection.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <expected>
#include <functional>
#include <memory>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/metrics/metrics.hpp"

namespace ddprun {

class MetricsServer {
  public:
    using Snapshot = std::function<AgentSnapshot()>;
    static constexpr std::size_t k_max_connections = 64;
    static constexpr std::size_t k_max_header = 8 * 1024;
    static constexpr std::chrono::seconds k_request_time{5};

    // Listens on `address`:`port` (port 0: a free one, see port()). An error (exit
    // code 2) names the address and what to do when it cannot listen there.
    static std::expected<std::unique_ptr<MetricsServer>, Error> start(boost::asio::io_context& io,
                                                                      const std::string& address,
                                                                      int port, Snapshot snapshot);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    int port() const;
    // Connections open now (for tests).
    std::size_t connections() const;

    struct Impl;

  private:
    explicit MetricsServer(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> m_impl;
};

}  // namespace ddprun
