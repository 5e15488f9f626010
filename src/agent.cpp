// The agent's event loop (see agent.hpp): join a round (multi-node), start the
// round's workers, carry their output, react to exits, signals and the other
// nodes, stop everything within a bounded grace, restart or report.
#include "ddprun/agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "ddprun/coordinator.hpp"
#include "ddprun/exit_codes.hpp"
#include "ddprun/fd.hpp"
#include "ddprun/log_mux.hpp"
#include "ddprun/logging.hpp"
#include "ddprun/ports.hpp"
#include "ddprun/process_tree.hpp"
#include "ddprun/rank_plan.hpp"
#include "ddprun/report.hpp"
#include "ddprun/signals.hpp"
#include "ddprun/worker_group.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace ddprun {

namespace {

// A worker that ignores SIGKILL (stuck in the kernel, e.g. in a GPU driver call)
// is given up on after this long, so ddprun itself never hangs.
constexpr std::chrono::milliseconds k_kill_bound{10000};
// How long the store's host waits for the others to read a failed join's reason, and
// beyond the others' own shutdown, for them to confirm the end of a round.
constexpr std::chrono::milliseconds k_linger_bound{5000};
constexpr std::chrono::milliseconds k_join_linger_bound{2000};
// Orphans of a finished round get this long to die after SIGKILL.
constexpr std::chrono::milliseconds k_sweep_bound{5000};

struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool running = false;
    WorkerOutcome outcome;
    std::string error_file;
};

// How a round ended.
struct RoundResult {
    enum class Kind { Succeeded, Failed, Stopped, Aborted } kind = Kind::Succeeded;
    int exit_code = 0;
};

std::pair<UniqueFd, UniqueFd> make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The root cause carried through the store, as the summary box shows workers.
WorkerOutcome outcome_from(const FailureRecord& record) {
    WorkerOutcome o;
    o.rank = record.rank;
    o.local_rank = record.local_rank;
    o.node_rank = record.node_rank;
    o.host = record.host;
    o.pid = static_cast<int>(record.pid);
    o.signal = record.signal;
    o.exit_code = record.signal ? 0 : record.exit_code;
    o.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(record.time_ms));
    o.error_message = record.message;
    o.stderr_tail = record.stderr_tail;
    return o;
}

}  // namespace

struct Agent::Impl {
    AgentContext ctx;
    asio::io_context io;
    asio::posix::stream_descriptor signals{io};
    signalfd_siginfo signal_info{};
    asio::steady_timer grace_timer{io};
    asio::steady_timer barrier_timer{io};
    asio::steady_timer stall_timer{io};  // multi-node: notices a store that stopped answering
    UniqueFd dev_null;
    std::unique_ptr<Coordinator> coordinator;         // multi-node only
    std::optional<PortReservation> port_reservation;  // MASTER_PORT, held for the round

    enum class Phase { Connecting, Joining, Running, Stopping, Killing, Done } phase = Phase::Done;
    int round = 0;
    int node_rank = 0;
    std::vector<Worker> workers;
    std::unique_ptr<LogMux> mux;
    int stop_signal = 0;  // the signal that stopped this agent, 0 if none
    int running = 0;
    bool failure_published = false;
    std::optional<StopEvent> stop_event;  // multi-node: how the round ended job-wide
    std::optional<std::expected<RoundMembership, Error>> joined;

    explicit Impl(AgentContext context) : ctx(std::move(context)) {}

    void setup_signals();
    void read_signal();
    void on_signal(int signal);
    void forward_to_workers(int signal);
    void on_child_exit(pid_t pid, int status);
    void on_round_stop(StopEvent event);
    void begin_stop(int signal);
    void kill_now();
    void finish_round_if_done();
    void publish_failure(FailureRecord record);
    void publish_signal(int signal, std::string message);
    void watch_store();

    // Connects to (or hosts) the rendezvous store; the exit code if the job cannot go on.
    std::optional<int> open_coordinator();
    std::expected<RoundInfo, int> join_round();
    RoundResult run_round(const RoundInfo& info);
    std::string prepare_round_dirs(std::vector<Worker>& round_workers);
    std::string start_workers();
    RoundResult round_result();
    int report_failure(const std::string& title);
    std::string describe_failure() const;
    void end_round();
};

