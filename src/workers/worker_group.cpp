// One round's workers on this node (see worker_group.hpp).
#include "ddprun/workers/worker_group.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/hang/file_timer.hpp"
#include "ddprun/hang/progress.hpp"
#include "ddprun/workers/log_mux.hpp"
#include "ddprun/workers/oom.hpp"
#include "ddprun/workers/spawn.hpp"
#include "ddprun/workers/worker_output.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace ddprun {
namespace {

struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool running = false;
    WorkerOutcome outcome;
    std::string dir;                          // its error file, and its logs under --log_dir
    std::string error_file;                   // TORCHELASTIC_ERROR_FILE
    std::optional<ProgressChannel> progress;  // with --hang-timeout
};

std::expected<std::pair<UniqueFd, UniqueFd>, Error> make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return std::unexpected(system_error("pipe2"));
    return std::pair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Where round `round`'s files live: <root>/<run id>/attempt_<round>/<local rank>/ holds
// stdout.log, stderr.log (under --log_dir) and error.json (under --log_dir or scratch);
// the attempt's own directory holds filtered_stdout.log and filtered_stderr.log (under
// --log_dir, with --duplicate-*-filters).
std::string attempt_dir(const std::string& root, const std::string& run_id, int round) {
    return fmt::format("{}/{}/attempt_{}", root, run_id, round);
}

}  // namespace

struct WorkerGroup::Impl {
    asio::io_context& io;
    const LaunchContext& ctx;
    std::function<void()> on_given_up;
    Options options;
    asio::steady_timer timer{io};  // the stop's grace, then the kill's bound
    UniqueFd dev_null;
    std::vector<Worker> workers;
    std::unique_ptr<LogMux> mux;
    int running = 0;
    bool killing = false;
    int round = 0;        // DDPRUN_ROUND of the workers, for the log prefix
    bool beaten = false;  // a worker of this round wrote to its progress fd
    OomWatch oom;         // the memory cgroup's OOM kills since the round's start
    std::shared_ptr<const LineMatcher::Patterns> report_patterns;  // report_patterns(); null: none
    // torch's FileTimer watchdog, decided at the first start(); null: not asked for.
    std::optional<std::unique_ptr<FileTimerServer>> file_timer;

    Impl(asio::io_context& io_, const LaunchContext& ctx_, std::function<void()> given_up,
         Options options_)
        : io(io_), ctx(ctx_), on_given_up(std::move(given_up)), options(options_) {}

    Status prepare_dirs();
    Status spawn_all();
    void complete(Worker& w);
    void keep_report_lines(Worker& w);  // --report-lines' matches, into its outcome
};

WorkerGroup::WorkerGroup(asio::io_context& io, const LaunchContext& context,
                         std::function<void()> on_given_up, Options options)
    : m_impl(std::make_unique<Impl>(io, context, std::move(on_given_up), options)) {}

WorkerGroup::WorkerGroup(asio::io_context& io, const LaunchContext& context,
                         std::function<void()> on_given_up)
    : WorkerGroup(io, context, std::move(on_given_up), Options{}) {}

WorkerGroup::~WorkerGroup() = default;

Status WorkerGroup::start(int round, const RoundInfo& info) {
    auto& impl = *m_impl;
    const auto& ctx = impl.ctx;
    if (!impl.dev_null) {
        impl.dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!impl.dev_null) return std::unexpected(system_error("open /dev/null"));
    }
    impl.timer.cancel();
    impl.killing = false;
    impl.running = 0;
    impl.round = info.round;
    impl.beaten = false;
    impl.workers.clear();
    const std::string root = ctx.log_dir.empty() ? ctx.scratch_dir : ctx.log_dir;
    const std::string error_dir = attempt_dir(root, ctx.config.rdzv_id, round);
    if (!impl.file_timer) {
        auto served = serve_file_timer(impl.io, ctx.env, ctx.scratch_dir, [&impl](pid_t pid) {
            for (const auto& w : impl.workers)
                if (w.running && w.pid == pid) return std::optional<int>(w.spec.rank);
            return std::optional<int>();
        });
        if (!served) return std::unexpected(served.error());
        impl.file_timer = std::move(*served);
    }
    for (auto& spec :
         plan_node(ctx.config, ctx.resources, info, ctx.env, error_dir, ctx.bindings)) {
        Worker w;
        w.spec = std::move(spec);
        w.outcome.rank = w.spec.rank;
        w.outcome.local_rank = w.spec.local_rank;
        w.outcome.node_rank = w.spec.node_rank;
        w.outcome.host = ctx.host;
        w.dir = fmt::format("{}/{}", error_dir, w.spec.local_rank);
        for (const auto& [name, value] : w.spec.env)
            if (name == "TORCHELASTIC_ERROR_FILE") w.error_file = value;
        if (*impl.file_timer)
            w.spec.env.emplace_back("TORCHELASTIC_TIMER_FILE", (*impl.file_timer)->path());
        impl.workers.push_back(std::move(w));
    }
    if (auto prepared = impl.prepare_dirs(); !prepared) return prepared;

    LogMux::Options mux_options;
    mux_options.prefix_template = ctx.config.log_prefix;
    mux_options.stdout_fd = impl.options.stdout_fd;
    mux_options.stderr_fd = impl.options.stderr_fd;
    // A hung Python worker's stacks come as faulthandler's dump on its stderr: keep
    // enough of it for every thread.
    if (ctx.config.hang_timeout.count() > 0) mux_options.tail_lines = 400;
    if (!impl.report_patterns) impl.report_patterns = report_patterns(ctx.config);
    mux_options.report_patterns = impl.report_patterns;
    if (ctx.config.collapse_lines) mux_options.collapse_window = ctx.config.collapse_window;
    impl.mux = std::make_unique<LogMux>(impl.io, mux_options);
    if (auto opened = open_filtered_files(*impl.mux, ctx, error_dir); !opened) return opened;
    impl.oom.arm();
    return impl.spawn_all();
}

