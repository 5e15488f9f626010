// The I/O of `ddprun --hosts` (fan_out.hpp): reads the host list and the
// .ddprunenv files, runs every host's preflight and then its agent, all at
// once, and passes their output, the user's signals and the job's exit code
// through. One thread, one asio loop: the hosts' pipes, the signals (a
// signalfd) and the timers are its events. Its writes (the console, the
// lifelines) drop what a full or closed fd does not take (write_all's
// WhenFull::GiveUp, EPIPE): an agent or a console that stopped reading must
// not hold the launcher, which relays the other hosts and the signals.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/base/child_process.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/line_splitter.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/signal_reader.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/fanout/fan_out.hpp"
#include "ddprun/fanout/job_secret.hpp"
#include "ddprun/store/signed_store.hpp"
#include "ddprun/workers/program.hpp"
#include "fan_out_setup.hpp"

extern char** environ;

namespace ddprun {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// A preflight that has not answered by then is reported as unreachable: ssh's
// own connect timeout, plus what a loaded host may take to start ddprun.
constexpr std::chrono::seconds k_preflight_bound{k_ssh_connect_timeout_s + 20};
// What a preflight may print that the launcher keeps (its answer is one line).
constexpr std::size_t k_kept_output = 64 * 1024;
// A line cut by a pipe read is completed by the next read; one that stays
// incomplete this long (a prompt, a progress bar) is shown as it is.
constexpr std::chrono::milliseconds k_partial_flush{100};

// Where a host's stream goes on the launcher's console: its stdout (stream 0)
// to fd 1, its stderr (stream 1) to fd 2.
int console_fd(std::size_t stream) {
    return static_cast<int>(stream) + 1;
}

std::expected<pid_t, Error> spawn_host(const std::vector<std::string>& argv, int in, int out,
                                       int err) {
    const char* path = std::getenv("PATH");
    auto executable = resolve_executable(argv[0], path != nullptr ? path : "/usr/bin:/bin");
    if (!executable) return std::unexpected(executable.error());
    std::vector<const char*> args;
    for (const std::string& word : argv) args.push_back(word.c_str());
    args.push_back(nullptr);
    // Its own process group (child_process.hpp): a terminal's Ctrl-C reaches the launcher only,
    // which passes it to every host over the lifeline (an ssh killed by it would drop its
    // host's output). The death signal: a SIGKILLed launcher takes its ssh clients along,
    // which closes every agent's lifeline.
    ChildSetup setup;
    setup.what = argv[0].c_str();
    setup.in = in;
    setup.out = out;
    setup.err = err;
    auto pid = launch_process(*executable, args.data(), environ, setup);
    if (!pid)
        return std::unexpected(Error{
            fmt::format("cannot run {}: {}", argv[0], pid.error().message()),
            pid.error().value() == ENOENT ? exit_code::kNotFound : exit_code::kNotExecutable});
    return *pid;
}

// Every host's process (ssh, or the {host} template) of one phase, and the
// loop that serves them.
class Fleet {
  public:
    // `secret`: Run, the job's secret, each agent's first lifeline line (job_secret.hpp).
    Fleet(const FanOutPlan& plan, RemoteMode mode, const LaunchConfig& config,
          std::string secret = {})
        : m_plan(plan),
          m_mode(mode),
          m_config(config),
          m_flush(m_io),
          m_secret_line(secret.empty() ? std::string()
                                       : std::string(k_secret_line) + to_hex(secret) + "\n") {}

    struct Host {
        pid_t pid = -1;
        UniqueFd lifeline;  // Run: our end of the agent's standard input
        std::array<std::unique_ptr<asio::posix::stream_descriptor>, 2> streams;  // out, err
        std::array<LineSplitter, 2> lines;
        std::array<std::string, 2> kept;  // Preflight: what it printed
        std::array<std::array<char, 8192>, 2> buffers{};
        int open_streams = 0;
        std::optional<int> status;
        bool killed = false;     // by the launcher (deadline, third signal)
        bool link_lost = false;  // ssh failed (255) or was killed: no exit code of the agent
    };