void Agent::Impl::end_round() {
    // Killed: leave at once, the others learn it from the failure record or the heartbeats.
    if (stop_signal == SIGKILL) {
        coordinator->end_round(round, node_rank, std::chrono::milliseconds(0));
        return;
    }
    // The store is gone: nobody to tell, nothing to wait for.
    if (stop_event && stop_event->kind == StopEvent::Kind::StoreLost) {
        coordinator->end_round(round, node_rank, std::chrono::milliseconds(0), {}, false);
        return;
    }
    std::vector<int> lost;
    if (stop_event && stop_event->kind == StopEvent::Kind::Failure &&
        stop_event->failure.kind == FailureKind::NodeLost)
        lost.push_back(stop_event->failure.node_rank);
    coordinator->end_round(round, node_rank,
                           ctx.config.shutdown_timeout + k_kill_bound + k_linger_bound +
                               coordinator->options().heartbeat_timeout,
                           lost);
}

void Agent::Impl::setup_signals() {
    // Every signal ddprun reacts to is blocked (the supervisor blocked them before fork)
    // and read from a signalfd on the event loop, so there is no handler and no race.
    std::vector<int> sigs = ctx.config.stop_signals;
    sigs.insert(sigs.end(), ctx.config.forward_signals.begin(), ctx.config.forward_signals.end());
    sigs.push_back(SIGCHLD);
    sigs.push_back(parent_death_signal());
    block_signals(sigs);
    sigset_t set;
    sigemptyset(&set);
    for (int sig : sigs) sigaddset(&set, sig);
    int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw std::runtime_error(std::string("signalfd: ") + std::strerror(errno));
    signals.assign(fd);
    // A closed stdout must give EPIPE on write, not kill the agent.
    ::signal(SIGPIPE, SIG_IGN);
    dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    read_signal();
}

void Agent::Impl::read_signal() {
    signals.async_read_some(asio::buffer(&signal_info, sizeof signal_info),
                            [this](boost::system::error_code ec, std::size_t n) {
                                if (ec == asio::error::operation_aborted) return;
                                if (!ec && n == sizeof signal_info)
                                    on_signal(static_cast<int>(signal_info.ssi_signo));
                                read_signal();
                            });
}

void Agent::Impl::on_signal(int signal) {
    if (signal == SIGCHLD) {
        reap_exited([this](pid_t pid, int status) { on_child_exit(pid, status); });
        return;
    }
    if (signal == parent_death_signal()) {
        // The supervisor was SIGKILLed: the user wants everything gone, now, on every node.
        spdlog::error("ddprun's supervisor was killed; killing every worker");
        stop_signal = SIGKILL;
        const std::string why =
            fmt::format("the ddprun of node {} ({}) was killed (SIGKILL)", node_rank, ctx.host);
        if (phase == Phase::Joining && coordinator) {
            coordinator->abort(round, why, exit_code::kSignalBase + SIGKILL);
        } else {
            publish_signal(SIGKILL, why);
        }
        kill_now();
        return;
    }
    const auto& stops = ctx.config.stop_signals;
    if (std::find(stops.begin(), stops.end(), signal) != stops.end()) {
        if (phase == Phase::Connecting) {
            spdlog::info("received {} while connecting to the rendezvous store; giving up",
                         signal_name(signal));
            stop_signal = signal;
            io.stop();
        } else if (phase == Phase::Joining) {
            spdlog::info("received {} while the nodes were joining; giving up",
                         signal_name(signal));
            stop_signal = signal;
            coordinator->abort(round,
                               fmt::format("node {} ({}) received {} while joining", node_rank,
                                           ctx.host, signal_name(signal)),
                               exit_code::kSignalBase + signal);
        } else if (phase == Phase::Running) {
            spdlog::info("received {}; stopping workers (send it again to kill them at once)",
                         signal_name(signal));
            stop_signal = signal;
            begin_stop(signal);
            publish_signal(signal, fmt::format("the ddprun agent of node {} ({}) received {}",
                                               node_rank, ctx.host, signal_name(signal)));
        } else if (phase == Phase::Stopping) {
            spdlog::info("received {} again; killing workers", signal_name(signal));
            if (!stop_signal) stop_signal = signal;
            if (coordinator) coordinator->publish_kill(round);
            kill_now();
        }
        return;
    }
    // A forwarded-only signal (SIGUSR1/SIGUSR2 by default): pass it on, keep running.
    forward_to_workers(signal);
    if (coordinator && ctx.config.broadcast_signals && phase == Phase::Running)
        coordinator->broadcast_signal(round, node_rank, signal);
}

