// torch's FileTimer watchdog, served on the agent's loop (see file_timer.hpp).
// torch's own server is a thread that polls the FIFO every 0.1 s; here the
// FIFO's read end waits on the loop and one steady_timer is armed for the
// earliest expiration, so an idle watchdog costs nothing.
#include "ddprun/hang/file_timer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/base/text.hpp"

namespace asio = boost::asio;

namespace ddprun {
namespace {

using nlohmann::json;

constexpr std::size_t k_max_line = k_file_timer_max_line;
// A worker may hold many scopes, but not without bound: every timer costs memory.
constexpr std::size_t k_max_timers = 10000;
constexpr std::size_t k_max_scope_shown = 200;
// A far expiration is waited for in steps, so no duration overflows.
constexpr double k_longest_wait_s = 3600;
// How much one wake-up reads before the loop serves others again.
constexpr std::size_t k_max_read_per_wakeup = 64 * 1024;
// A process tree deeper than this is not one a worker made.
constexpr int k_max_ancestors = 256;

double wall_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The scope, from a worker, as one safe line: JSON escapes for control characters.
std::string shown_scope(const std::string& scope) {
    std::string cut = scope.substr(0, k_max_scope_shown);
    std::string text = json(cut).dump(-1, ' ', false, json::error_handler_t::replace);
    text = text.substr(1, text.size() - 2);  // the quotes dump() adds
    if (cut.size() < scope.size()) text += " [...]";
    return text;
}

}  // namespace

struct FileTimerServer::Impl : std::enable_shared_from_this<FileTimerServer::Impl> {
    // The worker a pid belongs to.
    struct Owner {
        int rank = 0;
        pid_t worker = 0;
    };

    std::string path;
    WorkerRank worker_rank;
    asio::posix::stream_descriptor fifo;
    // Held so that the read end never sees EOF when the last client closes.
    UniqueFd write_end;
    asio::steady_timer timer;
    dev_t fifo_device = 0;
    ino_t fifo_inode = 0;
    FileTimerTable table;
    std::string partial;  // a line's bytes so far
    bool overlong = false;
    bool refused_before = false;

    Impl(asio::io_context& io, std::string path_, WorkerRank worker_rank_, int read_fd,
         UniqueFd write_fd)
        : path(std::move(path_)),
          worker_rank(std::move(worker_rank_)),
          fifo(io, read_fd),
          write_end(std::move(write_fd)),
          timer(io) {}

    ~Impl() {
        // Only the FIFO made here: a new one made meanwhile at the path is someone else's.
        struct stat info {};
        if (::lstat(path.c_str(), &info) == 0 && S_ISFIFO(info.st_mode) &&
            info.st_dev == fifo_device && info.st_ino == fifo_inode)
            ::unlink(path.c_str());
    }

