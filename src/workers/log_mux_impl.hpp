// LogMux's inside, shared by its two halves: log_mux.cpp reads the pipes and
// writes the files, log_mux_console.cpp writes the console. One concern, read
// whole: every path to the console (prefixed lines, partial lines and their
// timer, a console another stream left mid-line, the lines --collapse-lines
// holds) shares one Impl's console state, and the order of what reaches the
// console is only right when they are read together.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/line_splitter.hpp"
#include "ddprun/workers/duplicate_filter.hpp"
#include "ddprun/workers/line_groups.hpp"
#include "ddprun/workers/log_mux.hpp"
#include "ddprun/workers/stderr_tail.hpp"

namespace ddprun {

struct LogMux::Impl {
    struct Stream;

    // --duplicate-*-filters: the attempt's filtered_stdout.log or filtered_stderr.log,
    // shared by every worker's streams of that kind.
    struct FilteredFile {
        UniqueFd fd;  // closed after a write failed
        std::string path;
        std::shared_ptr<const DuplicateFilter::Needles> needles;
    };

    // One of ddprun's own output fds. When stdout and stderr are the same file
    // (a terminal, 2>&1) both streams share one Console, so a partial line on one
    // is terminated before the other writes.
    struct Console {
        int fd = -1;
        Stream* owner = nullptr;  // the stream that left this console mid-line
        bool failed = false;      // a write failed (e.g. EPIPE): stop writing
        // --collapse-lines: the lines held, as groups, and the timer that shows the
        // oldest group when its window ends (running while any is held).
        LineGroups held;
        std::unique_ptr<boost::asio::steady_timer> window;
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
        Console* console = nullptr;                 // null: not shown on the console
        std::size_t pipe_size = 0;                  // its capacity; 0: unknown or not to be grown
        bool pipe_grown = false;                    // counted in grown_pipes
        std::shared_ptr<const std::string> prefix;  // a worker's streams share it
        StreamSource source;  // for the prefix of lines it printed alike with others
        // --collapse-lines: its place in bit_streams (a worker's streams share it; 64
        // and up: never grouped).
        std::size_t bit = 64;
        LineSplitter splitter;
        int file_fd = -1;
        std::string file_path;
        std::shared_ptr<StderrTail> tail;      // stderr streams only
        std::shared_ptr<LineMatcher> matcher;  // stderr streams, with --report-lines
        // A tee'd stream, with --duplicate-*-filters: its matching lines go to `filtered`.
        FilteredFile* filtered = nullptr;
        std::optional<DuplicateFilter> filter;
    };

    struct Worker {
        std::shared_ptr<Stream> out, err;
        std::shared_ptr<StderrTail> tail;
        std::shared_ptr<LineMatcher> matcher;
    };

    Impl(boost::asio::io_context& io_context, Options opts);

    // --- the pipes and the files (log_mux.cpp)

    // Null if `fd` cannot be watched (it is closed then). `error` keeps the first
    // failure of the worker's streams.
    std::shared_ptr<Stream> open_stream(int fd, std::string name, Console* console,
                                        FilteredFile& filtered_file,
                                        std::shared_ptr<const std::string> prefix,
                                        const StreamSink& sink, Status& error);

    // A read that failed for a reason other than an empty pipe: the fd is not
    // a readable pipe any more, so what the worker writes from now on is lost.
    void read_failed(Stream& stream);

    // Reads until the pipe is empty (a short read says so), then waits for the
    // next edge. Waiting only on an empty pipe is what makes the edge-triggered
    // reactor safe: any later write raises a new edge.
    void pump(const std::shared_ptr<Stream>& stream);

    // A read that took a whole pipe's worth found it full: the worker was (or
    // was about to be) blocked on it.
    void grow_pipe(Stream& stream);

    void wait(const std::shared_ptr<Stream>& stream);

    void carry(const std::shared_ptr<Stream>& stream, std::string_view chunk);

    void write_file(Stream& stream, std::string_view chunk);

    // --duplicate-*-filters: the chunk's matching lines, prefixed, in one write to the
    // stream's filtered file.
    void duplicate(Stream& stream, std::string_view chunk);

    // What filtered_output holds, to `file`, in one write.
    void write_filtered(FilteredFile& file);

    // EOF (or the end of the round): the pending partial goes out, and a
    // console left mid-line by this stream gets the newline the worker never
    // wrote, so the next output starts on its own line.
    void close_stream(Stream& stream);

    // Reads what the pipe holds without waiting; closes it at EOF or, with
    // `close_anyway`, in any case. A wait still pending on it stays valid: it
    // finds the pipe empty and waits again.
    void read_now(const std::shared_ptr<Stream>& stream, bool close_anyway);

    void read_worker_now(Worker& worker, bool close_anyway);

    // --- the console (log_mux_console.cpp)

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
    SegmentSink begin_output(const Stream& stream);

    void end_output(Stream& stream);

    // The console path of a chunk: prefixed lines, a partial line held back a little.
    void show(const std::shared_ptr<Stream>& stream, std::string_view chunk);

    // --collapse-lines: the chunk's complete lines are held for the window (a line
    // begun in an earlier chunk too, while none of it was shown). What cannot be held
    // goes out as usual from there on: a '\r' (a progress bar), the rest of a line the
    // console shows part of, a line not complete yet (held back by the splitter as
    // always, and shown after what is held when it has to be), so that no stream's
    // output is ever reordered.
    void collapse(const std::shared_ptr<Stream>& stream, std::string_view chunk);

    // The window of the oldest group held; each group waits its own whole window,
    // so lines printed alike within it meet whenever the group before went out.
    void arm_window(Console& console);

    // Everything held, before another path writes to the console.
    void flush_held(Console& console);

    // The groups whose first line arrived by `until`, each once; the window is set
    // again for what stays held.
    void show_held(Console& console, std::chrono::steady_clock::time_point until);

    // The prefix of the streams whose bits are `members` ("[0-3,5]: "), made once.
    const std::string& group_prefix(std::uint64_t members);

    void fail_console(Console& console, int error);

    // A partial line is shown once its first byte has waited partial_flush.
    // Timing from that byte, not from the last read, means a line that keeps
    // completing under a steady flow is never cut, while one that trickles in
    // without a newline (progress dots) still shows up every interval. At most
    // one timer per stream is in flight; it re-arms itself if the partial it
    // was set for was completed and a younger one is pending.
    void arm_partial_timer(const std::shared_ptr<Stream>& stream);

    void on_partial_timer(const std::shared_ptr<Stream>& stream);

    boost::asio::io_context& io;
    Options options;
    std::array<Console, 2> consoles;
    Console* stderr_console = nullptr;
    std::vector<char> read_buffer;  // shared: every read is handled before the next one
    OutputBuffer output;            // the assembled console write, reused
    // --collapse-lines: the streams by bit (a worker's two share one), the group
    // prefixes made so far (a re-added worker clears them: its round changed).
    std::vector<const Stream*> bit_streams;
    std::unordered_map<std::uint64_t, std::string> group_prefixes;
    std::map<int, Worker> workers;
    std::array<FilteredFile, 2> filtered;  // stdout's, stderr's
    std::string filtered_output;           // the lines for one write to a filtered file, reused
    std::size_t open_streams = 0;
    std::size_t grown_pipes = 0;  // open pipes grown to k_grown_pipe_size
    std::size_t bytes_carried = 0;
    std::string file_error;
    std::string console_error;
};

}  // namespace ddprun
