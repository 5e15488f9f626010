// The keeper process of the scheduler tests' Slurm cluster (see
// slurm_keeper.hpp for why it exists), and the test process's side of it.

#include "slurm_keeper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun_it {

namespace {

// How long the keeper gives the daemons to exit on SIGTERM, and itself to
// kill and reap what is left, before it gives up.
constexpr Milliseconds k_daemon_stop_bound = 10s;
constexpr Milliseconds k_sweep_bound = 10s;
// How long the test process waits for an answer to a request.
constexpr Milliseconds k_answer_bound = 10s;

[[noreturn]] void fail_syscall(const char* call) {
    throw std::runtime_error(fmt::format("{} failed: {}", call, std::strerror(errno)));
}

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

// --- /etc/hosts -----------------------------------------------------------------

constexpr const char* k_hosts = "/etc/hosts";

// The keeper pid a marked line names; nullopt for a line without the marker.
std::optional<pid_t> marked_keeper(std::string_view line) {
    auto at = line.find(k_hosts_marker);
    if (at == std::string_view::npos) return std::nullopt;
    return static_cast<pid_t>(std::strtol(line.data() + at + k_hosts_marker.size(), nullptr, 10));
}

// Rewrites /etc/hosts in place (it may be a bind mount, where a rename would
// fail) under an exclusive flock, so two harnesses never interleave edits.
// `keep` decides for each line; `append` is added at the end. Empty on success.
std::string edit_hosts(const std::function<bool(std::string_view)>& keep,
                       const std::string& append) {
    int fd = ::open(k_hosts, O_RDWR | O_CLOEXEC);
    if (fd < 0) return fmt::format("open {}: {}", k_hosts, std::strerror(errno));
    if (::flock(fd, LOCK_EX) != 0) {
        std::string error = fmt::format("flock {}: {}", k_hosts, std::strerror(errno));
        ::close(fd);
        return error;
    }
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    std::string edited;
    for (const auto& line : split_lines(text)) {
        if (keep(line)) edited += line + "\n";
    }
    edited += append;
    std::string error;
    if (edited != text) {
        if (::pwrite(fd, edited.data(), edited.size(), 0) != static_cast<ssize_t>(edited.size()) ||
            ::ftruncate(fd, static_cast<off_t>(edited.size())) != 0) {
            error = fmt::format("rewrite {}: {}", k_hosts, std::strerror(errno));
        }
    }
    ::close(fd);  // releases the lock
    return error;
}

// --- the keeper process ------------------------------------------------------------

void reap_all() {
    int status = 0;
    while (::waitpid(-1, &status, WNOHANG) > 0) {
    }
}

// Waits for a SIGCHLD (or another signal of the set) at most `timeout`, then reaps.
void wait_child_event(int signal_fd, Milliseconds timeout) {
    pollfd fd{signal_fd, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(timeout.count())) > 0) {
        signalfd_siginfo info{};
        while (::read(signal_fd, &info, sizeof info) == sizeof info) {
        }
    }
    reap_all();
}

// Processes whose environment holds `entry` ("NAME=value"), exactly.
std::vector<pid_t> processes_with_environment(const std::string& entry) {
    std::vector<pid_t> found;
    if (entry.empty()) return found;
    for (pid_t pid : all_pids()) {
        int fd = ::open(fmt::format("/proc/{}/environ", pid).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        std::string environment;
        char buffer[4096];
        ssize_t n = 0;
        while ((n = ::read(fd, buffer, sizeof buffer)) > 0) {
            environment.append(buffer, static_cast<std::size_t>(n));
        }
        ::close(fd);
        for (std::size_t at = 0; at < environment.size();) {
            auto next = environment.find('\0', at);
            if (next == std::string::npos) next = environment.size();
            if (std::string_view(environment).substr(at, next - at) == entry) {
                found.push_back(pid);
                break;
            }
            at = next + 1;
        }
    }
    return found;
}

// Empty cgroup directories proctrack/cgroup leaves behind for `node` after its
// slurmd is gone (slurm_<node>/uid_0/...), removed deepest first. A directory
// that still holds a process (another cluster's job) is not empty and stays.
void remove_empty_cgroups(const std::string& node) {
    std::error_code error;
    for (std::filesystem::directory_iterator controllers("/sys/fs/cgroup", error), end;
         !error && controllers != end; controllers.increment(error)) {
        std::filesystem::path top = controllers->path() / ("slurm_" + node);
        if (!std::filesystem::is_directory(top, error)) continue;
        std::vector<std::filesystem::path> dirs{top};
        for (std::filesystem::recursive_directory_iterator it(top, error), last;
             !error && it != last; it.increment(error)) {
            if (it->is_directory(error)) dirs.push_back(it->path());
        }
        std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) {
            return a.string().size() > b.string().size();
        });
        for (const auto& dir : dirs) ::rmdir(dir.c_str());
    }
}

