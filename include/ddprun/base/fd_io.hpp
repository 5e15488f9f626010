// Whole buffers through a file descriptor: the one write loop and the one read
// loop of ddprun, each again after EINTR and after a short write or read, so
// that no caller spells read(2) or write(2) in a loop of its own.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <expected>
#include <string>
#include <string_view>

namespace ddprun {

// What write_all does when a non-blocking `fd` is full (EAGAIN).
enum class WhenFull {
    Wait,    // poll until it takes more: the console's backpressure (LogMux)
    GiveUp,  // return EAGAIN: a peer that stopped reading must not hold the caller (--hosts)
};

// Writes all of `data` to `fd`. Returns 0, or the errno of the call that failed
// (EPIPE: the reader is gone; EAGAIN: full, with WhenFull::GiveUp); how much
// was written before then is not said.
int write_all(int fd, std::string_view data, WhenFull full = WhenFull::Wait);

// How read_chunks stopped.
enum class ReadEnd {
    EndOfFile,
    Drained,  // a non-blocking fd has nothing more now (EAGAIN)
    Stopped,  // `take` returned false
    Failed,   // read(2) failed: errno says why
};

// Reads `fd` until end of file, or until a non-blocking one has nothing more
// for now, handing each chunk to `take(std::string_view) -> bool`; false stops.
template <class Take>
ReadEnd read_chunks(int fd, Take&& take) {
    char buffer[64 * 1024];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? ReadEnd::Drained : ReadEnd::Failed;
        if (n == 0) return ReadEnd::EndOfFile;
        if (!take(std::string_view(buffer, static_cast<std::size_t>(n)))) return ReadEnd::Stopped;
    }
}

// All `fd` holds up to end of file (a file, a pipe whose writers all close), or
// the errno of the read that failed: EFBIG when it holds more than `max_bytes`
// (it stops reading there), EAGAIN when a non-blocking one has nothing more now.
std::expected<std::string, int> read_to_eof(int fd, std::size_t max_bytes);

}  // namespace ddprun
