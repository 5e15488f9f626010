// LineSplitter: turns the byte chunks read from one worker pipe into segments
// that can be written whole. Pure: no I/O, so it is tested exhaustively.
//
// A segment ends at '\n' or '\r' (a progress bar's carriage return starts a
// new prefixed segment on the same console line). Bytes after the last
// terminator stay pending until more data, flush_partial() (the ~100 ms
// partial-line timer) or finish() (EOF).
//
// feed() hands each segment to a sink. feed_prefixed() makes the same cut but
// writes the console bytes itself (the prefix before every segment that starts
// a line, then the segment): it is ddprun's hot loop, every byte a worker
// prints passes through it, so it scans and copies in one pass instead of a
// memchr and two appends per line. The tests hold it to feed()'s segments.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <string.h>  // memrchr (GNU)

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ddprun {

// The assembled console write, reused from one write to the next. Appends are
// inlined memcpys with one capacity check (std::string::append is a library
// call per segment); room()/resize() let the copy loop write into it directly.
class OutputBuffer {
  public:
    void clear() { m_size = 0; }
    const char* data() const { return m_data.get(); }
    char* data() { return m_data.get(); }
    std::size_t size() const { return m_size; }
    std::size_t capacity() const { return m_capacity; }

    void append(std::string_view text) {
        if (text.empty()) return;  // memcpy must not see a null data() even for 0 bytes
        std::memcpy(room(text.size()), text.data(), text.size());
        m_size += text.size();
    }

    // At least `extra` writable bytes past size(), up to capacity(); the
    // pointer is to the first. Writes there count once resize() says so.
    char* room(std::size_t extra) {
        if (m_capacity - m_size < extra) reserve(m_size + extra, m_size);
        return m_data.get() + m_size;
    }
    void resize(std::size_t size) { m_size = size; }

    // Makes capacity() at least `capacity`, keeping the first `keep` bytes
    // (written through room(), they may reach past size()). Returns data().
    char* reserve(std::size_t capacity, std::size_t keep) {
        if (capacity <= m_capacity) return m_data.get();
        capacity = std::max({m_capacity * 2, capacity, k_min_capacity});
        auto data = std::make_unique_for_overwrite<char[]>(capacity);
        if (keep > 0) std::memcpy(data.get(), m_data.get(), keep);
        m_data = std::move(data);
        m_capacity = capacity;
        return m_data.get();
    }

  private:
    static constexpr std::size_t k_min_capacity = 256 * 1024;

    std::unique_ptr<char[]> m_data;
    std::size_t m_size = 0;
    std::size_t m_capacity = 0;
};

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

    // Feeds a chunk like feed() with a sink that appends `prefix` (if the
    // segment starts a line) and the segment's text to `out`, and leaves the
    // splitter in the same state.
    void feed_prefixed(std::string_view chunk, std::string_view prefix, OutputBuffer& out);

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
    // The pending partial segment, taken out unshown (--collapse-lines completes
    // and holds the line itself). Only while !mid_line(): none of it was shown.
    std::string take_pending() { return std::exchange(m_pending, {}); }

  private:
    std::string m_pending;
    bool m_mid_line = false;  // an incomplete segment was emitted, continuation pending
};

namespace detail {

// The first '\n' or '\r' in [from, end), or end. Linear: the '\r' search
// stops at the '\n'.
inline const char* find_terminator(const char* from, const char* end) {
    auto size = [&](const char* to) { return static_cast<std::size_t>(to - from); };
    const void* nl = std::memchr(from, '\n', size(end));
    const char* stop = nl == nullptr ? end : static_cast<const char*>(nl);
    const void* cr = std::memchr(from, '\r', size(stop));
    return cr == nullptr ? stop : static_cast<const char*>(cr);
}

// The next '\n' or '\r' of [from, end) at or after a position, each remembered
// until passed, so that the scan stays linear however the two interleave (a
// progress bar puts hundreds of '\r' in one chunk).
class TerminatorScan {
  public:
    TerminatorScan(const char* from, const char* end)
        : m_end(end), m_cr(find(from, '\r')), m_nl(find(from, '\n')) {}

    // The first terminator at or after `pos`, or end.
    const char* next(const char* pos) {
        if (m_cr < pos) m_cr = find(pos, '\r');
        if (m_nl < pos) m_nl = find(pos, '\n');
        return m_nl < m_cr ? m_nl : m_cr;
    }

