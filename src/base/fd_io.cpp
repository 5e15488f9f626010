// The write loop and the whole read (see fd_io.hpp).
#include "ddprun/base/fd_io.hpp"

#include <poll.h>

namespace ddprun {

int write_all(int fd, std::string_view data, WhenFull full) {
    while (!data.empty()) {
        const ssize_t written = ::write(fd, data.data(), data.size());
        if (written > 0) {
            data.remove_prefix(static_cast<std::size_t>(written));
        } else if (written == 0) {
            return EIO;  // nothing taken and no error: it never will, and must not spin
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (full == WhenFull::GiveUp) return EAGAIN;
            pollfd pfd{fd, POLLOUT, 0};
            if (::poll(&pfd, 1, -1) < 0 && errno != EINTR) return errno;
        } else if (errno != EINTR) {
            return errno;
        }
    }
    return 0;
}

std::expected<std::string, int> read_to_eof(int fd, std::size_t max_bytes) {
    std::string text;
    bool too_long = false;
    const ReadEnd end = read_chunks(fd, [&](std::string_view chunk) {
        text.append(chunk);
        too_long = text.size() > max_bytes;
        return !too_long;
    });
    if (too_long) return std::unexpected(EFBIG);
    if (end == ReadEnd::Failed) return std::unexpected(errno);
    if (end == ReadEnd::Drained) return std::unexpected(EAGAIN);
    return text;
}

}  // namespace ddprun
