// Free-port reservation (see ports.hpp).
#include "ddprun/base/ports.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"

namespace ddprun {

std::expected<PortReservation, Error> PortReservation::reserve(int port) {
    PortReservation reservation;
    reservation.m_fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!reservation.m_fd) return std::unexpected(system_error("socket"));
    // Without it rank 0's store could not listen on the port this socket holds.
    int one = 1;
    if (::setsockopt(reservation.m_fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        return std::unexpected(system_error("setsockopt(SO_REUSEADDR)"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(reservation.m_fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return std::unexpected(
            system_error(port == 0 ? "bind to a free port" : fmt::format("bind to port {}", port)));
    socklen_t len = sizeof addr;
    if (::getsockname(reservation.m_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
        return std::unexpected(system_error("getsockname"));
    reservation.m_port = ntohs(addr.sin_port);
    return reservation;
}

std::expected<Endpoint, Error> split_endpoint(const std::string& text, int default_port) {
    Endpoint endpoint{text, default_port};
    std::size_t colon = std::string::npos;
    if (text.starts_with('[')) {
        auto close = text.find(']');
        if (close == std::string::npos)
            return std::unexpected(usage_error(fmt::format(
                "endpoint '{}': unclosed [ in an IPv6 address (e.g. [::1]:29400)", text)));
        endpoint.host = text.substr(1, close - 1);
        if (close + 1 < text.size() && text[close + 1] == ':') colon = close + 1;
    } else if (text.find(':') == text.rfind(':')) {
        colon = text.find(':');
        endpoint.host = text.substr(0, colon);
    }
    if (colon != std::string::npos && colon + 1 < text.size()) {
        auto port = to_integer(std::string_view(text).substr(colon + 1));
        if (!port || *port < 0 || *port > 65535)
            return std::unexpected(usage_error(fmt::format(
                "endpoint '{}': the port is not a number 0-65535 (e.g. node0:29400)", text)));
        endpoint.port = static_cast<int>(*port);
    }
    return endpoint;
}

std::optional<std::string> resolve_failure(const std::string& host,
                                           std::chrono::milliseconds retry_for) {
    const auto deadline = std::chrono::steady_clock::now() + retry_for;
    for (;;) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* found = nullptr;
        int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
        if (status == 0) {
            ::freeaddrinfo(found);
            return std::nullopt;
        }
        if (status != EAI_AGAIN || std::chrono::steady_clock::now() >= deadline)
            return std::string(::gai_strerror(status));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the resolver's retry
    }
}

bool is_local_host(const std::string& host) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
    std::vector<std::string> wanted;
    bool local = false;
    for (addrinfo* ai = found; ai; ai = ai->ai_next) {
        char text[INET6_ADDRSTRLEN] = {};
        if (ai->ai_family == AF_INET) {
            auto* in = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
            if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) local = true;
            ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
        } else if (ai->ai_family == AF_INET6) {
            auto* in6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
            if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) local = true;
            ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
        }
        wanted.emplace_back(text);
    }
    ::freeaddrinfo(found);
    if (local) return true;
    ifaddrs* interfaces = nullptr;
    if (::getifaddrs(&interfaces) != 0) return false;
    for (ifaddrs* ifa = interfaces; ifa && !local; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr) continue;
        char text[INET6_ADDRSTRLEN] = {};
        if (ifa->ifa_addr->sa_family == AF_INET)
            ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, text,
                        sizeof text);
        else if (ifa->ifa_addr->sa_family == AF_INET6)
            ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, text,
                        sizeof text);
        else
            continue;
        for (const auto& w : wanted)
            if (w == text) local = true;
    }
    ::freeifaddrs(interfaces);
    return local;
}

}  // namespace ddprun
