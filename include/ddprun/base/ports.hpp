// Free-port reservation for MASTER_PORT. The port is held by a bound (not
// listening) SO_REUSEADDR socket until the round ends, so a second job started
// at the same moment cannot be handed the same port, while rank 0's store
// (which also sets SO_REUSEADDR) can still bind and listen on it.
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/base/fd.hpp"

namespace ddprun {

class PortReservation {
  public:
    // Binds `port` on all addresses, or with 0 an ephemeral one. Fails (naming
    // the call) when the system has no socket or port to give, or `port` is
    // listened on (the --hosts preflight's check of node 0's store port).
    static std::expected<PortReservation, Error> reserve(int port = 0);

    int port() const { return m_port; }

  private:
    UniqueFd m_fd;
    int m_port = 0;
};

}  // namespace ddprun

namespace ddprun {

// Where the c10d store listens when --rdzv_endpoint gives no port (torchrun's).
constexpr int k_default_rdzv_port = 29400;

struct Endpoint {
    std::string host;
    int port = 0;
};

// Splits "host[:port]", "[v6addr][:port]" or a bare IPv6 address (more than
// one colon); `default_port` where no port is given. A port that is not a
// number 0-65535 (e.g. --master_addr=node0:abc) is a usage error naming `text`.
std::expected<Endpoint, Error> split_endpoint(const std::string& text, int default_port);

// Why `host` cannot be resolved (getaddrinfo's words, e.g. "Name or service
// not known"), or nullopt when it resolves. A temporary failure (EAI_AGAIN: a
// slow or restarting DNS server) is retried for up to `retry_for`.
std::optional<std::string> resolve_failure(const std::string& host,
                                           std::chrono::milliseconds retry_for);

// True when `host` names an address of this machine (any loopback address,
// or one assigned to a local interface): the agents that may host the store.
bool is_local_host(const std::string& host);

}  // namespace ddprun