    // Starts every host's process; the first that cannot start stops the others.
    Status start() {
        UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        if (!dev_null) return std::unexpected(system_error("open /dev/null"));
        m_hosts.resize(m_plan.hosts.size());
        for (std::size_t i = 0; i < m_hosts.size(); ++i) {
            Host& host = m_hosts[i];
            int in[2] = {-1, -1}, out[2], err[2];
            if (m_mode == RemoteMode::Run && ::pipe2(in, O_CLOEXEC) != 0)
                return fail_start(system_error("pipe2"));
            UniqueFd in_read(in[0]);
            host.lifeline.reset(in[1]);
            if (::pipe2(out, O_CLOEXEC) != 0) return fail_start(system_error("pipe2"));
            UniqueFd out_read(out[0]), out_write(out[1]);
            if (::pipe2(err, O_CLOEXEC) != 0) return fail_start(system_error("pipe2"));
            UniqueFd err_read(err[0]), err_write(err[1]);
            auto pid = spawn_host(host_argv(m_plan, i, m_mode),
                                  m_mode == RemoteMode::Run ? in_read.get() : dev_null.get(),
                                  out_write.get(), err_write.get());
            if (!pid) return fail_start(pid.error());
            host.pid = *pid;
            if (host.lifeline) {
                // Before anything else on the lifeline: the pipe is empty, so the line (65
                // bytes and a prefix) fits its buffer and this write does not block.
                if (!m_secret_line.empty())
                    write_all(host.lifeline.get(), m_secret_line, WhenFull::GiveUp);
                ::fcntl(host.lifeline.get(), F_SETFL, O_NONBLOCK);
            }
            host.streams[0] =
                std::make_unique<asio::posix::stream_descriptor>(m_io, out_read.release());
            host.streams[1] =
                std::make_unique<asio::posix::stream_descriptor>(m_io, err_read.release());
            host.open_streams = 2;
            read(i, 0);
            read(i, 1);
        }
        return {};
    }

    // Serves every host until each process has exited and its output is read,
    // or (Preflight) `deadline`. Returns the signal that ended it early, or 0.
    int serve(std::optional<Clock::time_point> deadline) {
        std::vector<int> signals = m_config.stop_signals;
        signals.insert(signals.end(), m_config.forward_signals.begin(),
                       m_config.forward_signals.end());
        signals.push_back(SIGCHLD);
        SignalReader reader(m_io, signals,
                            [this](const ReceivedSignal& s) { on_signal(s.number); });
        asio::steady_timer bound(m_io);
        if (deadline) {
            bound.expires_at(*deadline);
            bound.async_wait([this](boost::system::error_code ec) {
                if (!ec) kill_all();
            });
        }
        // SIGCHLD may have come before the reader existed.
        reap();
        while (!done() && m_ended_by == 0) m_io.run_one();
        if (m_ended_by != 0) {
            kill_all();
            while (!done()) m_io.run_one();
        }
        return m_ended_by;
    }

    const std::vector<Host>& hosts() const { return m_hosts; }

  private:
    Status fail_start(Error error) {
        kill_all();
        while (!done()) m_io.run_one();
        return std::unexpected(std::move(error));
    }

    bool done() {
        return std::all_of(m_hosts.begin(), m_hosts.end(), [](const Host& h) {
            return (h.pid < 0 || h.status) && h.open_streams == 0;
        });
    }

    void read(std::size_t index, std::size_t stream) {
        Host& host = m_hosts[index];
        host.streams[stream]->async_read_some(
            asio::buffer(host.buffers[stream]),
            [this, index, stream](boost::system::error_code ec, std::size_t n) {
                Host& h = m_hosts[index];
                if (n > 0) take(h, stream, std::string_view(h.buffers[stream].data(), n));
                if (ec) {
                    h.streams[stream]->close();
                    --h.open_streams;
                    finish(h, stream);
                    return;
                }
                read(index, stream);
            });
    }

    void take(Host& host, std::size_t stream, std::string_view chunk) {
        if (m_mode == RemoteMode::Preflight) {
            std::string& kept = host.kept[stream];
            kept.append(chunk.substr(0, k_kept_output - std::min(k_kept_output, kept.size())));
            return;
        }
        m_out.clear();
        host.lines[stream].feed_prefixed(chunk, "", m_out);
        write_all(console_fd(stream), std::string_view(m_out.data(), m_out.size()),
                  WhenFull::GiveUp);
        if (host.lines[stream].has_partial()) schedule_flush();
    }

