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
// catches every error of a query and closes the socket) and serves the others. The
// server's sockets are not reachable through c10d's API, so they are found among the
// process's own descriptors: the listening socket on the store's port (Linux copies
// SO_RCVTIMEO from it into every connection that completes afterwards) and the
// connections already accepted on that port.
#pragma once

#include <chrono>

namespace ddprun_plugin {

// Long enough for a request's bytes a lost segment or two apart (TCP's minimum
// retransmission timeout is 200 ms), short against heartbeat_timeout (15 s by default).
inline constexpr std::chrono::milliseconds k_request_gap{1000};

struct BoundSockets {
    int listening = 0;  // listening sockets on the port
    int accepted = 0;   // connections accepted on it
};

// Gives every TCP socket of this process whose local port is `port` (the server's
// listening sockets and the connections they accepted) a receive timeout of `gap`.
BoundSockets bound_server_reads(int port, std::chrono::milliseconds gap);

}  // namespace ddprun_plugin
