// The progress channel's two ends and how ddprun looks at it (progress.hpp).
#include "ddprun/hang/progress.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"

namespace ddprun {

namespace {

// A label longer than this is cut: it is shown in one report line.
constexpr std::size_t k_max_label = 200;
// Read at most this much of the tail to find the last line.
constexpr std::size_t k_tail_bytes = 4096;
// Give memory back once this much was read (whole pages only).
constexpr std::uint64_t k_punch_every = 64 * 1024;

// The last line in `tail` (the text after the last newline but one when the
// tail ends with one, else the partial text after the last newline).
std::string last_line(std::string_view tail) {
    if (!tail.empty() && tail.back() == '\n') tail.remove_suffix(1);
    if (auto newline = tail.rfind('\n'); newline != std::string_view::npos)
        tail.remove_prefix(newline + 1);
    std::string line(tail.substr(0, k_max_label));
    for (char& c : line)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return std::string(trim(line));
}

}  // namespace

std::expected<ProgressChannel, Error> ProgressChannel::create() {
    UniqueFd reader(::memfd_create("ddprun-progress", MFD_CLOEXEC));
    if (!reader) return std::unexpected(system_error("memfd_create"));
    // A second open file description, so that the worker's writes append (O_APPEND is
    // per description) while ddprun reads at offsets of its own choosing.
    UniqueFd worker(::open(fmt::format("/proc/self/fd/{}", reader.get()).c_str(),
                           O_WRONLY | O_APPEND | O_CLOEXEC));
    if (!worker) return std::unexpected(system_error("open of the progress memfd"));
    return ProgressChannel(std::move(reader), std::move(worker));
}

ProgressChannel::Seen ProgressChannel::look() {
    Seen seen;
    struct stat st {};
    if (::fstat(m_reader.get(), &st) != 0) return seen;
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size <= m_seen) return seen;
    seen.bytes = size - m_seen;
    // Each line counted: reading what arrived costs about 0.1 ms per MB (memchr), and at
    // most what arrives between two looks is there to read.
    std::array<char, 64 * 1024> chunk{};
    for (std::uint64_t at = m_seen; at < size;) {
        const auto want =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), size - at));
        const ssize_t n = ::pread(m_reader.get(), chunk.data(), want, static_cast<off_t>(at));
        if (n <= 0) break;
        for (const char* p = chunk.data();
             (p = static_cast<const char*>(
                  std::memchr(p, '\n', static_cast<std::size_t>(chunk.data() + n - p)))) != nullptr;
             ++p)
            ++seen.lines;
        at += static_cast<std::uint64_t>(n);
    }
    const std::uint64_t from = std::max(m_seen, size - std::min<std::uint64_t>(size, k_tail_bytes));
    std::array<char, k_tail_bytes> buffer{};
    const ssize_t got = ::pread(m_reader.get(), buffer.data(),
                                static_cast<std::size_t>(size - from), static_cast<off_t>(from));
    if (got > 0)
        seen.label = last_line(std::string_view(buffer.data(), static_cast<std::size_t>(got)));
    m_seen = size;
    const std::uint64_t page_aligned = m_seen / 4096 * 4096;
    if (page_aligned - m_punched >= k_punch_every &&
        ::fallocate(m_reader.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(m_punched),
                    static_cast<off_t>(page_aligned - m_punched)) == 0)
        m_punched = page_aligned;
    return seen;
}

}  // namespace ddprun
