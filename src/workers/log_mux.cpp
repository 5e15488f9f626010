// LogMux: the hot path of ddprun. Every byte a worker writes passes through
// here once, so the loop is built around whole chunks: one read() per chunk,
// the prefixed output assembled in one reusable buffer by the splitter's
// block copy (line_splitter.hpp), one write() per destination; nothing
// allocates or makes a syscall per line. A pipe that a worker fills is grown,
// so a chatty worker and ddprun trade a megabyte per wake-up, not 64 KiB.
//
// Pipes are watched with async_wait (readiness) and read here with read(),
// rather than with async_read_some: then no bytes ever sit inside Asio in a
// completed-but-not-yet-dispatched read, and drain_and_close_all() can read
// every pipe to the end without losing or reordering anything.
//
// One concern, read whole: every path to the console (prefixed lines, partial
// lines and their timer, a console another stream left mid-line, the lines
// --collapse-lines holds) shares one Impl's console state, and the order of
// what reaches the console is only right when they are read together.
#include "ddprun/workers/log_mux.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_map>

#include "ddprun/base/line_splitter.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/workers/stderr_tail.hpp"

namespace ddprun {

namespace {

constexpr std::size_t k_read_size = 128 * 1024;
// A full read means the pipe may hold more; after this many in a row the
// stream yields so one chatty worker cannot starve the others or the timers.
constexpr int k_reads_per_turn = 16;
// A line without terminator is flushed early past this size, so memory stays
// bounded when a worker writes megabytes without a newline.
constexpr std::size_t k_max_pending = 1024 * 1024;
// --collapse-lines holds at most this much per console before it shows what it
// holds, window or not: eight workers' pipes' worth, so that lines that several
// workers flood alike still meet.
constexpr std::size_t k_max_held = 8 * 1024 * 1024;
constexpr std::size_t k_none = static_cast<std::size_t>(-1);
// A pipe found full (the worker writes faster than one 64 KiB pipe carries)
// is grown to this, the most an unprivileged process may ask for by default
// (/proc/sys/fs/pipe-max-size): the worker then blocks and wakes 16 times
// less often, and it and ddprun can run side by side instead of taking turns.
constexpr int k_grown_pipe_size = 1024 * 1024;
// Pipe buffers count against the user's pipe-user-pages-soft (64 MiB by
// default); past it the kernel gives every new pipe of that user, the
// workers' own included, only two pages. So only pipes that fill are grown,
// and no more than this many at a time (16 MiB).
constexpr std::size_t k_max_grown_pipes = 16;

// Writes everything, retrying on EINTR and waiting for writability on
// EAGAIN (a console someone made non-blocking). Returns 0 or an errno.
int write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        ssize_t written = ::write(fd, data, size);
        if (written >= 0) {
            data += written;
            size -= static_cast<std::size_t>(written);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            pollfd pfd{fd, POLLOUT, 0};
            // Blocking here is the console's backpressure.
            if (::poll(&pfd, 1, -1) < 0 && errno != EINTR) return errno;
        } else if (errno != EINTR) {
            return errno;
        }
    }
    return 0;
}

}  // namespace

struct LogMux::Impl {
    struct Stream;

    // One of ddprun's own output fds. When stdout and stderr are the same file
    // (a terminal, 2>&1) both streams share one Console, so a partial line on one
    // is terminated before the other writes.
    struct Console {
        int fd = -1;
        Stream* owner = nullptr;  // the stream that left this console mid-line
        bool failed = false;      // a write failed (e.g. EPIPE): stop writing
        // --collapse-lines: complete lines held for the window, in arrival order.
        struct Held {
            std::shared_ptr<Stream> stream;
            std::string line;  // without its '\n'
        };
        std::vector<Held> held;
        std::size_t held_bytes = 0;
        std::unique_ptr<boost::asio::steady_timer> window;  // runs while lines are held
    };