void Agent::Impl::forward_to_workers(int signal) {
    spdlog::debug("forwarding {} to workers", signal_name(signal));
    for (auto& w : workers)
        if (w.running) signal_worker_group(w.pid, signal);
}

// The heartbeat thread cannot report a store call that never returns; this timer can.
void Agent::Impl::watch_store() {
    stall_timer.expires_after(coordinator->options().heartbeat_timeout / 5);
    stall_timer.async_wait([this](boost::system::error_code ec) {
        if (ec || phase == Phase::Done) return;
        if (coordinator->store_stalled()) {
            StopEvent lost;
            lost.kind = StopEvent::Kind::StoreLost;
            lost.message = fmt::format(
                "the rendezvous store stopped answering (no reply for over {} s: its host is "
                "frozen or cut off)",
                coordinator->options().heartbeat_timeout.count() / 1000);
            lost.exit_code = exit_code::kRendezvous;
            on_round_stop(std::move(lost));
            return;
        }
        watch_store();
    });
}

// The other nodes stop with this agent's signal as the job's exit code (128+N).
void Agent::Impl::publish_signal(int signal, std::string message) {
    FailureRecord record;
    record.kind = FailureKind::Signal;
    record.node_rank = node_rank;
    record.host = ctx.host;
    record.pid = ::getpid();
    record.exit_code = exit_code::kSignalBase + signal;
    record.time_ms = now_ms();
    record.message = std::move(message);
    publish_failure(std::move(record));
}

void Agent::Impl::publish_failure(FailureRecord record) {
    if (!coordinator || failure_published) return;
    failure_published = true;
    coordinator->publish_failure(round, std::move(record));
}

void Agent::Impl::on_child_exit(pid_t pid, int status) {
    auto it = std::find_if(workers.begin(), workers.end(),
                           [pid](const Worker& w) { return w.running && w.pid == pid; });
    if (it == workers.end()) return;  // an orphan reparented to us; swept at the end
    Worker& w = *it;
    w.running = false;
    --running;
    w.outcome.time = std::chrono::system_clock::now();
    if (WIFSIGNALED(status)) {
        w.outcome.signal = WTERMSIG(status);
    } else {
        w.outcome.exit_code = WEXITSTATUS(status);
    }
    if (w.outcome.failed()) {
        spdlog::debug("rank {} (pid {}) ended: exit code {}", w.spec.rank, pid,
                      exit_code_of(w.outcome));
        if (phase == Phase::Running) {
            // The first failure: everyone else stops, on this node and on every other one.
            begin_stop(SIGTERM);
            FailureRecord record;
            record.kind = FailureKind::Worker;
            record.node_rank = node_rank;
            record.host = ctx.host;
            record.rank = w.spec.rank;
            record.local_rank = w.spec.local_rank;
            record.pid = pid;
            record.exit_code = exit_code_of(w.outcome);
            record.signal = w.outcome.signal;
            record.time_ms = now_ms();
            mux->read_available(w.spec.local_rank);  // what it wrote before dying
            record.stderr_tail = mux->stderr_tail(w.spec.local_rank);
            if (auto info = read_error_file(w.error_file)) record.message = info->message;
            publish_failure(std::move(record));
        }
    }
    if (coordinator && running == 0 && phase == Phase::Running) {
        // This node is done; the exit barrier waits (bounded) for the others.
        coordinator->publish_finished(round);
        barrier_timer.expires_after(coordinator->options().barrier_timeout);
        barrier_timer.async_wait([this](boost::system::error_code ec) {
            if (ec) return;
            coordinator->abort(round,
                               fmt::format("the other nodes did not finish within {} s "
                                           "(--rdzv_conf exit_barrier_timeout)",
                                           coordinator->options().barrier_timeout.count() / 1000),
                               exit_code::kRendezvous);
        });
    }
    finish_round_if_done();
}