    void finish(Host& host, std::size_t stream) {
        if (m_mode == RemoteMode::Preflight) return;
        host.lines[stream].finish([stream](const LineSplitter::Segment& segment) {
            write_all(console_fd(stream), segment.text, WhenFull::GiveUp);
            if (!segment.complete) write_all(console_fd(stream), "\n", WhenFull::GiveUp);
        });
    }

    void schedule_flush() {
        if (m_flush_pending) return;
        m_flush_pending = true;
        m_flush.expires_after(k_partial_flush);
        m_flush.async_wait([this](boost::system::error_code ec) {
            m_flush_pending = false;
            if (ec) return;
            for (Host& host : m_hosts)
                for (std::size_t stream = 0; stream < 2; ++stream)
                    host.lines[stream].flush_partial([stream](const LineSplitter::Segment& s) {
                        write_all(console_fd(stream), s.text, WhenFull::GiveUp);
                    });
        });
    }

    void reap() {
        reap_exited([this](pid_t pid, int status) {
            for (std::size_t i = 0; i < m_hosts.size(); ++i) {
                Host& host = m_hosts[i];
                if (host.pid != pid) continue;
                host.status = WIFEXITED(status) ? WEXITSTATUS(status)
                                                : exit_code::kSignalBase + WTERMSIG(status);
                host.lifeline.reset();
                // 255: ssh itself failed (the connection dropped); a signal: someone killed it.
                host.link_lost = WIFSIGNALED(status) || *host.status == 255;
                if (m_mode == RemoteMode::Run && host.link_lost && !host.killed)
                    spdlog::error(
                        "host {} (node {}): its link ended ({}); its agent stops its workers when "
                        "it sees that, and the other nodes follow",
                        m_plan.hosts[i].name, i,
                        WIFSIGNALED(status)
                            ? fmt::format("{} died of {}", m_plan.launcher[0],
                                          signal_name(WTERMSIG(status)))
                            : fmt::format("{} exited 255: connection lost", m_plan.launcher[0]));
            }
        });
    }

    void on_signal(int signal) {
        if (signal == SIGCHLD) return reap();
        const auto& stops = m_config.stop_signals;
        const bool stop = std::find(stops.begin(), stops.end(), signal) != stops.end();
        if (m_mode == RemoteMode::Preflight) {
            if (stop) m_ended_by = signal;
            return;
        }
        if (!stop) {
            relay(signal);
            return;
        }
        ++m_stops;
        if (m_stops == 1) {
            spdlog::info(
                "received {}; stopping the job on every host ({} again kills every "
                "worker at once)",
                signal_name(signal), signal_name(signal));
            relay(signal);
        } else if (m_stops == 2) {
            spdlog::warn("received {} again; killing every worker", signal_name(signal));
            relay(signal);
        } else {
            spdlog::error("received {} a third time; dropping every host's link",
                          signal_name(signal));
            m_ended_by = signal;
        }
    }

    // Passes `signal` to every agent still linked, as a line on its lifeline.
    void relay(int signal) {
        const std::string line = fmt::format("signal {}\n", signal);
        for (Host& host : m_hosts)
            if (host.lifeline) write_all(host.lifeline.get(), line, WhenFull::GiveUp);
    }

    void kill_all() {
        for (Host& host : m_hosts) {
            if (host.pid < 0 || host.status) continue;
            host.killed = true;
            ::kill(-host.pid, SIGKILL);
        }
    }

    const FanOutPlan& m_plan;
    RemoteMode m_mode;
    const LaunchConfig& m_config;
    asio::io_context m_io;
    std::vector<Host> m_hosts;
    OutputBuffer m_out;
    asio::steady_timer m_flush;
    std::string m_secret_line;  // "secret HEX\n", or empty
    bool m_flush_pending = false;
    int m_stops = 0;
    int m_ended_by = 0;
};

// Enough open files for three pipes a host: the soft limit is raised to the hard one.
Status ensure_fd_limit(std::size_t hosts) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::unexpected(system_error("getrlimit"));
    const rlim_t needed = 3 * hosts + 64;
    if (limit.rlim_cur >= needed) return {};
    if (limit.rlim_max < needed)
        return std::unexpected(usage_error(
            fmt::format("{} hosts need {} open files, and the limit is {} (raise it: ulimit -n {})",
                        hosts, needed, limit.rlim_max, needed)));
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return std::unexpected(system_error("setrlimit"));
    return {};
}