    // One worker pipe. Handlers hold a shared_ptr to it and do nothing once it is
    // closed, so they are safe whenever Asio runs (or destroys) them.
    struct Stream {
        Stream(boost::asio::io_context& io, int fd) : pipe(io, fd), partial_timer(io) {}

        Impl* mux = nullptr;
        std::string name;  // "worker 3's stdout", for messages
        bool open = true;
        boost::asio::posix::stream_descriptor pipe;
        boost::asio::steady_timer partial_timer;
        bool timer_armed = false;
        // When the oldest byte still held back by the splitter arrived.
        std::chrono::steady_clock::time_point partial_since;
        Console* console = nullptr;  // null: not shown on the console
        std::size_t pipe_size = 0;   // its capacity; 0: unknown or not to be grown
        bool pipe_grown = false;     // counted in grown_pipes
        std::string prefix;
        StreamSource source;  // for the prefix of lines it printed alike with others
        // --collapse-lines: its bit in a group's members (a worker's streams share it;
        // 64 and up: never grouped), and where its next held line may join a group.
        std::size_t bit = 64;
        std::size_t next_group = 0;
        std::uint64_t flush = 0;  // the flush next_group belongs to
        LineSplitter splitter;
        int file_fd = -1;
        std::string file_path;
        std::shared_ptr<StderrTail> tail;      // stderr streams only
        std::shared_ptr<LineMatcher> matcher;  // stderr streams, with --report-lines
    };

    struct Worker {
        std::shared_ptr<Stream> out, err;
        std::shared_ptr<StderrTail> tail;
        std::shared_ptr<LineMatcher> matcher;
    };

    Impl(boost::asio::io_context& io_context, Options opts)
        : io(io_context), options(std::move(opts)), read_buffer(k_read_size) {
        consoles[0].fd = options.stdout_fd;
        consoles[1].fd = options.stderr_fd;
        // Where fstat fails they count as two files: at worst a partial line on
        // one is not ended before the other writes.
        struct stat a {};
        struct stat b {};
        bool same = options.stdout_fd == options.stderr_fd ||
                    (::fstat(options.stdout_fd, &a) == 0 && ::fstat(options.stderr_fd, &b) == 0 &&
                     a.st_dev == b.st_dev && a.st_ino == b.st_ino);
        stderr_console = same ? &consoles[0] : &consoles[1];
    }

    // Null if `fd` cannot be watched (it is closed then). `error` keeps the first
    // failure of the worker's streams.
    std::shared_ptr<Stream> open_stream(int fd, std::string name, Console* console,
                                        const std::string& prefix, const StreamSink& sink,
                                        Status& error) {
        auto fail = [&error](Error failure) {
            if (error) error = std::unexpected(std::move(failure));
        };
        // Non-blocking, or a read would stall the whole loop; close-on-exec, so the
        // next worker spawned never inherits it.
        int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
            ::fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
            fail(system_error("fcntl(O_NONBLOCK, FD_CLOEXEC) on " + name + " pipe"));
            ::close(fd);
            return nullptr;
        }
        std::shared_ptr<Stream> stream;
        try {
            stream = std::make_shared<Stream>(io, fd);
        } catch (const boost::system::system_error& e) {  // epoll refused it (ENOSPC, ENOMEM)
            fail(Error{fmt::format("watching {} pipe: {}", name, e.code().message()),
                       exit_code::kInternal});
            ::close(fd);
            return nullptr;
        }
        stream->mux = this;
        stream->name = std::move(name);
        ++open_streams;
        // Unknown (0) if the kernel will not say: the pipe is then never grown.
        int pipe_size = ::fcntl(fd, F_GETPIPE_SZ);
        stream->pipe_size = pipe_size > 0 ? static_cast<std::size_t>(pipe_size) : 0;
        stream->prefix = prefix;
        if (sink.console && console->fd >= 0) stream->console = console;
        if (!sink.file_path.empty()) {
            stream->file_path = sink.file_path;
            stream->file_fd = ::open(sink.file_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
            if (stream->file_fd < 0) fail(system_error("opening log file " + sink.file_path));
        }
        return stream;
    }