void Agent::Impl::on_round_stop(StopEvent event) {
    barrier_timer.cancel();
    if (!stop_event) stop_event = std::move(event);
    if (stop_event->kind != StopEvent::Kind::Done && phase == Phase::Running) begin_stop(SIGTERM);
    finish_round_if_done();
}

void Agent::Impl::begin_stop(int signal) {
    phase = Phase::Stopping;
    for (auto& w : workers) {
        if (!w.running) continue;
        w.outcome.stopped_by_ddprun = true;
        signal_worker_group(w.pid, signal);
    }
    if (ctx.config.shutdown_timeout.count() <= 0) {
        kill_now();
        return;
    }
    grace_timer.expires_after(ctx.config.shutdown_timeout);
    grace_timer.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        for (auto& w : workers)
            if (w.running)
                spdlog::warn("rank {} (pid {}) still running {:.3g} s after SIGTERM; killing it",
                             w.spec.rank, w.pid,
                             static_cast<double>(ctx.config.shutdown_timeout.count()) / 1000.0);
        kill_now();
    });
    finish_round_if_done();
}

void Agent::Impl::kill_now() {
    if (phase == Phase::Killing || phase == Phase::Done) return;
    phase = Phase::Killing;
    for (auto& w : workers) {
        if (!w.running) continue;
        w.outcome.stopped_by_ddprun = true;
        signal_worker_group(w.pid, SIGKILL);
    }
    grace_timer.cancel();
    grace_timer.expires_after(k_kill_bound);
    grace_timer.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        for (auto& w : workers) {
            if (!w.running) continue;
            spdlog::error(
                "rank {} (pid {}) did not die after SIGKILL (stuck in the kernel?); "
                "giving up on it",
                w.spec.rank, w.pid);
            w.running = false;
            w.outcome.signal = SIGKILL;
            w.outcome.time = std::chrono::system_clock::now();
            --running;
        }
        finish_round_if_done();
    });
    finish_round_if_done();
}

void Agent::Impl::finish_round_if_done() {
    if (running > 0 || phase == Phase::Done || phase == Phase::Joining) return;
    // Multi-node: the round ends when the job-wide outcome is known, or this agent was
    // killed (it must not wait for anyone then).
    if (coordinator && !stop_event && phase != Phase::Killing) return;
    phase = Phase::Done;
    grace_timer.cancel();
    barrier_timer.cancel();
    stall_timer.cancel();
    io.stop();
}

std::string Agent::Impl::prepare_round_dirs(std::vector<Worker>& round_workers) {
    std::error_code ec;
    const std::string attempt = "attempt_" + std::to_string(round);
    for (auto& w : round_workers) {
        const std::string local = std::to_string(w.spec.local_rank);
        if (!ctx.log_dir.empty()) {
            fs::create_directories(fs::path(ctx.log_dir) / ctx.config.rdzv_id / attempt / local,
                                   ec);
            if (ec) return "--log_dir=" + ctx.log_dir + ": " + ec.message();
        }
        for (const auto& [name, value] : w.spec.env) {
            if (name != "TORCHELASTIC_ERROR_FILE") continue;
            w.error_file = value;
            fs::create_directories(fs::path(value).parent_path(), ec);
            if (ec) return fs::path(value).parent_path().string() + ": " + ec.message();
            // torch's @record refuses to overwrite an old file; a stale one would be misreported.
            fs::remove(value, ec);
        }
    }
    return {};
}