// This process's CPU time so far (not its children's).
long own_cpu_ms() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto ms = [](const timeval& t) { return t.tv_sec * 1000L + t.tv_usec / 1000; };
    return ms(usage.ru_utime) + ms(usage.ru_stime);
}

// Every host's preflight, at once. Returns the exit code when one host cannot
// run the job (each such host named on a line of its own).
std::optional<int> preflight(const FanOutPlan& plan, const LaunchConfig& config) {
    Fleet fleet(plan, RemoteMode::Preflight, config);
    const auto begun = Clock::now();
    const long cpu_before = own_cpu_ms();
    if (auto started = fleet.start(); !started) {
        spdlog::error("{}", started.error().message);
        return exit_code::kInternal;
    }
    if (int signal = fleet.serve(begun + k_preflight_bound)) {
        spdlog::info("received {} during the preflight; nothing was started", signal_name(signal));
        return exit_code::kSignalBase + signal;
    }
    std::optional<int> code;
    int failed = 0;
    for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
        const auto& host = fleet.hosts()[i];
        std::optional<PreflightProblem> problem;
        if (host.killed)
            problem = PreflightProblem{
                exit_code::kRendezvous,
                fmt::format("no answer within {}", duration_text(k_preflight_bound))};
        else
            problem = check_preflight(host.status.value_or(255), host.kept[0], host.kept[1],
                                      DDPRUN_VERSION, plan);
        if (!problem) continue;
        ++failed;
        if (!code) code = problem->code;
        spdlog::error("host {} (node {}): {}", plan.hosts[i].name, i, problem->reason);
    }
    if (failed > 0)
        spdlog::error("{} of {} host{} cannot run the job; nothing was started", failed,
                      plan.hosts.size(), plan.hosts.size() == 1 ? "" : "s");
    else
        spdlog::debug("preflight of {} hosts: {} (its own CPU {})", plan.hosts.size(),
                      duration_text(Clock::now() - begun),
                      duration_text(std::chrono::milliseconds(own_cpu_ms() - cpu_before)));
    return code;
}

}  // namespace

int run_fan_out(const LaunchConfig& config, const Environment& env) {
    auto plan = make_plan(config, env);
    if (!plan) {
        spdlog::error("{}", plan.error().message);
        return plan.error().code;
    }
    if (config.dry_run) {
        std::fputs(dry_run_text(*plan).c_str(), stdout);
        return exit_code::kSuccess;
    }
    if (auto limit = ensure_fd_limit(plan->hosts.size()); !limit) {
        spdlog::error("{}", limit.error().message);
        return limit.error().exit_code;
    }
    // The user's secret, else one of the job's own: the agents never run without one.
    auto secret = read_user_secret(config.rendezvous, env);
    if (!secret) {
        spdlog::error("{}", secret.error().message);
        return secret.error().exit_code;
    }
    if (secret->empty()) *secret = make_secret();
    ::signal(SIGPIPE, SIG_IGN);  // a host's lifeline may be closed when a signal is relayed
    if (auto failed = preflight(*plan, config)) return *failed;
    spdlog::info("starting {} agent{} (run id {}, store at {})", plan->hosts.size(),
                 plan->hosts.size() == 1 ? "" : "s", plan->run_id, plan->endpoint);
    Fleet fleet(*plan, RemoteMode::Run, config, std::move(*secret));
    if (auto started = fleet.start(); !started) {
        spdlog::error("{}", started.error().message);
        return exit_code::kInternal;
    }
    if (int signal = fleet.serve(std::nullopt)) return exit_code::kSignalBase + signal;
    std::vector<int> statuses;
    for (const auto& host : fleet.hosts())
        statuses.push_back(host.link_lost ? 255 : host.status.value_or(255));
    return fan_out_exit_code(statuses);
}

}  // namespace ddprun
