// StderrTail: the last lines a worker wrote to stderr, kept for the failure
// report (its traceback). Fed the stream's bytes as they arrive, in chunks
// that split lines anywhere; a fixed ring of strings whose capacity is reused,
// so keeping the tail costs no allocation once warm.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

class StderrTail {
  public:
    // Keeps the last `lines` lines (none when 0), each cut to `max_line_bytes`
    // (a progress bar or a dumped tensor can make one line megabytes long).
    explicit StderrTail(std::size_t lines, std::size_t max_line_bytes = 64 * 1024);

    void feed(std::string_view chunk);

    // The kept lines, oldest first, without terminator; a final line without
    // newline counts. Lines end at '\n' ("\r\n" too); of a line with '\r' in it
    // only the text after its last '\r' is kept, which is what a terminal
    // showed of a progress bar.
    std::vector<std::string> lines() const;

  private:
    void append_to_current(std::string_view text);

    std::vector<std::string> m_ring;
    std::size_t m_max_line_bytes;
    std::size_t m_next = 0;
    std::size_t m_count = 0;
    std::string m_current;  // the line being written, without '\r'
    // The last byte fed was a '\r': the first half of a "\r\n", or the start of
    // a redraw of m_current if more of the line follows.
    bool m_cr_pending = false;
};

}  // namespace ddprun