std::optional<int> Agent::Impl::open_coordinator() {
    const auto& config = ctx.config;
    Coordinator::Options options;
    auto split = split_endpoint(
        config.rdzv_endpoint.empty() ? config.master_addr : config.rdzv_endpoint, 29400);
    if (!split) {
        spdlog::error("{}", split.error().message);
        return split.error().exit_code;
    }
    Endpoint endpoint = *split;
    options.store.host = endpoint.host;
    options.store.port = endpoint.port;
    const RendezvousSettings& settings = config.rendezvous;
    options.store.timeout = settings.read_timeout;
    options.run_id = config.rdzv_id;
    options.join_timeout = settings.join_timeout;
    options.heartbeat_timeout = settings.heartbeat_timeout;
    options.barrier_timeout = settings.exit_barrier_timeout;

    NodeInfo& me = options.me;
    me.node_rank = config.node_rank.value_or(-1);
    node_rank = me.node_rank;
    me.host = ctx.host;
    me.addr = config.local_addr.empty() ? endpoint.host : config.local_addr;
    me.nproc = ctx.nproc;
    me.pid = ::getpid();
    me.fingerprint.nnodes = config.nnodes;
    std::string program;
    for (const auto& word : worker_command(config, ctx.env)) program += word + " ";
    me.fingerprint.program = program;
    me.fingerprint.max_restarts = config.max_restarts;
    me.fingerprint.run_id = config.rdzv_id;
    me.fingerprint.version = DDPRUN_VERSION;

    // Who hosts the store: --rdzv_conf is_host, else node 0, else (ranks assigned at join)
    // the first agent on the endpoint's machine to bind its port.
    std::optional<bool> is_host = settings.is_host;
    if (!is_host && config.node_rank) is_host = *config.node_rank == 0;
    bool try_host = is_host.value_or(is_local_host(endpoint.host));
    options.store.is_server = try_host;
    const bool may_fall_back = try_host && !settings.is_host;

    // Connecting can take up to read_timeout (the store's host is not up yet, or the port is
    // another program's): on a thread of its own, so that a signal still stops this agent.
    std::unique_ptr<Coordinator> opened_coordinator;
    std::string error;
    std::atomic<bool> opened_done = false;
    std::thread opener([&, options]() mutable {
        auto opened = Coordinator::open(io, options);
        if (!opened && may_fall_back) {
            // Another agent on this machine hosts it already (with ranks assigned at join),
            // or another agent claims node rank 0 too: as a client this agent meets it, and
            // the rendezvous names both hosts. If nothing answers there, the hosting error
            // stands.
            std::string host_error = opened.error().message;
            options.store.is_server = false;
            opened = Coordinator::open(io, options);
            if (!opened) opened = std::unexpected(rendezvous_error(host_error));
        }
        if (!opened) {
            error = opened.error().message;
        } else if (auto mismatch = (*opened)->check_run_id()) {
            error = mismatch->message;
        } else {
            opened_coordinator = std::move(*opened);
        }
        opened_done = true;
        asio::post(io, [] {});  // wakes the loop below
    });
    phase = Phase::Connecting;
    io.restart();
    while (!opened_done && !io.stopped()) io.run_one();
    phase = Phase::Done;
    if (!opened_done) {
        // Stopped by a signal while the opener is blocked in a store call, maybe for a long
        // while: no worker exists yet, so this process just ends, and the opener with it.
        spdlog::default_logger()->flush();
        std::_Exit(exit_code::kSignalBase + stop_signal);
    }
    opener.join();
    if (!error.empty()) {
        spdlog::error("{}", error);
        return exit_code::kRendezvous;
    }
    coordinator = std::move(opened_coordinator);
    spdlog::debug("rendezvous store {}:{} ({})", endpoint.host, endpoint.port,
                  coordinator->options().store.is_server ? "hosted here" : "client");
    if (stop_signal) return exit_code::kSignalBase + stop_signal;
    return std::nullopt;
}

