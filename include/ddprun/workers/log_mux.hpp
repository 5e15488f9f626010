// LogMux: carries every worker's stdout/stderr from its pipe to ddprun's own
// stdout/stderr (prefixed, whole segments, never interleaved mid-line) and to
// per-rank log files, copies the lines that --duplicate-*-filters pick to the
// attempt's filtered files, and keeps the tail of each worker's stderr for the
// failure report. Runs on the agent's io_context; never blocks on a pipe.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/base/error.hpp"
#include "ddprun/base/prefix_template.hpp"
#include "ddprun/workers/stderr_tail.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

// Where one worker stream goes.
struct StreamSink {
    bool console = true;    // shown on ddprun's stdout (for stdout) / stderr (for stderr)
    std::string file_path;  // empty: no file. Parent directories must exist.
    // A tee'd stream (torchrun's --tee): its lines that hold a filter given to
    // LogMux::duplicate_lines() are copied to that file too.
    bool duplicate = false;
};

// Which of a worker's two streams.
enum class WorkerStream { Stdout, Stderr };

// The io_context must outlive the LogMux and be run by a single thread (the
// agent's loop): pipes are read in their readiness handlers, and draining
// relies on no other thread dispatching them meanwhile.
class LogMux {
  public:
    struct Options {
        std::string prefix_template = "[{rank}]: ";
        // A line still without terminator this long after its first byte
        // arrived is shown as far as it goes (its continuation follows it).
        std::chrono::milliseconds partial_flush{100};
        std::size_t tail_lines = 20;  // stderr lines kept per worker
        // --collapse-lines: a complete line (no '\r') is held this long, and lines
        // that several workers printed alike meanwhile go out once, with their
        // ranks ("[0-7]: "); 0: off. Partial lines and '\r' segments are never held.
        std::chrono::milliseconds collapse_window{0};
        // --report-lines: stderr lines that match are kept too (LineMatcher); null: none.
        std::shared_ptr<const LineMatcher::Patterns> report_patterns;
        int stdout_fd = 1;  // the console; tests pass pipes
        int stderr_fd = 2;
    };

    LogMux(boost::asio::io_context& io, Options options);
    ~LogMux();
    LogMux(const LogMux&) = delete;
    LogMux& operator=(const LogMux&) = delete;

    // Starts carrying a worker's streams. Takes ownership of both read ends
    // (they are made non-blocking). `id` is the caller's handle for the worker
    // (the agent uses the local rank). Fails when a log file cannot be opened:
    // the pipes are carried anyway (console, tail, the other file), so no
    // output is lost while the caller decides what to do. Fails too when a pipe
    // cannot be made non-blocking (not a pipe?): that one is closed at once.
    // Either error names the call and the file or the worker's stream.
    // Adding an id again (next round) first drains and closes its old pipes.
    Status add_worker(int id, const StreamSource& source, int stdout_fd, int stderr_fd,
                      const StreamSink& out, const StreamSink& err);

    // --duplicate-stdout-filters / --duplicate-stderr-filters (torchrun 2.x): from now
    // on, every line of a `which` stream added with StreamSink::duplicate that contains
    // one of `filters` (plain substrings; duplicate_filter.hpp) is also written, with its
    // console prefix, to `path`, one file for every worker's streams of that kind (whole
    // lines, never interleaved). Creates (truncates) the file now, as torchrun does, even
    // if no line ever matches; fails naming it. Call before add_worker(); no filters:
    // nothing happens.
    Status duplicate_lines(WorkerStream which, std::vector<std::string> filters,
                           const std::string& path);

    // Reads what worker `id`'s pipes hold right now, without waiting, and
    // carries it as usual (a pipe at EOF is closed). The agent calls it when a
    // worker has exited, so stderr_tail() includes its last words before the
    // loop would have got to them. Unknown ids are ignored.
    void read_available(int id);

    // Reads whatever is still buffered in every pipe without waiting (all
    // writers are known to be dead), emits pending partial lines, closes the
    // pipes and files. Called at the end of every round; the destructor does
    // the same. A writer still alive (a grandchild holding the pipe) is cut
    // off: what it wrote so far is carried, later writes get EPIPE.
    void drain_and_close_all();

    // The last `tail_lines` lines the worker wrote to stderr, as
    // StderrTail::lines() gives them (stderr_tail.hpp). Kept after
    // drain_and_close_all().
    std::vector<std::string> stderr_tail(int id) const;
    // The stderr lines that matched Options::report_patterns (none without them).
    LineMatcher::Matches report_lines(int id) const;

    // True once every added pipe reached EOF (or was closed).
    bool all_closed() const;

    // First log-file write error, if any (e.g. disk full): "" when none. The
    // mux keeps carrying output to the console after such an error.
    const std::string& file_error() const;

    // First console write error (e.g. EPIPE: ddprun's stdout was closed), as one
    // line for the user: "" when none. Workers keep running regardless.
    const std::string& console_error() const;

    std::size_t bytes_carried() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace ddprun