    void wait_readable();
    void read_requests();
    void feed(std::string_view chunk);
    void handle_line(std::string_view line);
    void refuse(const std::string& why);
    void drop_gone_pids();
    void arm();
    void on_expiry(const FileTimerTable::Expiry& expiry);
    std::optional<Owner> owner_of(pid_t pid) const;
};

// Only this node's workers and what they started may be signalled: a line in
// the FIFO names a pid but proves nothing about who wrote it. A writer (one of
// this user's processes: the FIFO is 0600) could kill the job's processes with
// kill(2) anyway; what it must not gain is ddprun signalling anything else. A
// process is the job's when a running worker is among its ancestors, or, for
// an orphan the agent (a subreaper) adopted, when it is still in a worker's
// process group. Checked when a pid's first timer arrives and again just
// before the signal, as the pid may have ended and been reused meanwhile.
std::optional<FileTimerServer::Impl::Owner> FileTimerServer::Impl::owner_of(pid_t pid) const {
    const pid_t agent = ::getpid();
    std::optional<pid_t> group;
    pid_t current = pid;
    for (int depth = 0; depth < k_max_ancestors && current > 1 && current != agent; ++depth) {
        if (auto rank = worker_rank(current)) return Owner{*rank, current};
        auto ids = process_ids(current);
        if (!ids) break;
        if (!group) group = ids->pgid;
        current = ids->ppid;
    }
    if (group && *group > 1)
        if (auto rank = worker_rank(*group)) return Owner{*rank, *group};
    return std::nullopt;
}

void FileTimerServer::Impl::wait_readable() {
    fifo.async_wait(asio::posix::stream_descriptor::wait_read,
                    [weak = weak_from_this()](const boost::system::error_code& ec) {
                        auto self = weak.lock();
                        if (!self || ec == asio::error::operation_aborted) return;
                        if (ec) {
                            spdlog::error(
                                "torch FileTimer: waiting on {}: {}; expires() scopes "
                                "are no longer watched",
                                self->path, ec.message());
                            return;
                        }
                        self->read_requests();
                        self->wait_readable();
                    });
}

void FileTimerServer::Impl::read_requests() {
    // Until the FIFO is empty (never its end: write_end is held), or enough for one wakeup.
    std::size_t total = 0;
    read_chunks(fifo.native_handle(), [&](std::string_view chunk) {
        feed(chunk);
        total += chunk.size();
        return total < k_max_read_per_wakeup;
    });
    drop_gone_pids();
    arm();
}

void FileTimerServer::Impl::feed(std::string_view chunk) {
    while (!chunk.empty()) {
        const auto newline = chunk.find('\n');
        const std::string_view piece = chunk.substr(0, newline);
        if (!overlong && partial.size() + piece.size() > k_max_line) {
            overlong = true;
            partial.clear();
        }
        if (!overlong) partial.append(piece);
        if (newline == std::string_view::npos) return;
        chunk.remove_prefix(newline + 1);
        if (overlong)
            refuse(fmt::format("a line longer than {} bytes", k_max_line));
        else
            handle_line(partial);
        partial.clear();
        overlong = false;
    }
}

void FileTimerServer::Impl::handle_line(std::string_view line) {
    if (trim(line).empty()) return;
    auto request = parse_file_timer_request(line);
    if (!request) return refuse(request.error());
    if (!request->is_release() && !table.holds(request->pid) && !owner_of(request->pid))
        return refuse(fmt::format("pid {} is not one of this node's workers or their descendants",
                                  request->pid));
    if (!table.apply(*request, wall_now(), k_max_timers))
        refuse(
            fmt::format("pid {} asked for a timer beyond the {} held", request->pid, k_max_timers));
}

// A flood of bad lines must not flood the console: the first one warns.
void FileTimerServer::Impl::refuse(const std::string& why) {
    if (!refused_before) {
        spdlog::warn(
            "torch FileTimer: ignoring a request in {}: {} (further ones are logged at "
            "debug level)",
            path, why);
        refused_before = true;
    } else {
        spdlog::debug("torch FileTimer: ignoring a request in {}: {}", path, why);
    }
}

// A worker that ended holds its timers no longer (its pid may be reused).
void FileTimerServer::Impl::drop_gone_pids() {
    for (pid_t pid : table.pids()) {
        if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
        spdlog::debug("torch FileTimer: pid {} ended; dropping its timers", pid);
        table.forget(pid);
    }
}

void FileTimerServer::Impl::arm() {
    auto next = table.next_expiration();
    if (!next) {
        timer.cancel();
        return;
    }
    const double wait = std::clamp(*next - wall_now(), 0.0, k_longest_wait_s);
    timer.expires_after(
        std::chrono::ceil<std::chrono::microseconds>(std::chrono::duration<double>(wait)));
    timer.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
        auto self = weak.lock();
        if (!self || ec) return;
        for (const auto& expiry : self->table.take_expired(wall_now())) self->on_expiry(expiry);
        self->arm();
    });
}

void FileTimerServer::Impl::on_expiry(const FileTimerTable::Expiry& expiry) {
    const pid_t pid = expiry.pid;
    const std::string scope = shown_scope(expiry.scope_id);
    const std::string set_for =
        expiry.set_for >= 0
            ? fmt::format(" (set for {})",
                          duration_text(std::chrono::duration<double>(expiry.set_for)))
            : "";
    // Checked again now: the pid may have ended, or been reused by a stranger.
    auto owner = owner_of(pid);
    if (!owner) {
        spdlog::debug(
            "torch FileTimer: scope '{}' of pid {} expired{}, but the pid is no "
            "longer a worker's; not signalled",
            scope, pid, set_for);
        return;
    }
    const std::string who = owner->worker == pid
                                ? fmt::format("rank {} (pid {})", owner->rank, pid)
                                : fmt::format("rank {} (pid {}, a process of worker pid {})",
                                              owner->rank, pid, owner->worker);
    if (expiry.signal <= 0) {
        spdlog::warn("{}: FileTimer scope '{}' expired{}; it asked for no signal, none sent", who,
                     scope, set_for);
        return;
    }
    if (::kill(pid, expiry.signal) != 0) {
        if (errno != ESRCH)
            spdlog::error("{}: FileTimer scope '{}' expired{}; sending {} failed: {}", who, scope,
                          set_for, signal_name(expiry.signal), std::strerror(errno));
        return;
    }
    spdlog::warn("{}: FileTimer scope '{}' expired{}; sent {}", who, scope, set_for,
                 signal_name(expiry.signal));
}