std::expected<RoundInfo, int> Agent::Impl::join_round() {
    const auto& config = ctx.config;
    int master_port = config.master_port.value_or(0);
    port_reservation.reset();
    if (master_port == 0) {
        // Only node 0's port is used; every node reserves one since ranks may be assigned.
        // Held until the round ends, so no other job is handed it meanwhile.
        if (auto reserved = PortReservation::reserve()) {
            master_port = reserved->port();
            port_reservation = std::move(*reserved);
        }
    }
    phase = Phase::Joining;
    joined.reset();
    coordinator->join(round, node_rank, master_port,
                      [this](auto result) { joined = std::move(result); });
    io.restart();
    // The join is bounded by join_timeout, but c10d 1.13 leaves some store calls without a
    // bound (a listener that never answers): past the timeout, give up on the store.
    asio::steady_timer join_guard(io);
    join_guard.expires_after(coordinator->options().join_timeout + std::chrono::seconds(5));
    join_guard.async_wait([this](boost::system::error_code ec) {
        if (ec || joined) return;
        coordinator->abandon();
        joined = std::unexpected(
            Error{fmt::format("the rendezvous store at --rdzv_endpoint did not answer within the "
                              "join timeout ({} s); is something else listening on that port?",
                              coordinator->options().join_timeout.count() / 1000),
                  exit_code::kRendezvous});
    });
    // Signals are still handled while the join is in flight (a Ctrl-C aborts it).
    while (!joined) {
        if (io.stopped()) {
            // Killed mid-join (the supervisor died): the join's answer no longer matters,
            // and waiting for it on a stopped loop would spin.
            coordinator->abandon();
            return std::unexpected(exit_code::kSignalBase + (stop_signal ? stop_signal : SIGKILL));
        }
        io.run_one();
    }
    join_guard.cancel();
    phase = Phase::Done;
    if (!*joined) {
        if (stop_signal) return std::unexpected(exit_code::kSignalBase + stop_signal);
        spdlog::error("{}", joined->error().message);
        return std::unexpected(joined->error().exit_code);
    }
    const RoundMembership& membership = **joined;
    node_rank = membership.node_rank;
    RoundInfo info;
    info.node_rank = membership.node_rank;
    info.nproc_per_node = membership.nproc_per_node;
    info.master_addr = membership.master_addr;
    info.master_port = membership.master_port;
    info.restart_count = round;
    coordinator->on_kill([this] {
        if (phase != Phase::Stopping) return;
        spdlog::info("another node was told twice to stop; killing workers");
        kill_now();
    });
    if (config.broadcast_signals)
        coordinator->on_broadcast_signal([this](int signal) {
            spdlog::info("{} from another node", signal_name(signal));
            forward_to_workers(signal);
        });
    coordinator->start_heartbeats(node_rank, [this](std::string message) {
        StopEvent lost;
        lost.kind = StopEvent::Kind::StoreLost;
        lost.message = std::move(message);
        lost.exit_code = exit_code::kRendezvous;
        on_round_stop(std::move(lost));
    });
    if (round == 0) {
        const int first = rank_offset(info.nproc_per_node, node_rank);
        const int last = first + info.nproc_per_node.at(static_cast<std::size_t>(node_rank)) - 1;
        spdlog::info(
            "node {} of {}: {} of world_size {}; MASTER_ADDR={} MASTER_PORT={}", node_rank,
            config.nnodes,
            first == last ? fmt::format("rank {}", first) : fmt::format("ranks {}-{}", first, last),
            rank_offset(info.nproc_per_node, config.nnodes), info.master_addr, info.master_port);
    }
    return info;
}

std::string Agent::Impl::start_workers() {
    const auto& config = ctx.config;
    for (auto& w : workers) {
        auto [out_r, out_w] = make_pipe();
        auto [err_r, err_w] = make_pipe();
        auto pid = spawn_worker(w.spec, ctx.executable, ctx.env,
                                WorkerStdio{dev_null.get(), out_w.get(), err_w.get()});
        if (!pid) return pid.error().message;
        w.pid = *pid;
        w.outcome.pid = *pid;
        w.running = true;
        ++running;

        const int lr = w.spec.local_rank;
        const bool shown = !config.local_ranks_filter || config.local_ranks_filter->contains(lr);
        StreamSink out, err;
        out.console = shown && !(config.redirects.for_rank(lr) & kStdout);
        err.console = shown && !(config.redirects.for_rank(lr) & kStderr);
        if (!ctx.log_dir.empty()) {
            auto dir = fmt::format("{}/{}/attempt_{}/{}", ctx.log_dir, config.rdzv_id, round, lr);
            out.file_path = dir + "/stdout.log";
            err.file_path = dir + "/stderr.log";
        }
        StreamSource source{w.spec.rank, lr, w.spec.node_rank, config.role};
        if (auto added = mux->add_worker(lr, source, out_r.release(), err_r.release(), out, err);
            !added)
            return added.error().message;
    }
    return {};
}