Status WorkerGroup::Impl::prepare_dirs() {
    for (auto& w : workers) {
        std::error_code ec;
        fs::create_directories(w.dir, ec);
        if (ec) {
            const std::string& flag = ctx.log_dir.empty() ? "TMPDIR" : "--log_dir";
            return std::unexpected(
                usage_error(fmt::format("{}: {}; check {} ({})", w.dir, ec.message(), flag,
                                        ctx.log_dir.empty() ? ctx.scratch_dir : ctx.log_dir)));
        }
        // torch's @record refuses to overwrite an old file; a stale one would be misreported.
        if (!w.error_file.empty()) fs::remove(w.error_file, ec);
    }
    return {};
}

Status WorkerGroup::Impl::spawn_all() {
    const auto& config = ctx.config;
    for (auto& w : workers) {
        auto out = make_pipe();
        if (!out) return std::unexpected(out.error());
        auto err = make_pipe();
        if (!err) return std::unexpected(err.error());
        WorkerStdio stdio{dev_null.get(), out->second.get(), err->second.get()};
        if (config.reads_beats()) {
            auto channel = ProgressChannel::create();
            if (!channel) return std::unexpected(channel.error());
            w.progress = std::move(*channel);
            stdio.progress = w.progress->worker_fd();
            w.spec.env.emplace_back(k_progress_fd_env, std::to_string(k_worker_progress_fd));
        }
        auto pid = spawn_worker(w.spec, ctx.executable, ctx.env, stdio);
        if (w.progress) w.progress->close_worker_end();
        if (!pid) return std::unexpected(pid.error());
        w.pid = *pid;
        w.outcome.pid = *pid;
        w.running = true;
        ++running;

        const int lr = w.spec.local_rank;
        const WorkerSinks sinks = worker_sinks(ctx, lr, w.dir);
        StreamSource source{w.spec.rank, lr, w.spec.node_rank, config.role, round, ctx.host};
        if (auto added = mux->add_worker(lr, source, out->first.release(), err->first.release(),
                                         sinks.out, sinks.err);
            !added)
            return added;
    }
    return {};
}

void WorkerGroup::Impl::complete(Worker& w) {
    if (auto info = read_error_file(w.error_file)) w.outcome.error_message = info->message;
    mux->read_available(w.spec.local_rank);  // what it wrote before dying
    w.outcome.stderr_tail = mux->stderr_tail(w.spec.local_rank);
    keep_report_lines(w);
}

void WorkerGroup::Impl::keep_report_lines(Worker& w) {
    auto matched = mux->report_lines(w.spec.local_rank);
    w.outcome.report_lines = std::move(matched.lines);
    w.outcome.report_lines_total = matched.total;
}

std::optional<WorkerOutcome> WorkerGroup::on_exit(pid_t pid, int status) {
    auto& impl = *m_impl;
    auto it = std::find_if(impl.workers.begin(), impl.workers.end(),
                           [pid](const Worker& w) { return w.running && w.pid == pid; });
    if (it == impl.workers.end()) return std::nullopt;
    Worker& w = *it;
    w.running = false;
    if (--impl.running == 0) impl.timer.cancel();
    w.outcome.time = std::chrono::system_clock::now();
    if (WIFSIGNALED(status)) {
        w.outcome.signal = WTERMSIG(status);
        // Of ddprun's own kills nothing is asked: they are not a root cause.
        if (w.outcome.signal == SIGKILL && !w.outcome.stopped_by_ddprun)
            w.outcome.oom = impl.oom.explain_sigkill().value_or("");
    } else
        w.outcome.exit_code = WEXITSTATUS(status);
    if (w.outcome.failed()) {
        spdlog::debug("rank {} (pid {}) ended: exit code {}", w.spec.rank, pid,
                      exit_code_of(w.outcome));
        impl.complete(w);
    }
    return w.outcome;
}