FileTimerServer::FileTimerServer(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}

FileTimerServer::~FileTimerServer() = default;

const std::string& FileTimerServer::path() const {
    return m_impl->path;
}

std::size_t FileTimerServer::timer_count() const {
    return m_impl->table.size();
}

std::expected<std::unique_ptr<FileTimerServer>, Error> FileTimerServer::create(
    asio::io_context& io, std::string path, WorkerRank worker_rank, bool user_path) {
    const std::string what_to_do =
        user_path ? "point TORCHELASTIC_TIMER_FILE at a new path in a writable directory"
                  : "set TMPDIR to a writable directory";
    auto failed = [&](const std::string& what) {
        std::string message = fmt::format(
            "torch FileTimer (TORCHELASTIC_ENABLE_FILE_TIMER=1): {}; {}", what, what_to_do);
        return std::unexpected(
            Error{std::move(message), user_path ? exit_code::kUsage : exit_code::kInternal});
    };
    auto call_failed = [&](const char* call) {
        return failed(fmt::format("{} {}: {}", call, path, std::strerror(errno)));
    };

    struct stat info {};
    if (::lstat(path.c_str(), &info) == 0) {
        if (!S_ISFIFO(info.st_mode))
            return failed(fmt::format("{} exists and is not a FIFO", path));
        // A FIFO left by an earlier run is replaced, as torch's server does.
        if (::unlink(path.c_str()) != 0) return call_failed("unlink");
    } else if (errno != ENOENT) {
        return call_failed("lstat");
    }
    // Only this user's processes may write requests (torch leaves it to the umask).
    if (::mkfifo(path.c_str(), 0600) != 0) return call_failed("mkfifo");
    auto made_but = [&](const char* call) {
        auto error = call_failed(call);
        ::unlink(path.c_str());
        return error;
    };
    // The read end first: opening a FIFO's write end without a reader fails (ENXIO).
    UniqueFd read_end(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (!read_end) return made_but("open");
    UniqueFd write_end(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (!write_end) return made_but("open");
    if (::fstat(read_end.get(), &info) != 0) return made_but("fstat");

    auto impl = std::make_shared<Impl>(io, std::move(path), std::move(worker_rank),
                                       read_end.release(), std::move(write_end));
    impl->fifo_device = info.st_dev;
    impl->fifo_inode = info.st_ino;
    impl->wait_readable();
    spdlog::debug("serving torch's FileTimer at {}", impl->path);
    return std::unique_ptr<FileTimerServer>(new FileTimerServer(std::move(impl)));
}

std::expected<std::unique_ptr<FileTimerServer>, Error> serve_file_timer(
    asio::io_context& io, const Environment& env, const std::string& scratch_dir,
    FileTimerServer::WorkerRank worker_rank) {
    auto enabled = env.find("TORCHELASTIC_ENABLE_FILE_TIMER");
    if (enabled == env.end()) return nullptr;
    // torchrun compares with "1" and nothing else; "true" leaves the watchdog off there too.
    if (enabled->second != "1") {
        if (enabled->second != "0" && !enabled->second.empty())
            spdlog::warn(
                "TORCHELASTIC_ENABLE_FILE_TIMER={}: torch's FileTimer server is started "
                "for 1 only (as torchrun does); not starting it",
                enabled->second);
        return nullptr;
    }
    // An empty TORCHELASTIC_TIMER_FILE counts as unset (torchrun would fail on it).
    auto file = env.find("TORCHELASTIC_TIMER_FILE");
    const bool user_path = file != env.end() && !file->second.empty();
    std::string path = user_path ? file->second : scratch_dir + "/file_timer.fifo";
    return FileTimerServer::create(io, std::move(path), std::move(worker_rank), user_path);
}

}  // namespace ddprun