    // A read that failed for a reason other than an empty pipe: the fd is not
    // a readable pipe any more, so what the worker writes from now on is lost.
    void read_failed(Stream& stream) {
        Error error = system_error("reading " + stream.name + " pipe");
        spdlog::error("{}; its output from then on is lost", error.message);
        close_stream(stream);
    }

    // Reads until the pipe is empty (a short read says so), then waits for the
    // next edge. Waiting only on an empty pipe is what makes the edge-triggered
    // reactor safe: any later write raises a new edge.
    void pump(const std::shared_ptr<Stream>& stream) {
        for (int i = 0; i < k_reads_per_turn; ++i) {
            ssize_t got = ::read(stream->pipe.native_handle(), read_buffer.data(), k_read_size);
            if (got > 0) {
                auto size = static_cast<std::size_t>(got);
                if (size == stream->pipe_size) grow_pipe(*stream);
                carry(stream, std::string_view(read_buffer.data(), size));
                if (size < k_read_size) return wait(stream);
            } else if (got == 0) {
                return close_stream(*stream);
            } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return wait(stream);
            } else if (errno != EINTR) {
                return read_failed(*stream);
            }
        }
        boost::asio::post(io, [stream] {
            if (stream->open) stream->mux->pump(stream);
        });
    }

    // A read that took a whole pipe's worth found it full: the worker was (or
    // was about to be) blocked on it.
    void grow_pipe(Stream& stream) {
        if (stream.pipe_grown || grown_pipes >= k_max_grown_pipes) return;
        // Fails where pipe-max-size or the user's pipe limits are lower: then
        // the pipe keeps its size, and no full read asks again.
        int size = ::fcntl(stream.pipe.native_handle(), F_SETPIPE_SZ, k_grown_pipe_size);
        if (size <= 0 || static_cast<std::size_t>(size) <= stream.pipe_size) {
            stream.pipe_size = 0;
            return;
        }
        stream.pipe_size = static_cast<std::size_t>(size);
        stream.pipe_grown = true;
        ++grown_pipes;
    }

    void wait(const std::shared_ptr<Stream>& stream) {
        stream->pipe.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                                [stream](const boost::system::error_code&) {
                                    // Errors surface again from read() in pump.
                                    if (stream->open) stream->mux->pump(stream);
                                });
    }

    // Collects a stream's segments for one console write.
    struct SegmentSink {
        OutputBuffer& output;
        const std::string& prefix;
        void operator()(const LineSplitter::Segment& segment) const {
            if (segment.starts_line) output.append(prefix);
            output.append(segment.text);
        }
    };

    // The first byte of every console write is reserved for the "\n" that
    // ends another stream's partial line; whether it is needed is decided once
    // per write in end_output, not per segment.
    SegmentSink begin_output(const Stream& stream) {
        output.clear();
        output.append("\n");
        return SegmentSink{output, stream.prefix};
    }

    void end_output(Stream& stream) {
        if (output.size() == 1) return;  // nothing collected
        Console& console = *stream.console;
        std::size_t skip = 1;
        if (console.owner != nullptr && console.owner != &stream) {
            console.owner->splitter.line_broken();  // its continuation gets a prefix
            skip = 0;
        }
        console.owner = stream.splitter.mid_line() ? &stream : nullptr;
        if (int error = write_all(console.fd, output.data() + skip, output.size() - skip))
            fail_console(console, error);
    }

    void carry(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
        bytes_carried += chunk.size();
        if (stream->file_fd >= 0) write_file(*stream, chunk);
        if (stream->tail) stream->tail->feed(chunk);
        if (stream->matcher) stream->matcher->feed(chunk);
        if (stream->console == nullptr || stream->console->failed) return;
        if (options.collapse_window.count() > 0) return collapse(stream, chunk);
        show(stream, chunk);
    }

    // The console path of a chunk: prefixed lines, a partial line held back a little.
    void show(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
        LineSplitter& splitter = stream->splitter;
        std::size_t pending_before = splitter.pending_size();
        SegmentSink sink = begin_output(*stream);
        splitter.feed_prefixed(chunk, stream->prefix, output);
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

    // --collapse-lines: the chunk's complete lines are held for the window (a line
    // begun in an earlier chunk too, while none of it was shown). What cannot be held
    // goes out as usual from there on: a '\r' (a progress bar), the rest of a line the
    // console shows part of, a line not complete yet (held back by the splitter as
    // always, and shown after what is held when it has to be), so that no stream's
    // output is ever reordered.
    void collapse(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
        Console& console = *stream->console;
        LineSplitter& splitter = stream->splitter;
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
            std::string line = splitter.has_partial() ? splitter.take_pending() : std::string();
            line.append(piece);
            console.held_bytes += line.size() + 1;
            console.held.push_back({stream, std::move(line)});
            chunk.remove_prefix(nl + 1);
        }
        // Bounded: a flood does not wait for the window.
        if (console.held_bytes > k_max_held) return flush_held(console);
        if (!console.window) {
            console.window = std::make_unique<boost::asio::steady_timer>(io);
            console.window->expires_after(options.collapse_window);
            console.window->async_wait([this, &console](const boost::system::error_code& ec) {
                if (!ec) flush_held(console);
            });
        }
    }

    // The held lines, each line that several streams printed alike once: a stream's
    // line joins the first group of the same text it is not in yet that comes after
    // its previous line's group, so every stream's lines keep their order.
    void flush_held(Console& console) {
        if (console.window) {
            console.window->cancel();
            console.window.reset();
        }
        if (console.held.empty()) return;
        struct Group {
            const std::string* line;
            Stream* first;
            std::uint64_t members = 0;       // Stream::bit of each
            std::size_t same_text = k_none;  // the previous group of the same text
        };
        std::vector<Group> groups;
        groups.reserve(console.held.size());
        std::unordered_map<std::string_view, std::size_t> newest;  // by text
        ++flushes;
        for (const auto& held : console.held) {
            Stream* stream = held.stream.get();
            if (stream->flush != flushes) stream->next_group = 0;
            stream->flush = flushes;
            const std::uint64_t bit = stream->bit < 64 ? std::uint64_t{1} << stream->bit : 0;
            std::size_t at = k_none;
            auto found = newest.find(held.line);
            if (bit != 0 && found != newest.end())
                for (std::size_t g = found->second; g != k_none && g >= stream->next_group;
                     g = groups[g].same_text)
                    if ((groups[g].members & bit) == 0) at = g;  // the earliest that fits
            if (at == k_none) {
                at = groups.size();
                groups.push_back(
                    {&held.line, stream, 0, found == newest.end() ? k_none : found->second});
                newest[held.line] = at;
            }
            groups[at].members |= bit;
            stream->next_group = at + 1;
        }
        output.clear();
        if (console.owner != nullptr) {  // another stream left the console mid-line
            console.owner->splitter.line_broken();
            console.owner = nullptr;
            output.append("\n");
        }
        for (const auto& group : groups) {
            const bool alone = (group.members & (group.members - 1)) == 0;
            output.append(alone ? group.first->prefix : group_prefix(group.members));
            output.append(*group.line);
            output.append("\n");
        }
        console.held.clear();
        console.held_bytes = 0;
        if (int error = write_all(console.fd, output.data(), output.size()))
            fail_console(console, error);
    }

    // The prefix of the streams whose bits are `members` ("[0-3,5]: "), made once.
    const std::string& group_prefix(std::uint64_t members) {
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

    void fail_console(Console& console, int error) {
        console.failed = true;
        if (console_error.empty())
            console_error = fmt::format(
                "writing worker output to ddprun's {}: {}; the workers ran on, and their "
                "output from then on was not shown (use --log_dir to keep it)",
                console.fd == options.stderr_fd ? "stderr" : "stdout", std::strerror(error));
    }

    void write_file(Stream& stream, std::string_view chunk) {
        int error = write_all(stream.file_fd, chunk.data(), chunk.size());
        if (error == 0) return;
        if (file_error.empty())
            file_error = "writing " + stream.file_path + ": " + std::strerror(error);
        ::close(stream.file_fd);
        stream.file_fd = -1;
    }

    // A partial line is shown once its first byte has waited partial_flush.
    // Timing from that byte, not from the last read, means a line that keeps
    // completing under a steady flow is never cut, while one that trickles in
    // without a newline (progress dots) still shows up every interval. At most
    // one timer per stream is in flight; it re-arms itself if the partial it
    // was set for was completed and a younger one is pending.
    void arm_partial_timer(const std::shared_ptr<Stream>& stream) {
        if (stream->timer_armed) return;
        stream->timer_armed = true;
        stream->partial_timer.expires_at(stream->partial_since + options.partial_flush);
        stream->partial_timer.async_wait([stream](const boost::system::error_code& ec) {
            stream->timer_armed = false;
            if (ec || !stream->open) return;
            stream->mux->on_partial_timer(stream);
        });
    }

    void on_partial_timer(const std::shared_ptr<Stream>& stream) {
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

    // EOF (or the end of the round): the pending partial goes out, and a
    // console left mid-line by this stream gets the newline the worker never
    // wrote, so the next output starts on its own line.
    void close_stream(Stream& stream) {
        if (!stream.open) return;
        if (stream.console != nullptr && !stream.console->failed) {
            if (stream.splitter.has_partial()) flush_held(*stream.console);
            stream.splitter.finish(begin_output(stream));
            if (stream.splitter.mid_line()) {
                output.append("\n");
                stream.splitter.line_broken();
            }
            end_output(stream);
        }
        if (stream.console != nullptr && stream.console->owner == &stream) {
            stream.console->owner = nullptr;
        }
        stream.open = false;
        if (stream.pipe_grown) --grown_pipes;  // its buffer goes with the worker's end
        stream.pipe_grown = false;
        boost::system::error_code ignored;
        stream.pipe.close(ignored);  // cancels the pending wait; its handler sees !open
        stream.partial_timer.cancel();
        if (stream.file_fd >= 0) ::close(stream.file_fd);
        stream.file_fd = -1;
        --open_streams;
    }

    // Reads what the pipe holds without waiting; closes it at EOF or, with
    // `close_anyway`, in any case. A wait still pending on it stays valid: it
    // finds the pipe empty and waits again.
    void read_now(const std::shared_ptr<Stream>& stream, bool close_anyway) {
        while (stream->open) {
            ssize_t got = ::read(stream->pipe.native_handle(), read_buffer.data(), k_read_size);
            if (got > 0) {
                carry(stream, std::string_view(read_buffer.data(), static_cast<std::size_t>(got)));
            } else if (got < 0 && errno == EINTR) {
                continue;
            } else if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if (!close_anyway) return;  // a writer still holds the pipe
                break;                      // the round is over
            } else if (got < 0) {
                return read_failed(*stream);
            } else {
                break;  // EOF
            }
        }
        close_stream(*stream);
    }

    void read_worker_now(Worker& worker, bool close_anyway) {
        for (const auto& stream : {worker.out, worker.err}) {
            if (stream && stream->open) read_now(stream, close_anyway);
        }
    }

    boost::asio::io_context& io;
    Options options;
    std::array<Console, 2> consoles;
    Console* stderr_console = nullptr;
    std::vector<char> read_buffer;  // shared: every read is handled before the next one
    OutputBuffer output;            // the assembled console write, reused
    // --collapse-lines: the streams by bit (a worker's two share one), the group
    // prefixes made so far (a re-added worker clears them: its round changed), and
    // a count of the flushes.
    std::vector<const Stream*> bit_streams;
    std::unordered_map<std::uint64_t, std::string> group_prefixes;
    std::uint64_t flushes = 0;
    std::map<int, Worker> workers;
    std::size_t open_streams = 0;
    std::size_t grown_pipes = 0;  // open pipes grown to k_grown_pipe_size
    std::size_t bytes_carried = 0;
    std::string file_error;
    std::string console_error;
};