void WorkerGroup::stop(int signal, std::chrono::milliseconds grace, bool send) {
    auto& impl = *m_impl;
    if (impl.killing) return;
    if (grace.count() <= 0) return kill();
    for (auto& w : impl.workers) {
        if (!w.running) continue;
        w.outcome.stopped_by_ddprun = true;
        if (send) signal_worker_group(w.pid, signal);
    }
    if (impl.running == 0) return;
    impl.timer.expires_after(grace);
    impl.timer.async_wait([this, grace, signal](boost::system::error_code ec) {
        if (ec) return;
        for (auto& w : m_impl->workers)
            if (w.running)
                spdlog::warn("rank {} (pid {}) still running {} after {}; killing it", w.spec.rank,
                             w.pid, duration_text(grace), signal_name(signal));
        kill();
    });
}

void WorkerGroup::kill() {
    auto& impl = *m_impl;
    if (impl.killing) return;
    impl.killing = true;
    for (auto& w : impl.workers) {
        if (!w.running) continue;
        w.outcome.stopped_by_ddprun = true;
        signal_worker_group(w.pid, SIGKILL);
    }
    impl.timer.cancel();
    if (impl.running == 0) return;
    impl.timer.expires_after(impl.options.kill_bound);
    impl.timer.async_wait([&impl](boost::system::error_code ec) {
        if (ec) return;
        for (auto& w : impl.workers) {
            if (!w.running) continue;
            spdlog::error(
                "rank {} (pid {}) did not die after SIGKILL (stuck in the kernel?); giving up "
                "on it",
                w.spec.rank, w.pid);
            w.running = false;
            w.outcome.signal = SIGKILL;
            w.outcome.time = std::chrono::system_clock::now();
            --impl.running;
        }
        if (impl.on_given_up) impl.on_given_up();
    });
}

void WorkerGroup::forward(int signal) {
    spdlog::debug("forwarding {} to workers", signal_name(signal));
    for (auto& w : m_impl->workers)
        if (w.running) signal_worker_group(w.pid, signal);
}

int WorkerGroup::running() const {
    return m_impl->running;
}

std::vector<WorkerGroup::Running> WorkerGroup::running_workers() const {
    std::vector<Running> running;
    for (const auto& w : m_impl->workers)
        if (w.running)
            running.push_back(Running{w.spec.rank, w.spec.local_rank, w.pid, w.spec.devices});
    return running;
}

std::optional<std::string> WorkerGroup::log_dir_of(int local_rank) const {
    if (m_impl->ctx.log_dir.empty()) return std::nullopt;
    for (const auto& w : m_impl->workers)
        if (w.spec.local_rank == local_rank) return w.dir;
    return std::nullopt;
}

void WorkerGroup::signal_worker(pid_t pid, int signal, Target target) {
    for (auto& w : m_impl->workers) {
        if (!w.running || w.pid != pid) continue;
        w.outcome.stopped_by_ddprun = true;
        // A running worker is unreaped, so its pid (and its main thread's id, the
        // same number) is still this worker's.
        const bool sent = target == Target::MainThread ? ::tgkill(pid, pid, signal) == 0
                                                       : ::kill(pid, signal) == 0;
        if (!sent && errno != ESRCH)
            spdlog::warn("{}({}, {}): {}", target == Target::MainThread ? "tgkill" : "kill", pid,
                         signal_name(signal), std::strerror(errno));
    }
}

std::vector<WorkerGroup::Beat> WorkerGroup::read_beats() {
    std::vector<Beat> beats;
    for (auto& w : m_impl->workers) {
        if (!w.running || !w.progress) continue;
        auto seen = w.progress->look();
        if (seen.bytes == 0) continue;
        m_impl->beaten = true;
        beats.push_back(Beat{w.spec.rank, std::move(seen.label), seen.lines});
    }
    return beats;
}

bool WorkerGroup::beaten() {
    // What the ended workers wrote stays in their channels.
    for (auto& w : m_impl->workers)
        if (w.progress && w.progress->look().bytes > 0) m_impl->beaten = true;
    return m_impl->beaten;
}

std::vector<std::string> WorkerGroup::finish() {
    auto& impl = *m_impl;
    std::vector<std::string> problems;
    impl.timer.cancel();
    // Whatever the workers left behind (grandchildren, daemons) dies with the round; the
    // group's own workers may still be reaped here if the loop stopped before their exit.
    auto left = sweep_children(impl.options.sweep_bound,
                               [this](pid_t pid, int status) { on_exit(pid, status); });
    if (!left)
        problems.push_back(left.error().message);
    else if (*left > 0)
        problems.push_back(
            fmt::format("{} process(es) left by the workers did not die after SIGKILL", *left));
    if (!impl.mux) return problems;
    impl.mux->drain_and_close_all();
    for (auto& w : impl.workers)
        if (w.outcome.failed()) {
            w.outcome.stderr_tail = impl.mux->stderr_tail(w.spec.local_rank);
            impl.keep_report_lines(w);
        }
    if (!impl.mux->file_error().empty()) problems.push_back(impl.mux->file_error());
    if (!impl.mux->console_error().empty()) problems.push_back(impl.mux->console_error());
    return problems;
}

std::vector<WorkerOutcome> WorkerGroup::outcomes() const {
    std::vector<WorkerOutcome> all;
    for (const auto& w : m_impl->workers) all.push_back(w.outcome);
    return all;
}

}  // namespace ddprun
