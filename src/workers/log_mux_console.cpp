// LogMux's console: a chunk's lines prefixed and written whole, a partial line
// held back a little (its timer), a console another stream left mid-line ended
// first, and --collapse-lines' groups (line_groups.hpp) held for their window.
#include <fmt/format.h>
#include <cerrno>
#include <cstring>

#include "log_mux_impl.hpp"

namespace ddprun {

namespace {

// A line without terminator is flushed early past this size, so memory stays
// bounded when a worker writes megabytes without a newline.
constexpr std::size_t k_max_pending = 1024 * 1024;
// --collapse-lines holds at most this much per console before it shows what it
// holds, window or not: eight workers' pipes' worth, so that lines that several
// workers flood alike still meet.
constexpr std::size_t k_max_held = 8 * 1024 * 1024;

}  // namespace

LogMux::Impl::SegmentSink LogMux::Impl::begin_output(const Stream& stream) {
    output.clear();
    output.append("\n");
    return SegmentSink{output, *stream.prefix};
}

void LogMux::Impl::end_output(Stream& stream) {
    if (output.size() == 1) return;  // nothing collected
    Console& console = *stream.console;
    std::size_t skip = 1;
    if (console.owner != nullptr && console.owner != &stream) {
        console.owner->splitter.line_broken();  // its continuation gets a prefix
        skip = 0;
    }
    console.owner = stream.splitter.mid_line() ? &stream : nullptr;
    if (int error =
            write_all(console.fd, std::string_view(output.data() + skip, output.size() - skip)))
        fail_console(console, error);
}

void LogMux::Impl::show(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
    LineSplitter& splitter = stream->splitter;
    std::size_t pending_before = splitter.pending_size();
    SegmentSink sink = begin_output(*stream);
    splitter.feed_prefixed(chunk, *stream->prefix, output);
    if (splitter.pending_size() > k_max_pending) splitter.flush_partial(sink);
    end_output(*stream);
    if (!splitter.has_partial()) return;
    // A new partial started if none was pending or a terminator ended the
    // old one; otherwise this chunk only extended it.
    if (pending_before == 0 || splitter.pending_size() != pending_before + chunk.size()) {
        stream->partial_since = std::chrono::steady_clock::now();
    }
    arm_partial_timer(stream);
}

void LogMux::Impl::collapse(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
    Console& console = *stream->console;
    LineSplitter& splitter = stream->splitter;
    const auto now = std::chrono::steady_clock::now();  // the chunk's lines came together
    while (!chunk.empty()) {
        const std::size_t nl = chunk.find('\n');
        const std::string_view piece = chunk.substr(0, nl);
        if (nl == std::string_view::npos || splitter.mid_line() ||
            piece.find('\r') != std::string_view::npos) {
            const bool shown_now = nl != std::string_view::npos || splitter.mid_line() ||
                                   piece.find('\r') != std::string_view::npos ||
                                   splitter.pending_size() + chunk.size() > k_max_pending;
            if (shown_now) flush_held(console);
            return show(stream, chunk);
        }
        std::string_view line = piece;
        std::string begun;  // the line's start, from an earlier chunk
        if (splitter.has_partial()) {
            begun = splitter.take_pending();
            begun.append(piece);
            line = begun;
        }
        const bool first = console.held.empty();
        console.held.hold(stream->bit < 64 ? std::uint64_t{1} << stream->bit : 0, stream->prefix,
                          line, now);
        if (first) arm_window(console);
        chunk.remove_prefix(nl + 1);
    }
    // Bounded: a flood does not wait for the window.
    if (console.held.bytes() > k_max_held) flush_held(console);
}

void LogMux::Impl::arm_window(Console& console) {
    if (console.held.empty()) return;
    if (!console.window) console.window = std::make_unique<boost::asio::steady_timer>(io);
    console.window->expires_at(console.held.oldest() + options.collapse_window);
    // A wait cancelled too late to abort runs anyway: it shows only what is due.
    console.window->async_wait([this, &console](const boost::system::error_code& ec) {
        if (!ec) show_held(console, std::chrono::steady_clock::now() - options.collapse_window);
    });
}

void LogMux::Impl::flush_held(Console& console) {
    if (console.window) console.window->cancel();
    show_held(console, std::chrono::steady_clock::time_point::max());
}

void LogMux::Impl::show_held(Console& console, std::chrono::steady_clock::time_point until) {
    if (console.held.empty()) return;
    output.clear();
    if (console.owner != nullptr) output.append("\n");  // another stream left it mid-line
    auto prefix = [this](std::uint64_t members) -> const std::string& {
        return group_prefix(members);
    };
    if (console.held.take(until, prefix, output) > 0) {
        if (console.owner != nullptr) {
            console.owner->splitter.line_broken();
            console.owner = nullptr;
        }
        if (int error = write_all(console.fd, std::string_view(output.data(), output.size())))
            fail_console(console, error);
    }
    if (until != std::chrono::steady_clock::time_point::max()) arm_window(console);
}

const std::string& LogMux::Impl::group_prefix(std::uint64_t members) {
    auto known = group_prefixes.find(members);
    if (known != group_prefixes.end()) return known->second;
    std::vector<int> ranks, local_ranks;
    const Stream* first = nullptr;
    for (const Stream* stream : bit_streams)
        if (stream != nullptr && stream->bit < 64 && (members >> stream->bit & 1) != 0) {
            if (first == nullptr) first = stream;
            ranks.push_back(stream->source.rank);
            local_ranks.push_back(stream->source.local_rank);
        }
    return group_prefixes
        .emplace(members, expand_group_prefix(options.prefix_template, first->source,
                                              rank_runs(ranks), rank_runs(local_ranks)))
        .first->second;
}

void LogMux::Impl::fail_console(Console& console, int error) {
    console.failed = true;
    if (console_error.empty())
        console_error = fmt::format(
            "writing worker output to ddprun's {}: {}; the workers ran on, and their "
            "output from then on was not shown (use --log_dir to keep it)",
            console.fd == options.stderr_fd ? "stderr" : "stdout", std::strerror(error));
}

void LogMux::Impl::arm_partial_timer(const std::shared_ptr<Stream>& stream) {
    if (stream->timer_armed) return;
    stream->timer_armed = true;
    stream->partial_timer.expires_at(stream->partial_since + options.partial_flush);
    stream->partial_timer.async_wait([stream](const boost::system::error_code& ec) {
        stream->timer_armed = false;
        if (ec || !stream->open) return;
        stream->mux->on_partial_timer(stream);
    });
}

void LogMux::Impl::on_partial_timer(const std::shared_ptr<Stream>& stream) {
    if (!stream->splitter.has_partial() || stream->console->failed) return;
    // The rest of the line may already wait in the pipe, its read queued behind this
    // timer on a busy loop: take it first, so a line is only cut when the worker
    // really paused mid-line.
    read_now(stream, false);
    if (!stream->open || !stream->splitter.has_partial()) return;
    if (std::chrono::steady_clock::now() < stream->partial_since + options.partial_flush) {
        return arm_partial_timer(stream);
    }
    flush_held(*stream->console);  // --collapse-lines: what this stream printed before
    stream->splitter.flush_partial(begin_output(*stream));
    end_output(*stream);
}

}  // namespace ddprun