RoundResult Agent::Impl::run_round(const RoundInfo& info) {
    const auto& config = ctx.config;
    RoundInfo round_info = info;
    if (!coordinator && round_info.master_port == 0) {
        auto reserved = PortReservation::reserve();
        if (!reserved) {
            spdlog::error("cannot pick a free MASTER_PORT: {}; pass --master_port",
                          reserved.error().message);
            return {RoundResult::Kind::Aborted, exit_code::kInternal};
        }
        round_info.master_port = reserved->port();
        port_reservation = std::move(*reserved);
    }

    const std::string log_root = ctx.log_dir.empty() ? ctx.scratch_dir : ctx.log_dir;
    const std::string error_dir = fmt::format("{}/{}/attempt_{}", log_root, config.rdzv_id, round);
    workers.clear();
    for (auto& spec :
         plan_node(config, ctx.resources, round_info, ctx.env, error_dir, ctx.bindings)) {
        Worker w;
        w.spec = std::move(spec);
        w.outcome.rank = w.spec.rank;
        w.outcome.local_rank = w.spec.local_rank;
        w.outcome.node_rank = w.spec.node_rank;
        w.outcome.host = ctx.host;
        workers.push_back(std::move(w));
    }
    if (auto err = prepare_round_dirs(workers); !err.empty()) {
        spdlog::error("{}", err);
        if (coordinator) coordinator->abort(round, err, exit_code::kUsage);
        return {RoundResult::Kind::Aborted, exit_code::kUsage};
    }

    LogMux::Options mux_options;
    mux_options.prefix_template = config.log_prefix;
    mux = std::make_unique<LogMux>(io, mux_options);
    phase = Phase::Running;
    running = 0;
    stop_signal = 0;
    failure_published = false;
    stop_event.reset();
    if (coordinator) {
        coordinator->watch(round, [this](StopEvent e) { on_round_stop(std::move(e)); });
        watch_store();
    }

    std::string spawn_error = start_workers();
    spdlog::debug("round {}: {} worker(s) started, MASTER_ADDR={} MASTER_PORT={}", round, running,
                  round_info.master_addr, round_info.master_port);
    if (!spawn_error.empty()) {
        spdlog::error("{}", spawn_error);
        if (coordinator)
            coordinator->abort(round,
                               fmt::format("node {} ({}) could not start its workers: {}",
                                           node_rank, ctx.host, spawn_error),
                               exit_code::kInternal);
        kill_now();
    }
    io.restart();
    if (phase != Phase::Done) io.run();
    phase = Phase::Done;

    // Whatever the workers left behind (grandchildren, daemons) dies with the round, then
    // every byte still in the pipes is carried out.
    auto left = sweep_children(k_sweep_bound,
                               [this](pid_t pid, int status) { on_child_exit(pid, status); });
    if (!left)
        spdlog::error("{}", left.error().message);
    else if (*left > 0)
        spdlog::error("{} process(es) left by the workers did not die after SIGKILL", *left);
    mux->drain_and_close_all();
    if (!mux->file_error().empty()) spdlog::error("{}", mux->file_error());
    if (!mux->console_error().empty()) spdlog::error("{}", mux->console_error());

    if (!spawn_error.empty()) return {RoundResult::Kind::Aborted, exit_code::kInternal};
    return round_result();
}

RoundResult Agent::Impl::round_result() {
    if (stop_signal) return {RoundResult::Kind::Stopped, exit_code::kSignalBase + stop_signal};
    if (!coordinator) {
        for (const auto& w : workers)
            if (w.outcome.failed()) return {RoundResult::Kind::Failed, 0};
        return {RoundResult::Kind::Succeeded, 0};
    }
    switch (stop_event->kind) {
        case StopEvent::Kind::Done:
            return {RoundResult::Kind::Succeeded, 0};
        case StopEvent::Kind::Failure:
            if (stop_event->failure.kind == FailureKind::Worker)
                return {RoundResult::Kind::Failed, stop_event->exit_code};
            spdlog::error("{}", stop_event->failure.message);
            return {RoundResult::Kind::Aborted, stop_event->exit_code};
        default:
            spdlog::error("{}", stop_event->message);
            return {RoundResult::Kind::Aborted,
                    stop_event->exit_code ? stop_event->exit_code : exit_code::kRendezvous};
    }
}