// Starts one daemon: its own process group, no inherited signal mask, stdin
// /dev/null, stdout and stderr to its log. Returns the pid or -1.
pid_t spawn_daemon(const DaemonSpec& spec) {
    std::vector<char*> argv;
    std::vector<std::string> storage = spec.argv;
    for (auto& arg : storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int null = ::open("/dev/null", O_RDONLY);
    int log = ::open(spec.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (null < 0 || log < 0) ::_exit(126);
    ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close_range(3, ~0U, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
}

// The keeper's whole life (see slurm_keeper.hpp). It runs in a process forked
// from the test binary while that is still single-threaded, so it may allocate.
[[noreturn]] void keeper_main(int control_fd, int report_fd, const std::vector<DaemonSpec>& specs,
                              const std::vector<std::string>& nodes,
                              const std::string& cluster_env) {
    ::setsid();  // a Ctrl-C meant for the test reaches the keeper as end of file, in order
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&handled, sig);
    ::sigprocmask(SIG_BLOCK, &handled, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    int signal_fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);

    const pid_t self = ::getpid();
    const std::string own_line =
        fmt::format("127.0.0.1 {} {}{}\n", fmt::join(nodes, " "), k_hosts_marker, self);
    std::string hosts_error = edit_hosts(
        [](std::string_view line) {
            auto keeper = marked_keeper(line);
            return !keeper || (*keeper > 0 && process_alive(*keeper));
        },
        own_line);
    write_all(report_fd, hosts_error.empty() ? std::string("hosts ok\n")
                                             : "hosts error " + hosts_error + "\n");

    std::vector<pid_t> started(specs.size(), -1);
    std::string pending;
    bool stopping = !hosts_error.empty();
    while (!stopping) {
        pollfd fds[2] = {{control_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) {
            signalfd_siginfo info{};
            while (::read(signal_fd, &info, sizeof info) == sizeof info) {
                if (info.ssi_signo != SIGCHLD) stopping = true;
            }
            reap_all();
        }
        if (!fds[0].revents) continue;
        char buffer[256];
        ssize_t n = ::read(control_fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // the test process is gone, however it ended
        pending.append(buffer, static_cast<std::size_t>(n));
        for (auto end = pending.find('\n'); end != std::string::npos; end = pending.find('\n')) {
            std::string request = pending.substr(0, end);
            pending.erase(0, end + 1);
            if (request == "stop") {
                stopping = true;
            } else if (request.starts_with("start ")) {
                auto index =
                    static_cast<std::size_t>(std::strtoul(request.c_str() + 6, nullptr, 10));
                if (index >= specs.size()) {
                    write_all(report_fd, "failed no such daemon\n");
                    continue;
                }
                started[index] = spawn_daemon(specs[index]);
                write_all(report_fd, started[index] > 0
                                         ? fmt::format("started {}\n", started[index])
                                         : fmt::format("failed fork: {}\n", std::strerror(errno)));
            }
        }
    }

    // The daemons in the reverse order of their start (slurmd before slurmctld,
    // munged last, so nobody loses its authentication while shutting down);
    // then whatever of the cluster is left: the slurmstepd processes and the
    // tasks of jobs nobody cancelled came back to us as orphans.
    for (std::size_t i = specs.size(); i-- > 0;) {
        if (started[i] <= 0) continue;
        ::kill(started[i], SIGTERM);
        auto deadline = Clock::now() + k_daemon_stop_bound;
        while (process_alive(started[i]) && Clock::now() < deadline) {
            wait_child_event(signal_fd, 100ms);
        }
    }
    // Then the clients of a test binary that died (srun, salloc and what they
    // run), which are nobody's children here: they carry the cluster's
    // SLURM_CONF in their environment.
    auto deadline = Clock::now() + k_sweep_bound;
    for (;;) {
        reap_all();
        auto left = children_of(self);
        for (pid_t pid : processes_with_environment(cluster_env)) {
            if (pid != self) left.push_back(pid);
        }
        std::erase_if(left, [](pid_t pid) { return !process_alive(pid); });
        if (left.empty() || Clock::now() >= deadline) break;
        for (pid_t pid : left) ::kill(pid, SIGKILL);
        wait_child_event(signal_fd, 100ms);
    }
    for (const auto& node : nodes) remove_empty_cgroups(node);
    std::string restore_error =
        edit_hosts([self](std::string_view line) { return marked_keeper(line) != self; }, "");
    write_all(report_fd, restore_error.empty() ? std::string("stopped\n")
                                               : "stopped hosts error " + restore_error + "\n");
    std::_Exit(0);
}

// --- the test process's side ----------------------------------------------------

// Reads one line from the keeper, bounded. Empty on timeout or end of file.
std::string read_report_line(int fd, Milliseconds timeout) {
    std::string line;
    auto deadline = Clock::now() + timeout;
    for (;;) {
        auto left = std::chrono::duration_cast<Milliseconds>(deadline - Clock::now());
        if (left <= 0ms) return {};
        pollfd pfd{fd, POLLIN, 0};
        int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return {};
        char c = 0;
        ssize_t n = ::read(fd, &c, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return {};
        if (c == '\n') return line;
        line += c;
    }
}

}  // namespace

Keeper::~Keeper() {
    // The end of file tells the keeper to clean up by itself.
    if (m_control >= 0) ::close(m_control);
    if (m_report >= 0) ::close(m_report);
}

std::string Keeper::start(const std::vector<DaemonSpec>& daemons,
                          const std::vector<std::string>& nodes, const std::string& cluster_env,
                          const std::string& log_path) {
    int control[2];
    int report[2];
    if (::pipe2(control, O_CLOEXEC) != 0) fail_syscall("pipe2");
    if (::pipe2(report, O_CLOEXEC) != 0) fail_syscall("pipe2");

    // Forked twice, so the keeper is nobody's child in the test process: it
    // must not count as a leftover of a test, and it must outlive a test
    // binary that crashes.
    pid_t middle = ::fork();
    if (middle < 0) fail_syscall("fork");
    if (middle == 0) {
        if (::fork() != 0) ::_exit(0);
        ::close(control[1]);
        ::close(report[0]);
        int null = ::open("/dev/null", O_RDONLY);
        int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        // Only its two pipe ends: an inherited write end of a test's pipe would
        // keep that pipe open for as long as the cluster runs.
        int keep_control = ::fcntl(control[0], F_DUPFD, 3);
        int keep_report = ::fcntl(report[1], F_DUPFD, keep_control + 1);
        ::close_range(3, static_cast<unsigned>(keep_control - 1), 0);
        ::close_range(static_cast<unsigned>(keep_report + 1), ~0U, 0);
        keeper_main(keep_control, keep_report, daemons, nodes, cluster_env);
    }
    int status = 0;
    while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(control[0]);
    ::close(report[1]);
    m_control = control[1];
    m_report = report[0];

    std::string hosts = read_report_line(m_report, k_answer_bound);
    if (hosts != "hosts ok") {
        return hosts.empty() ? "the cluster's keeper process did not answer"
                             : "cannot add the node names to /etc/hosts: " + hosts.substr(12);
    }
    return {};
}

std::expected<pid_t, std::string> Keeper::start_daemon(std::size_t index) {
    write_all(m_control, fmt::format("start {}\n", index));
    std::string answer = read_report_line(m_report, k_answer_bound);
    if (!answer.starts_with("started "))
        return std::unexpected(answer.empty() ? "the keeper did not answer" : answer);
    return static_cast<pid_t>(std::strtol(answer.c_str() + 8, nullptr, 10));
}

std::string Keeper::stop() {
    if (m_control < 0) return {};
    write_all(m_control, "stop\n");
    // The keeper answers "stopped" when it has cleaned up; its own bounds add
    // up to well under this (one daemon stop bound per daemon, then the sweep).
    std::string answer;
    auto deadline = Clock::now() + k_daemon_stop_bound * 5 + k_sweep_bound + k_answer_bound;
    while (!answer.starts_with("stopped")) {
        auto left = std::chrono::duration_cast<Milliseconds>(deadline - Clock::now());
        if (left <= 0ms) break;
        answer = read_report_line(m_report, left);
        if (answer.empty()) break;
    }
    ::close(m_control);
    ::close(m_report);
    m_control = m_report = -1;
    if (answer == "stopped") return {};
    return answer.empty() ? "no answer from the keeper" : answer;
}

}  // namespace ddprun_it
