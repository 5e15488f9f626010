// StderrTail: the last lines a worker wrote to stderr, kept for the failure
// report (its traceback). Fed the stream's bytes as they arrive, in chunks
// that split lines anywhere; a fixed ring of strings whose capacity is reused,
// so keeping the tail costs no allocation once warm.
#pragma once

#include <cstddef>
#include <memory>
#include <regex>
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

// The lines of a worker's stderr that match one of --report-lines' patterns:
// unlike the tail, every line is looked at (an `NCCL WARN` 2,000 lines up is the
// point); the last `keep` matches are kept, each cut to `max_line_bytes`. Off
// LogMux's fast path: only built when patterns are given.
class LineMatcher {
  public:
    using Patterns = std::vector<std::regex>;
    explicit LineMatcher(std::shared_ptr<const Patterns> patterns, std::size_t keep = 10,
                         std::size_t max_line_bytes = 500);

    void feed(std::string_view chunk);

    struct Matches {
        std::vector<std::string> lines;  // the last `keep`, oldest first
        std::size_t total = 0;           // every match so far
    };
    // A last line without newline counts (the worker died mid-line).
    Matches matches() const;

  private:
    bool wanted(std::string_view line) const;
    void take(std::string_view line, Matches& into) const;

    std::shared_ptr<const Patterns> m_patterns;
    std::size_t m_keep;
    std::size_t m_max_line_bytes;
    Matches m_matches;
    std::string m_current;  // the line being written, cut to m_max_line_bytes * 4
};

}  // namespace ddprun