  private:
    const char* find(const char* from, char byte) const {
        const void* hit = std::memchr(from, byte, static_cast<std::size_t>(m_end - from));
        return hit == nullptr ? m_end : static_cast<const char*>(hit);
    }

    const char* m_end;
    const char* m_cr;
    const char* m_nl;
};

// Both copy loops below append, for every complete segment of [pos, end)
// (which starts a line), the prefix and the segment to `out`, and return
// where the unterminated rest begins (end if there is none).

// Portable: a memchr per terminator and two memcpys per segment.
inline const char* copy_prefixed_lines_scalar(const char* pos, const char* end,
                                              std::string_view prefix, OutputBuffer& out) {
    TerminatorScan scan(pos, end);
    while (pos != end) {
        const char* stop = scan.next(pos);
        if (stop == end) return pos;
        out.append(prefix);
        out.append(std::string_view(pos, static_cast<std::size_t>(stop + 1 - pos)));
        pos = stop + 1;
    }
    return end;
}

#if defined(__SSE2__)
// x86-64 (SSE2 is part of its baseline). A scan for each terminator in turn
// makes every line wait for the one before it (the next search starts where
// the last ended), which costs more than the bytes. Here the input is walked
// in 64-byte blocks whatever the lines: each block is copied to where it
// belongs and its terminators come out as one bit mask; each terminator then
// gets the next segment's prefix written after it, and the 64 bytes that
// follow it are copied again, one prefix further on. Later stores overwrite
// what earlier ones put past a terminator, so every byte ends up in place
// without a per-line length. Stores run past what counts (up to a block and
// a prefix), into room that is asked for but not counted.

// The 64 bytes at `from`, to `to`. Written out: -O2 does not unroll a loop.
inline void copy_block(char* to, const char* from) {
    auto load = [from](int at) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + at));
    };
    __m128i a = load(0), b = load(16), c = load(32), d = load(48);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 48), d);
}

// Bit i set: byte i of the 64 at `from` is '\n' or '\r'.
inline std::uint64_t terminator_bits(const char* from) {
    const __m128i newline = _mm_set1_epi8('\n');
    const __m128i carriage_return = _mm_set1_epi8('\r');
    auto bits = [&](int at) {
        __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + at));
        __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, newline), _mm_cmpeq_epi8(v, carriage_return));
        return static_cast<std::uint64_t>(static_cast<unsigned>(_mm_movemask_epi8(hit))) << at;
    };
    return bits(0) | bits(16) | bits(32) | bits(48);
}

struct BlockCursor {
    const char* in;       // the next block to copy
    char* out;            // where its first byte goes
    const char* open_in;  // the first byte after the last terminator copied
    char* segments_end;   // the end of the output of the complete segments
};

// Copies blocks from c.in while c.in < stop (each read may reach 128 bytes
// past c.in) and c.out <= out_limit (so one block's stores stay in room).
inline void copy_blocks(BlockCursor& c, const char* stop, const char* out_limit,
                        std::string_view prefix, __m128i prefix_block) {
    // Locals, not c's fields: the byte stores could alias those, and the
    // compiler would reload them after every one.
    BlockCursor k = c;
    const char* const prefix_data = prefix.data();
    const std::size_t prefix_size = prefix.size();
    const bool short_prefix = prefix_size <= 16;
    while (k.in < stop && k.out <= out_limit) {
        copy_block(k.out, k.in);
        for (std::uint64_t bits = terminator_bits(k.in); bits != 0; bits &= bits - 1) {
            auto after = static_cast<std::size_t>(__builtin_ctzll(bits)) + 1;
            char* segment_end = k.out + after;
            if (short_prefix) {
                _mm_storeu_si128(reinterpret_cast<__m128i*>(segment_end), prefix_block);
            } else {
                std::memcpy(segment_end, prefix_data, prefix_size);
            }
            k.out += prefix_size;
            copy_block(segment_end + prefix_size, k.in + after);
            k.open_in = k.in + after;
            k.segments_end = segment_end;
        }
        k.in += 64;
        k.out += 64;
    }
    c = k;
}

