// A bound on how long c10d's TCPStore server waits for the rest of a request.
//
// The classic server (the only one in Debian's torch and in any build without
// libuv) serves every client from one thread, and once a request's first byte has
// come it reads the rest with blocking reads. A client that stops halfway (an agent
// SIGSTOPped or its link cut between two writes) then holds the whole job's store:
// every other agent's calls wait, and past heartbeat_timeout every node ends 75.
// c10d 1.13's client writes a request in several sends (its type byte alone first);
// 2.x's in one up to 1440 bytes, several beyond.
//
// A receive timeout on the server's sockets bounds that wait: c10d's recv then fails
// with "Socket Timeout", and the server drops that one connection (its queryFds
// catches every error of a query and closes the socket) and serves the others.
//
// Where TCPStoreOptions takes a listening socket (masterListenFd, torch 2.x), the
// plugin makes the server's (listen_for_store) with the timeout set before it
// listens, so no connection completes without it. Each accepted connection still
// gets it only by Linux copying a listening socket's options into the connections
// it accepts: c10d's accept sets FD_CLOEXEC and TCP_NODELAY alone, and its API
// reaches no accepted socket, so nothing surer is possible from outside c10d. The
// tests check that every server connection has the timeout.
#pragma once

#include <ddprun/base/fd.hpp>

#include <chrono>
#include <expected>
#include <string>

namespace ddprun_plugin {

// Long enough for a request's bytes a lost segment or two apart (TCP's minimum
// retransmission timeout is 200 ms), short against heartbeat_timeout (15 s by default).
inline constexpr std::chrono::milliseconds k_request_gap{1000};

struct Listener {
    ddprun::UniqueFd fd;
    int port = 0;  // the one bound: the system's choice when asked for port 0
};

struct ListenFailure {
    int error = 0;     // errno of the call that failed (EADDRINUSE: the port is taken)
    std::string what;  // the call, the address and strerror
};

// A listening TCP socket on `port` of every address as c10d's server makes it (IPv6
// with IPv4 mapped, IPv4 alone where IPv6 cannot listen; SO_REUSEADDR; close-on-exec),
// whose connections wait at most `gap` for a request's next bytes.
std::expected<Listener, ListenFailure> listen_for_store(int port, std::chrono::milliseconds gap);

struct BoundSockets {
    int listening = 0;  // listening sockets on the port
    int accepted = 0;   // connections accepted on it
};

// Only for a libtorch whose server makes its listening socket itself (no masterListenFd:
// torch 1.13): c10d's API reaches none of its sockets, so they are found among the
// process's descriptors. Gives every TCP socket of this process whose local port is
// `port` (the server's listening sockets and the connections already accepted, which
// Linux did not copy the timeout into) a receive timeout of `gap`.
BoundSockets bound_server_reads(int port, std::chrono::milliseconds gap);

}  // namespace ddprun_plugin
