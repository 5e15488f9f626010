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
#include "ddprun/workers/log_mux.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <cstring>

#include "ddprun/base/logging.hpp"
#include "log_mux_impl.hpp"

namespace ddprun {

namespace {

constexpr std::size_t k_read_size = 128 * 1024;
// A full read means the pipe may hold more; after this many in a row the
// stream yields so one chatty worker cannot starve the others or the timers.
constexpr int k_reads_per_turn = 16;
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

}  // namespace

LogMux::Impl::Impl(boost::asio::io_context& io_context, Options opts)
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

std::shared_ptr<LogMux::Impl::Stream> LogMux::Impl::open_stream(
    int fd, std::string name, Console* console, FilteredFile& filtered_file,
    std::shared_ptr<const std::string> prefix, const StreamSink& sink, Status& error) {
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
    stream->prefix = std::move(prefix);
    if (sink.console && console->fd >= 0) stream->console = console;
    if (!sink.file_path.empty()) {
        stream->file_path = sink.file_path;
        stream->file_fd = ::open(sink.file_path.c_str(),
                                 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
        if (stream->file_fd < 0) fail(system_error("opening log file " + sink.file_path));
    }
    if (sink.duplicate && filtered_file.fd) {
        stream->filtered = &filtered_file;
        stream->filter.emplace(filtered_file.needles);
    }
    return stream;
}

void LogMux::Impl::read_failed(Stream& stream) {
    Error error = system_error("reading " + stream.name + " pipe");
    spdlog::error("{}; its output from then on is lost", error.message);
    close_stream(stream);
}

void LogMux::Impl::pump(const std::shared_ptr<Stream>& stream) {
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

void LogMux::Impl::grow_pipe(Stream& stream) {
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

void LogMux::Impl::wait(const std::shared_ptr<Stream>& stream) {
    stream->pipe.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                            [stream](const boost::system::error_code&) {
                                // Errors surface again from read() in pump.
                                if (stream->open) stream->mux->pump(stream);
                            });
}

void LogMux::Impl::carry(const std::shared_ptr<Stream>& stream, std::string_view chunk) {
    bytes_carried += chunk.size();
    if (stream->file_fd >= 0) write_file(*stream, chunk);
    if (stream->tail) stream->tail->feed(chunk);
    if (stream->matcher) stream->matcher->feed(chunk);
    if (stream->filter) duplicate(*stream, chunk);
    if (stream->console == nullptr || stream->console->failed) return;
    if (options.collapse_window.count() > 0) return collapse(stream, chunk);
    show(stream, chunk);
}

void LogMux::Impl::write_file(Stream& stream, std::string_view chunk) {
    int error = write_all(stream.file_fd, chunk);
    if (error == 0) return;
    if (file_error.empty())
        file_error = "writing " + stream.file_path + ": " + std::strerror(error);
    ::close(stream.file_fd);
    stream.file_fd = -1;
}

void LogMux::Impl::duplicate(Stream& stream, std::string_view chunk) {
    filtered_output.clear();
    stream.filter->feed(chunk, *stream.prefix, filtered_output);
    write_filtered(*stream.filtered);
}

void LogMux::Impl::write_filtered(FilteredFile& file) {
    if (filtered_output.empty() || !file.fd) return;
    int error = write_all(file.fd.get(), filtered_output);
    if (error == 0) return;
    if (file_error.empty()) file_error = "writing " + file.path + ": " + std::strerror(error);
    file.fd.reset();
}

void LogMux::Impl::close_stream(Stream& stream) {
    if (!stream.open) return;
    if (stream.filter) {
        filtered_output.clear();
        stream.filter->finish(*stream.prefix, filtered_output);
        write_filtered(*stream.filtered);
        stream.filter.reset();
    }
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

void LogMux::Impl::read_now(const std::shared_ptr<Stream>& stream, bool close_anyway) {
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

void LogMux::Impl::read_worker_now(Worker& worker, bool close_anyway) {
    for (const auto& stream : {worker.out, worker.err}) {
        if (stream && stream->open) read_now(stream, close_anyway);
    }
}

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

    auto prefix =
        std::make_shared<const std::string>(expand_prefix(impl.options.prefix_template, source));
    Status error;
    Impl::Worker worker;
    worker.tail = std::make_shared<StderrTail>(impl.options.tail_lines);
    worker.out = impl.open_stream(stdout_fd, fmt::format("worker {}'s stdout", id),
                                  &impl.consoles[0], impl.filtered[0], prefix, out, error);
    worker.err = impl.open_stream(stderr_fd, fmt::format("worker {}'s stderr", id),
                                  impl.stderr_console, impl.filtered[1], prefix, err, error);
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

Status LogMux::duplicate_lines(WorkerStream which, std::vector<std::string> filters,
                               const std::string& path) {
    if (filters.empty()) return {};
    Impl::FilteredFile& file = m_impl->filtered[which == WorkerStream::Stdout ? 0 : 1];
    file.path = path;
    file.needles = std::make_shared<const DuplicateFilter::Needles>(std::move(filters));
    file.fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644));
    if (!file.fd) return std::unexpected(system_error("opening log file " + path));
    return {};
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
