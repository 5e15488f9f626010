// LineSplitter: turns the byte chunks read from one worker pipe into segments
// that can be written whole. Pure: no I/O, so it is tested exhaustively.
//
// A segment ends at '\n' or '\r' (a progress bar's carriage return starts a
// new prefixed segment on the same console line). Bytes after the last
// terminator stay pending until more data, flush_partial() (the ~100 ms
// partial-line timer) or finish() (EOF).
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace ddprun {

class LineSplitter {
  public:
    struct Segment {
        std::string_view text;  // includes its terminator, if any
        bool starts_line;       // true: first bytes of a console line, gets a prefix
        bool complete;          // true: ends with '\n' or '\r'
    };

    // Feeds a chunk. For each segment, calls sink(Segment). Views are valid only
    // during the call.
    template <typename Sink>
    void feed(std::string_view chunk, Sink&& sink);

    // Emits the pending partial segment (if any) as incomplete. The next bytes
    // continue the same console line, so they do not start a line.
    template <typename Sink>
    void flush_partial(Sink&& sink);

    // EOF: emits the pending partial segment, if any.
    template <typename Sink>
    void finish(Sink&& sink) {
        flush_partial(sink);
    }

    bool has_partial() const { return !m_pending.empty(); }
    // Bytes held back waiting for a terminator (the mux flushes early when a
    // line grows huge, so memory stays bounded).
    std::size_t pending_size() const { return m_pending.size(); }
    // True when the last emitted segment left the console mid-line.
    bool mid_line() const { return m_mid_line; }
    // Forget that the console is mid-line (someone else terminated the line).
    void line_broken() { m_mid_line = false; }

  private:
    std::string m_pending;
    bool m_mid_line = false;  // an incomplete segment was emitted, continuation pending
};

template <typename Sink>
void LineSplitter::feed(std::string_view chunk, Sink&& sink) {
    if (chunk.empty()) return;
    // This is ddprun's hot loop: memchr per terminator instead of a per-byte
    // find_first_of. The next position of each terminator is remembered until
    // passed, so the scan stays linear however the two interleave (a progress
    // bar puts hundreds of '\r' in one chunk).
    const char* pos = chunk.data();
    const char* const end = pos + chunk.size();
    auto find = [end](const char* from, char byte) {
        const void* hit = std::memchr(from, byte, static_cast<std::size_t>(end - from));
        return hit == nullptr ? end : static_cast<const char*>(hit);
    };
    const char* next_cr = find(pos, '\r');
    const char* next_nl = find(pos, '\n');
    while (pos != end) {
        if (next_cr < pos) next_cr = find(pos, '\r');
        if (next_nl < pos) next_nl = find(pos, '\n');
        const char* stop = next_nl < next_cr ? next_nl : next_cr;
        if (stop == end) {
            m_pending.append(pos, end);
            return;
        }
        std::string_view piece(pos, static_cast<std::size_t>(stop + 1 - pos));
        pos = stop + 1;
        bool starts = !m_mid_line;
        if (m_pending.empty()) {
            sink(Segment{piece, starts, true});
        } else {
            m_pending.append(piece);
            sink(Segment{m_pending, starts, true});
            m_pending.clear();
        }
        m_mid_line = false;
    }
}

template <typename Sink>
void LineSplitter::flush_partial(Sink&& sink) {
    if (m_pending.empty()) return;
    sink(Segment{m_pending, !m_mid_line, false});
    m_pending.clear();
    m_mid_line = true;
}

}  // namespace ddprun