inline const char* copy_prefixed_lines_sse2(const char* pos, const char* end,
                                            std::string_view prefix, OutputBuffer& out) {
    if (pos == end) return end;
    const std::size_t prefix_size = prefix.size();
    alignas(16) char padded[16] = {};
    if (prefix_size <= 16) std::memcpy(padded, prefix.data(), prefix_size);
    const __m128i prefix_block = _mm_load_si128(reinterpret_cast<const __m128i*>(padded));
    // The most one block can store past its c.out: itself, a prefix and a
    // re-copied block per byte, and a prefix store's 16 bytes.
    const std::size_t block_room = 64 * (prefix_size + 1) + 64 + 16;

    char* start = out.room(prefix_size + 16 + block_room);
    std::memcpy(start, prefix.data(), prefix_size);
    BlockCursor c{pos, start + prefix_size, pos, start};
    // Copies up to `stop`, growing the buffer whenever less than a block's
    // room is left (rare: it keeps its size from one chunk to the next).
    auto run = [&](const char* stop) {
        while (c.in < stop) {
            char* data = out.data();
            const char* limit = data + (out.capacity() - block_room);
            if (c.out > limit) {
                auto written = static_cast<std::size_t>(c.out - data);
                auto segments = static_cast<std::size_t>(c.segments_end - data);
                char* moved = out.reserve(written + 2 * block_room, written);
                c.out = moved + written;
                c.segments_end = moved + segments;
                continue;
            }
            copy_blocks(c, stop, limit, prefix, prefix_block);
        }
    };
    if (end - pos >= 128) run(end - 127);

    // The last bytes (under 128) go through a zero-padded copy, so that the
    // blocks may read past them; a zero byte is no terminator.
    alignas(16) char tail[256] = {};
    const char* tail_start = c.in;
    auto tail_size = static_cast<std::size_t>(end - tail_start);
    std::memcpy(tail, tail_start, tail_size);
    const char* open_in = c.open_in;
    c.in = tail;
    c.open_in = nullptr;
    run(tail + tail_size);
    if (c.open_in != nullptr) open_in = tail_start + (c.open_in - tail);

    out.resize(static_cast<std::size_t>(c.segments_end - out.data()));
    return open_in;
}
#endif

// With no prefix, everything up to the last terminator goes out as it came.
inline const char* copy_unprefixed_lines(const char* pos, const char* end, OutputBuffer& out) {
    const char* last = pos;  // just past the last terminator
    if (const void* nl = ::memrchr(pos, '\n', static_cast<std::size_t>(end - pos))) {
        last = static_cast<const char*>(nl) + 1;
    }
    if (const void* cr = ::memrchr(last, '\r', static_cast<std::size_t>(end - last))) {
        last = static_cast<const char*>(cr) + 1;
    }
    out.append(std::string_view(pos, static_cast<std::size_t>(last - pos)));
    return last;
}

inline const char* copy_prefixed_lines(const char* pos, const char* end, std::string_view prefix,
                                       OutputBuffer& out) {
    if (prefix.empty()) return copy_unprefixed_lines(pos, end, out);
#if defined(__SSE2__)
    return copy_prefixed_lines_sse2(pos, end, prefix, out);
#else
    return copy_prefixed_lines_scalar(pos, end, prefix, out);
#endif
}

}  // namespace detail

template <typename Sink>
void LineSplitter::feed(std::string_view chunk, Sink&& sink) {
    if (chunk.empty()) return;
    const char* pos = chunk.data();
    const char* const end = pos + chunk.size();
    detail::TerminatorScan scan(pos, end);
    while (pos != end) {
        const char* stop = scan.next(pos);
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

inline void LineSplitter::feed_prefixed(std::string_view chunk, std::string_view prefix,
                                        OutputBuffer& out) {
    const char* pos = chunk.data();
    const char* const end = pos + chunk.size();
    if (pos == end) return;
    if (m_mid_line || !m_pending.empty()) {
        // The first segment continues held-back bytes, or a line already shown
        // in part (no prefix then); the copy loop handles only fresh lines.
        const char* stop = detail::find_terminator(pos, end);
        if (stop == end) {
            m_pending.append(pos, end);
            return;
        }
        ++stop;
        if (!m_mid_line) out.append(prefix);
        out.append(m_pending);
        out.append(std::string_view(pos, static_cast<std::size_t>(stop - pos)));
        m_pending.clear();
        m_mid_line = false;
        pos = stop;
    }
    const char* rest = detail::copy_prefixed_lines(pos, end, prefix, out);
    m_pending.append(rest, end);
}

template <typename Sink>
void LineSplitter::flush_partial(Sink&& sink) {
    if (m_pending.empty()) return;
    sink(Segment{m_pending, !m_mid_line, false});
    m_pending.clear();
    m_mid_line = true;
}

}  // namespace ddprun