LogMux::LogMux(boost::asio::io_context& io, Options options)
    : m_impl(std::make_unique<Impl>(io, std::move(options))) {}

LogMux::~LogMux() {
    drain_and_close_all();
}

Status LogMux::add_worker(int id, const StreamSource& source, int stdout_fd, int stderr_fd,
                          const StreamSink& out, const StreamSink& err) {
    Impl& impl = *m_impl;
    auto previous = impl.workers.find(id);
    if (previous != impl.workers.end()) impl.read_worker_now(previous->second, true);

    std::string prefix = expand_prefix(impl.options.prefix_template, source);
    Status error;
    Impl::Worker worker;
    worker.tail = std::make_shared<StderrTail>(impl.options.tail_lines);
    worker.out = impl.open_stream(stdout_fd, fmt::format("worker {}'s stdout", id),
                                  &impl.consoles[0], prefix, out, error);
    worker.err = impl.open_stream(stderr_fd, fmt::format("worker {}'s stderr", id),
                                  impl.stderr_console, prefix, err, error);
    if (impl.options.report_patterns)
        worker.matcher = std::make_shared<LineMatcher>(impl.options.report_patterns);
    // --collapse-lines: the worker's bit, the one it had if it was here before.
    std::size_t bit = impl.bit_streams.size();
    if (previous != impl.workers.end()) {
        for (const auto& stream : {previous->second.out, previous->second.err})
            if (stream) bit = stream->bit;
    }
    if (bit == impl.bit_streams.size()) impl.bit_streams.push_back(nullptr);
    impl.bit_streams[bit] = nullptr;  // the old streams go with the old worker
    impl.group_prefixes.clear();
    for (const auto& stream : {worker.out, worker.err})
        if (stream) {
            stream->source = source;
            stream->bit = bit;
            impl.bit_streams[bit] = stream.get();
        }
    if (worker.err) {
        worker.err->tail = worker.tail;
        worker.err->matcher = worker.matcher;
    }
    for (const auto& stream : {worker.out, worker.err}) {
        if (!stream) continue;
        boost::asio::post(impl.io, [stream] {
            if (stream->open) stream->mux->pump(stream);
        });
    }
    impl.workers[id] = std::move(worker);
    return error;
}

void LogMux::read_available(int id) {
    auto it = m_impl->workers.find(id);
    if (it != m_impl->workers.end()) m_impl->read_worker_now(it->second, false);
}

void LogMux::drain_and_close_all() {
    for (auto& [id, worker] : m_impl->workers) m_impl->read_worker_now(worker, true);
    for (auto& console : m_impl->consoles)
        if (!console.failed) m_impl->flush_held(console);
}

std::vector<std::string> LogMux::stderr_tail(int id) const {
    auto it = m_impl->workers.find(id);
    if (it == m_impl->workers.end()) return {};
    return it->second.tail->lines();
}

LineMatcher::Matches LogMux::report_lines(int id) const {
    auto it = m_impl->workers.find(id);
    if (it == m_impl->workers.end() || !it->second.matcher) return {};
    return it->second.matcher->matches();
}

bool LogMux::all_closed() const {
    return m_impl->open_streams == 0;
}

const std::string& LogMux::file_error() const {
    return m_impl->file_error;
}

const std::string& LogMux::console_error() const {
    return m_impl->console_error;
}

std::size_t LogMux::bytes_carried() const {
    return m_impl->bytes_carried;
}

}  // namespace ddprun