int Agent::Impl::report_failure(const std::string& title) {
    std::vector<WorkerOutcome> outcomes;
    std::optional<std::size_t> root;
    const FailureRecord* remote = nullptr;
    if (stop_event && stop_event->kind == StopEvent::Kind::Failure) remote = &stop_event->failure;
    if (remote && remote->node_rank != node_rank) {
        // The root cause happened on another node: its record came through the store.
        outcomes.push_back(outcome_from(*remote));
        root = 0;
    }
    for (auto& w : workers) {
        if (!w.outcome.failed()) continue;
        if (auto info = read_error_file(w.error_file)) w.outcome.error_message = info->message;
        w.outcome.stderr_tail = mux->stderr_tail(w.spec.local_rank);
        if (remote && remote->node_rank == node_rank && remote->rank == w.spec.rank)
            root = outcomes.size();
        outcomes.push_back(w.outcome);
    }
    if (!root) root = root_cause(outcomes);
    if (!root) return exit_code::kInternal;
    std::string box = format_summary(title, outcomes, *root);
    std::fflush(stdout);
    std::fputs(box.c_str(), stderr);
    std::fflush(stderr);
    return exit_code_of(outcomes[*root]);
}

std::string Agent::Impl::describe_failure() const {
    auto describe = [](const WorkerOutcome& o) {
        return fmt::format(
            "rank {} on {} failed ({})", o.rank, o.host,
            o.signal ? signal_name(o.signal) : fmt::format("exit code {}", o.exit_code));
    };
    if (stop_event && stop_event->kind == StopEvent::Kind::Failure)
        return describe(outcome_from(stop_event->failure));
    std::vector<WorkerOutcome> outcomes;
    for (const auto& w : workers) outcomes.push_back(w.outcome);
    auto root = root_cause(outcomes);
    return root ? describe(outcomes[*root]) : std::string("a worker failed");
}

Agent::Agent(AgentContext context) : m_impl(std::make_unique<Impl>(std::move(context))) {}
Agent::~Agent() = default;

int Agent::run() {
    auto& impl = *m_impl;
    try {
        impl.setup_signals();
        if (impl.ctx.config.nnodes > 1) {
            if (auto failed = impl.open_coordinator()) return *failed;
        }
        const int max_restarts = impl.ctx.config.max_restarts;
        for (impl.round = 0;; ++impl.round) {
            RoundInfo info;
            info.node_rank = impl.ctx.config.node_rank.value_or(0);
            info.nproc_per_node = {impl.ctx.nproc};
            info.master_addr = impl.ctx.config.master_addr;
            info.master_port = impl.ctx.config.master_port.value_or(0);
            info.restart_count = impl.round;
            if (impl.coordinator) {
                auto joined = impl.join_round();
                if (!joined) {
                    // The others must read why before the store's host goes away.
                    impl.coordinator->end_round(impl.round, impl.node_rank, k_join_linger_bound, {},
                                                !impl.coordinator->store_stalled());
                    return joined.error();
                }
                info = *joined;
            }
            RoundResult result = impl.run_round(info);
            if (impl.coordinator) impl.end_round();
            switch (result.kind) {
                case RoundResult::Kind::Succeeded:
                    return exit_code::kSuccess;
                case RoundResult::Kind::Aborted:
                    return result.exit_code;
                case RoundResult::Kind::Stopped:
                    spdlog::info("stopped by {}", signal_name(impl.stop_signal));
                    return result.exit_code;
                case RoundResult::Kind::Failed:
                    if (impl.round < max_restarts) {
                        spdlog::warn("{}; restarting the workers ({} of {})",
                                     impl.describe_failure(), impl.round + 1, max_restarts);
                        continue;
                    }
                    return impl.report_failure(
                        max_restarts > 0
                            ? fmt::format("ddprun: job failed after {} restart(s)", max_restarts)
                            : std::string("ddprun: job failed"));
            }
        }
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return exit_code::kInternal;
    }
}

}  // namespace ddprun
