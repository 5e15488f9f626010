// The integration harness: spawning ddprun, draining its output, bounded
// waits, and the leftover-process check (see harness.hpp for why).

#include "harness.hpp"

#include "support/free_port.hpp"
#include "support/text_lines.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

extern char** environ;

namespace ddprun_it {

namespace {

[[noreturn]] void fail_syscall(const char* call) {
    throw std::runtime_error(fmt::format("{} failed: {}", call, std::strerror(errno)));
}

int decode_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

// Variables that would change what ddprun or a worker does if the developer's
// shell happened to set them.
bool is_hermetic_blocked(std::string_view name) {
    static const std::set<std::string, std::less<>> k_exact = {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "GROUP_WORLD_SIZE",
        "NNODES",
        "ROLE_NAME",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "PYTHONUNBUFFERED",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "LOGLEVEL",
        "PYTHON_EXEC",
        "PYTHONPATH",
        "FAKE_WORKER_PIDFILE",
    };
    // A scheduler's variables would make ddprun take its job shape from them.
    return k_exact.contains(name) || name.starts_with("DDPRUN_") || name.starts_with("PET_") ||
           name.starts_with("TORCHELASTIC_") || name.starts_with("SLURM_") ||
           name.starts_with("OMPI_") || name.starts_with("PMI_") || name.starts_with("PMIX_") ||
           name == "MPI_LOCALNRANKS";
}

// /proc files of a process that may vanish while being read: plain read(2),
// where an ifstream would throw on ESRCH.
std::optional<std::string> read_proc_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return text;
}

}  // namespace

std::optional<ProcessInfo> process_info(pid_t pid) {
    auto stat = read_proc_file(fmt::format("/proc/{}/stat", pid));
    if (!stat) return std::nullopt;
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    auto close = stat->rfind(')');
    if (close == std::string::npos || close + 4 > stat->size()) return std::nullopt;
    ProcessInfo info;
    info.pid = pid;
    info.state = (*stat)[close + 2];
    info.ppid = static_cast<pid_t>(std::strtol(stat->c_str() + close + 4, nullptr, 10));
    info.cmdline = read_proc_file(fmt::format("/proc/{}/cmdline", pid)).value_or("");
    std::replace(info.cmdline.begin(), info.cmdline.end(), '\0', ' ');
    return info;
}

namespace {

// The pid still names a fake_worker (pids are reused quickly with a small pid_max).
bool is_fake_worker(pid_t pid) {
    char target[4096];
    ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), target, sizeof target - 1);
    if (n < 0) {
        // A zombie has no exe link; its cmdline is empty too. Count it: it is ours to reap.
        auto info = process_info(pid);
        return info && info->state == 'Z';
    }
    std::string_view exe(target, static_cast<std::size_t>(n));
    return exe.find("fake_worker") != std::string_view::npos;
}

}  // namespace

std::vector<pid_t> all_pids() {
    std::vector<pid_t> pids;
    DIR* proc = ::opendir("/proc");
    if (!proc) return pids;
    while (dirent* entry = ::readdir(proc)) {
        char* end = nullptr;
        long pid = std::strtol(entry->d_name, &end, 10);
        if (*end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
    }
    ::closedir(proc);
    return pids;
}

namespace {

// Children of `parent` in any state, zombies included.
std::vector<pid_t> all_children_of(pid_t parent) {
    std::vector<pid_t> children;
    for (pid_t pid : all_pids()) {
        auto info = process_info(pid);
        if (info && info->ppid == parent) children.push_back(info->pid);
    }
    return children;
}

std::vector<pid_t> children_of_self() {
    return all_children_of(::getpid());
}

// `pid` or one of its ancestors is in `roots`.
bool descends_from(pid_t pid, const std::set<pid_t>& roots) {
    // Bounded: a pid reused while we walk could in theory form a loop.
    for (int depth = 0; pid > 1 && depth < 64; ++depth) {
        if (roots.contains(pid)) return true;
        auto info = process_info(pid);
        if (!info) return false;
        pid = info->ppid;
    }
    return false;
}

// Reaps zombie children among `pids` without touching any other child.
void reap_zombies(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) {
        int status = 0;
        ::waitpid(pid, &status, WNOHANG);
    }
}

}  // namespace

std::string RunResult::describe() const {
    return fmt::format(
        "exit code {}{}{}, {} ms\n--- stdout ({} bytes) ---\n{}\n--- stderr ({} bytes) "
        "---\n{}\n---",
        exit_code, timed_out ? " (HANG: killed by the test's hang guard)" : "",
        pipes_left_open ? " (stdout/stderr still held open by a leftover process)" : "",
        elapsed.count(), out.size(), out.size() > 4000 ? out.substr(0, 4000) + "\n[...]" : out,
        err.size(), err.size() > 8000 ? err.substr(0, 8000) + "\n[...]" : err);
}

std::vector<std::string> ddprun_environment(const RunOptions& options) {
    std::map<std::string, std::string> env;
    for (char** entry = environ; *entry; ++entry) {
        std::string_view text(*entry);
        auto eq = text.find('=');
        if (eq == std::string_view::npos) continue;
        std::string name(text.substr(0, eq));
        if (is_hermetic_blocked(name)) continue;
        env[name] = std::string(text.substr(eq + 1));
    }
    if (options.hide_machine_gpus && machine_gpu_count() > 0) env["CUDA_VISIBLE_DEVICES"] = "";
    // Debian's torch 2.x is built without libuv, the default of its TCPStore from 2.4
    // on: a Python worker's init_process_group needs this there (as users' do, which
    // KnownTorchError checks by unsetting it). Older torch ignores it.
    env["USE_LIBUV"] = "0";
    for (const auto& name : options.unset_env) env.erase(name);
    for (const auto& [name, value] : options.env) env[name] = value;
    std::vector<std::string> out;
    for (const auto& [name, value] : env) out.push_back(name + "=" + value);
    return out;
}

DdprunProcess::DdprunProcess(const std::vector<std::string>& args, const RunOptions& options,
                             OnExit on_exit)
    : m_started(Clock::now()),
      m_timeout(options.timeout),
      m_on_exit(std::move(on_exit)),
      m_after_exit(options.after_exit) {
    // Everything the child needs is built before fork(): no allocation after it.
    std::vector<std::string> argv_storage{options.program.empty() ? k_ddprun : options.program};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : argv_storage) argv.push_back(arg.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_storage = ddprun_environment(options);
    std::vector<char*> envp;
    for (auto& entry : env_storage) envp.push_back(entry.data());
    envp.push_back(nullptr);

    int out_pipe[2];
    int err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) fail_syscall("pipe2");
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) fail_syscall("pipe2");
    int stdin_fd = -1;  // the read end of the stdin pipe, or /dev/null
    if (options.stdin_pipe) {
        int in_pipe[2];
        if (::pipe2(in_pipe, O_CLOEXEC) != 0) fail_syscall("pipe2");
        stdin_fd = in_pipe[0];
        m_stdin_fd = in_pipe[1];
    } else {
        stdin_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (stdin_fd < 0) fail_syscall("open /dev/null");
    }

    const pid_t test_pid = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) fail_syscall("fork");
    if (pid == 0) {
        ::setpgid(0, 0);
        // A test that died before the prctl took effect left no parent to signal.
        if (options.dies_with_test &&
            (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != test_pid)) {
            ::_exit(125);
        }
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::dup2(stdin_fd, 0);
        ::dup2(out_pipe[1], 1);
        ::dup2(err_pipe[1], 2);
        if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) ::_exit(125);
        ::execve(argv[0], argv.data(), envp.data());
        static constexpr char k_message[] = "harness: cannot execute the program (execve failed)\n";
        ssize_t ignored = ::write(2, k_message, sizeof k_message - 1);
        (void)ignored;
        ::_exit(125);
    }
    // Both sides call setpgid so signalling the group cannot race the exec.
    ::setpgid(pid, pid);
    m_pid = pid;
    ::close(stdin_fd);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    m_out_fd = out_pipe[0];
    m_err_fd = err_pipe[0];
    m_reader = std::thread([this] { read_pipes(); });
}

DdprunProcess::~DdprunProcess() {
    if (!m_reaped) {
        ::kill(-m_pid, SIGKILL);
        ::kill(m_pid, SIGKILL);
        int status = 0;
        while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
        }
        mark_reaped(true);
    }
    {
        std::lock_guard lock(m_mutex);
        m_stop_reading = true;
    }
    if (m_reader.joinable()) m_reader.join();
    close_stdin();
}

void DdprunProcess::send_signal(int signal) const {
    if (!m_reaped) ::kill(m_pid, signal);
}

bool DdprunProcess::write_stdin(std::string_view text) {
    if (m_stdin_fd < 0) return false;
    // A ddprun that is gone must fail the write, not kill the test with SIGPIPE: blocked
    // in this thread, and a pending one taken back before it is unblocked.
    sigset_t pipe_signal;
    sigset_t previous;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
    bool written = true;
    while (!text.empty()) {
        ssize_t n = ::write(m_stdin_fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            written = false;
            break;
        }
        text.remove_prefix(static_cast<std::size_t>(n));
    }
    const timespec no_wait{};
    while (::sigtimedwait(&pipe_signal, nullptr, &no_wait) == SIGPIPE) {
    }
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return written;
}

void DdprunProcess::close_stdin() {
    if (m_stdin_fd < 0) return;
    ::close(m_stdin_fd);
    m_stdin_fd = -1;
}

void DdprunProcess::close_output() {
    {
        std::lock_guard lock(m_mutex);
        m_stop_reading = true;
    }
    // The reader closes both pipes as it stops.
    if (m_reader.joinable()) m_reader.join();
}

void DdprunProcess::read_pipes() {
    char buffer[65536];
    for (;;) {
        pollfd fds[2] = {{m_out_fd, POLLIN, 0}, {m_err_fd, POLLIN, 0}};
        {
            std::lock_guard lock(m_mutex);
            if (m_stop_reading) break;
            if (!m_out_open) fds[0].fd = -1;
            if (!m_err_open) fds[1].fd = -1;
            if (!m_out_open && !m_err_open) break;
        }
        // A short poll timeout only so that m_stop_reading is noticed.
        int ready = ::poll(fds, 2, 50);
        if (ready < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || fds[i].revents == 0) continue;
            ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
            std::lock_guard lock(m_mutex);
            if (n <= 0) {
                (i == 0 ? m_out_open : m_err_open) = false;
            } else {
                (i == 0 ? m_out : m_err).append(buffer, static_cast<std::size_t>(n));
            }
            m_changed.notify_all();
        }
    }
    std::lock_guard lock(m_mutex);
    ::close(m_out_fd);
    ::close(m_err_fd);
    m_out_open = m_err_open = false;
    m_changed.notify_all();
}

void DdprunProcess::mark_reaped(bool killed_by_harness) {
    m_reaped = true;
    m_exited_at = Clock::now();
    if (m_on_exit) m_on_exit(killed_by_harness);
    if (m_after_exit) m_after_exit();
}

bool DdprunProcess::reap_if_exited() {
    if (m_reaped) return true;
    int status = 0;
    if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
        m_status = status;
        mark_reaped(false);
        return true;
    }
    if (Clock::now() < deadline()) return false;
    m_timed_out = true;
    ::kill(-m_pid, SIGKILL);
    ::kill(m_pid, SIGKILL);
    while (::waitpid(m_pid, &m_status, 0) < 0 && errno == EINTR) {
    }
    mark_reaped(true);
    return true;
}

namespace {

// Sleeps until one of `pids` may have exited, or `timeout` passes.
void wait_for_any_exit(const std::vector<pid_t>& pids, Milliseconds timeout) {
    std::vector<pollfd> fds;
    for (pid_t pid : pids) {
        int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    }
    // Without pidfds (old kernel) a short sleep stands in: only latency suffers.
    auto slice = fds.size() == pids.size() ? std::min<Milliseconds>(timeout, 1000ms)
                                           : std::min<Milliseconds>(timeout, 5ms);
    if (slice > 0ms) ::poll(fds.data(), fds.size(), static_cast<int>(slice.count()));
    for (auto& fd : fds) ::close(fd.fd);
}

}  // namespace

bool DdprunProcess::wait_exit_for(Milliseconds timeout) {
    auto until = std::min(Clock::now() + timeout, deadline());
    while (!reap_if_exited()) {
        auto left = std::chrono::duration_cast<Milliseconds>(until - Clock::now());
        if (left <= 0ms) return false;
        wait_for_any_exit({m_pid}, left);
    }
    return true;
}

RunResult DdprunProcess::wait() {
    while (!reap_if_exited()) {
        auto left = std::chrono::duration_cast<Milliseconds>(deadline() - Clock::now());
        wait_for_any_exit({m_pid}, std::max(left, 1ms));
    }
    RunResult result;
    result.timed_out = m_timed_out;
    result.exited_at = m_exited_at;
    result.elapsed = std::chrono::duration_cast<Milliseconds>(m_exited_at - m_started);
    result.exit_code = decode_status(m_status);

    // Output written just before the exit is still in the pipes: drain it, but
    // do not wait forever on a leftover process that holds them open.
    {
        std::unique_lock lock(m_mutex);
        bool closed = m_changed.wait_for(lock, 5s, [this] { return !m_out_open && !m_err_open; });
        if (!closed) {
            result.pipes_left_open = true;
            m_stop_reading = true;
        }
    }
    if (m_reader.joinable()) m_reader.join();
    std::lock_guard lock(m_mutex);
    result.out = m_out;
    result.err = m_err;
    return result;
}

std::string DdprunProcess::out_so_far() const {
    std::lock_guard lock(m_mutex);
    return m_out;
}

std::string DdprunProcess::err_so_far() const {
    std::lock_guard lock(m_mutex);
    return m_err;
}

bool DdprunProcess::wait_for_output(std::string_view needle, Milliseconds timeout, bool in_stderr) {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_for(lock, timeout, [&] {
        const std::string& text = in_stderr ? m_err : m_out;
        return text.find(needle) != std::string::npos;
    });
}

RunResult run_ddprun(const std::vector<std::string>& args, const RunOptions& options,
                     OnExit on_exit) {
    DdprunProcess process(args, options, std::move(on_exit));
    return process.wait();
}

RunResult run_command(const std::vector<std::string>& argv, RunOptions options) {
    if (argv.empty()) throw std::invalid_argument("run_command: empty argv");
    options.program = argv.front();
    return run_ddprun({argv.begin() + 1, argv.end()}, options);
}

std::vector<RunResult> wait_all(const std::vector<DdprunProcess*>& processes) {
    for (;;) {
        std::vector<pid_t> running;
        auto next_deadline = Clock::time_point::max();
        for (DdprunProcess* process : processes) {
            if (process->reap_if_exited()) continue;
            running.push_back(process->pid());
            next_deadline = std::min(next_deadline, process->deadline());
        }
        if (running.empty()) break;
        auto left = std::chrono::duration_cast<Milliseconds>(next_deadline - Clock::now());
        wait_for_any_exit(running, std::max(left, 1ms));
    }
    std::vector<RunResult> results;
    for (DdprunProcess* process : processes) results.push_back(process->wait());
    return results;
}

bool wait_until(const std::function<bool()>& condition, Milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
        if (condition()) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(10ms);
    }
}

bool wait_for_file(const std::string& path, Milliseconds timeout) {
    return wait_until([&] { return std::filesystem::exists(path); }, timeout);
}

int announced_metrics_port(DdprunProcess& agent) {
    if (!agent.wait_for_output("/metrics, health at /healthz", 20s, true)) return -1;
    std::smatch match;
    const std::string err = agent.err_so_far();
    static const std::regex line(R"(metrics at http://[^ ]+:(\d+)/metrics)");
    if (!std::regex_search(err, match, line)) return -1;
    return std::stoi(match[1]);
}

HttpAnswer http_get(const std::string& host, int port, const std::string& path) {
    RunOptions options;
    options.program = k_curl;
    options.timeout = 20s;
    auto r = run_command({k_curl, "-s", "--max-time", "10", "-w", "\n%{http_code}",
                          fmt::format("http://{}:{}{}", host, port, path)},
                         options);
    HttpAnswer answer;
    auto last = r.out.rfind('\n');
    if (last == std::string::npos) return answer;
    answer.body = r.out.substr(0, last);
    answer.status = std::atoi(r.out.c_str() + last + 1);
    return answer;
}

bool wait_for_metrics(const std::string& host, int port,
                      const std::function<bool(const std::string&)>& ready, HttpAnswer& last,
                      Milliseconds timeout) {
    return wait_until(
        [&] {
            last = http_get(host, port, "/metrics");
            return ready(last.body);
        },
        timeout);
}

bool has_sample(const std::string& text, const std::string& sample) {
    for (const auto& line : split_lines(text))
        if (line == sample) return true;
    return false;
}

std::vector<std::string> split_lines(std::string_view text) {
    return ddprun::lines_of(text);
}

std::optional<std::pair<int, std::string_view>> split_prefix(std::string_view line) {
    // Hand-written rather than std::regex: the flood test parses 160000 lines.
    if (line.size() < 4 || line[0] != '[') return std::nullopt;
    std::size_t end = 1;
    int rank = 0;
    while (end < line.size() && end < 8 && std::isdigit(static_cast<unsigned char>(line[end]))) {
        rank = rank * 10 + (line[end] - '0');
        ++end;
    }
    if (end == 1 || line.substr(end, 3) != "]: ") return std::nullopt;
    return std::pair{rank, line.substr(end + 3)};
}

std::map<int, std::vector<std::string>> lines_by_rank(std::string_view text) {
    std::map<int, std::vector<std::string>> out;
    for (const auto& line : split_lines(text)) {
        if (auto prefixed = split_prefix(line)) {
            out[prefixed->first].emplace_back(prefixed->second);
        }
    }
    return out;
}

std::map<int, std::map<std::string, std::string>> env_by_rank(std::string_view text) {
    std::map<int, std::map<std::string, std::string>> out;
    for (const auto& [rank, lines] : lines_by_rank(text)) {
        for (const auto& line : lines) {
            auto eq = line.find('=');
            if (eq != std::string::npos) out[rank][line.substr(0, eq)] = line.substr(eq + 1);
        }
    }
    return out;
}

std::size_t count_occurrences(std::string_view text, std::string_view needle) {
    std::size_t count = 0;
    for (auto at = text.find(needle); at != std::string_view::npos;
         at = text.find(needle, at + needle.size())) {
        ++count;
    }
    return count;
}

std::string read_text_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

void write_text_file(const std::string& path, const std::string& content, unsigned mode) {
    {
        std::ofstream file(path, std::ios::binary | std::ios::trunc);
        file << content;
    }
    ::chmod(path.c_str(), static_cast<mode_t>(mode));
}

int machine_gpu_count() {
    std::error_code error;
    int count = 0;
    for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", error), end;
         !error && it != end; it.increment(error)) {
        ++count;
    }
    return count;
}

bool torch_defaults_start() {
    static const bool start = [] {
        RunOptions options;
        options.timeout = 60s;
        return run_command({k_python, "-c",
                            "import datetime; from torch.distributed import TCPStore; "
                            "TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=5))"},
                           options)
                   .exit_code == 0;
    }();
    return start;
}

int free_port() {
    return ddprun::free_test_port();
}

bool port_accepts(const std::string& host, int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail_syscall("socket");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
        ::close(fd);
        throw std::runtime_error("port_accepts: not an IPv4 address: " + host);
    }
    bool accepted = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return accepted;
}

std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> live;
    for (pid_t pid : all_children_of(parent)) {
        if (process_alive(pid)) live.push_back(pid);
    }
    return live;
}

bool process_alive(pid_t pid) {
    auto info = process_info(pid);
    return info && info->state != 'Z' && info->state != 'X';
}

std::vector<ProcessInfo> live_in_groups_or_sessions(const std::set<pid_t>& leaders) {
    std::vector<ProcessInfo> found;
    if (leaders.empty()) return found;
    for (pid_t pid : all_pids()) {
        auto stat = read_proc_file(fmt::format("/proc/{}/stat", pid));
        if (!stat) continue;
        // "pid (comm) state ppid pgrp session ..."
        auto close = stat->rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(stat->substr(close + 1));
        char state = '?';
        long ppid = 0;
        long group = 0;
        long session = 0;
        if (!(fields >> state >> ppid >> group >> session)) continue;
        if (state == 'Z' || state == 'X') continue;
        if (!leaders.contains(static_cast<pid_t>(group)) &&
            !leaders.contains(static_cast<pid_t>(session))) {
            continue;
        }
        if (auto info = process_info(static_cast<pid_t>(pid))) found.push_back(*info);
    }
    return found;
}

std::string describe(const std::vector<ProcessInfo>& processes) {
    std::string out;
    for (const auto& info : processes) {
        out += fmt::format("  pid {} ppid {} state {}: {}\n", info.pid, info.ppid, info.state,
                           info.cmdline);
    }
    return out;
}

void IntegrationTest::SetUp() {
    // Orphans of the job are reparented to the test, so none can hide from the check.
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) fail_syscall("prctl(PR_SET_CHILD_SUBREAPER)");
    std::string pattern = (std::filesystem::temp_directory_path() / "ddprun-it-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) fail_syscall("mkdtemp");
    m_dir = pattern;
    m_pidfile = path("pids");
}

void IntegrationTest::TearDown() {
    assert_no_leftovers();
    if (HasFailure()) {
        std::fprintf(stderr, "test files kept in %s\n", m_dir.c_str());
    } else {
        std::error_code ignored;
        std::filesystem::remove_all(m_dir, ignored);
    }
}

std::string IntegrationTest::path(const std::string& name) const {
    return m_dir + "/" + name;
}

RunResult IntegrationTest::run(const std::vector<std::string>& args, RunOptions options) {
    return start(args, std::move(options))->wait();
}

std::unique_ptr<DdprunProcess> IntegrationTest::start(const std::vector<std::string>& args,
                                                      RunOptions options) {
    options.env.emplace_back("FAKE_WORKER_PIDFILE", m_pidfile);
    // The pid is known only once the process exists; the callback runs after that.
    auto pid = std::make_shared<pid_t>(-1);
    auto process = std::make_unique<DdprunProcess>(
        args, options, [this, pid](bool killed) { on_ddprun_exit(*pid, killed); });
    *pid = process->pid();
    m_running.insert(*pid);
    return process;
}

std::vector<pid_t> pids_in_file(const std::string& pidfile) {
    std::vector<pid_t> pids;
    std::istringstream text(read_text_file(pidfile));
    std::string line;
    while (std::getline(text, line)) {
        long pid = std::strtol(line.c_str(), nullptr, 10);
        if (pid > 0) pids.push_back(static_cast<pid_t>(pid));
    }
    return pids;
}

std::vector<ProcessInfo> live_fake_workers(const std::string& pidfile) {
    std::vector<ProcessInfo> live;
    for (pid_t pid : pids_in_file(pidfile)) {
        if (!is_fake_worker(pid)) continue;
        auto info = process_info(pid);
        if (info && info->state != 'Z' && info->state != 'X') live.push_back(*info);
    }
    return live;
}

std::vector<pid_t> IntegrationTest::recorded_pids() const {
    return pids_in_file(m_pidfile);
}

std::map<int, std::vector<pid_t>> IntegrationTest::recorded_workers() const {
    std::map<int, std::vector<pid_t>> workers;
    std::istringstream text(read_text_file(m_pidfile));
    std::string line;
    while (std::getline(text, line)) {
        // "<pid> worker rank=<RANK>"
        auto at = line.find(" worker rank=");
        if (at == std::string::npos) continue;
        char* end = nullptr;
        long rank = std::strtol(line.c_str() + at + 13, &end, 10);
        if (end == line.c_str() + at + 13) continue;
        workers[static_cast<int>(rank)].push_back(
            static_cast<pid_t>(std::strtol(line.c_str(), nullptr, 10)));
    }
    return workers;
}

std::vector<ProcessInfo> IntegrationTest::live_job_processes() const {
    std::set<pid_t> candidates;
    for (pid_t pid : recorded_pids()) {
        if (is_fake_worker(pid)) candidates.insert(pid);
    }
    for (pid_t pid : children_of_self())
        if (!m_services.contains(pid)) candidates.insert(pid);
    std::vector<ProcessInfo> live;
    for (pid_t pid : candidates) {
        auto info = process_info(pid);
        if (info && info->state != 'Z' && info->state != 'X') live.push_back(*info);
    }
    return live;
}

void IntegrationTest::on_ddprun_exit(pid_t pid, bool killed_by_harness) {
    m_running.erase(pid);
    // A ddprun the harness SIGKILLed could not clean up synchronously; the
    // test has failed already and its orphans only get the bounded grace.
    if (killed_by_harness) {
        m_orphans_allowed_grace = true;
    } else {
        record_survivors();
    }
}

void IntegrationTest::record_survivors() {
    // Taken the moment ddprun is reaped: a job process alive now outlived it.
    // A zombie here died no later than ddprun did and is merely unreaped.
    // Processes under a ddprun of this test that still runs (another node of
    // the job, another job) are legitimately alive.
    for (const auto& info : live_job_processes()) {
        if (descends_from(info.pid, m_running)) continue;
        bool known = std::any_of(m_survivors.begin(), m_survivors.end(),
                                 [&](const ProcessInfo& seen) { return seen.pid == info.pid; });
        if (!known) m_survivors.push_back(info);
    }
}

std::vector<ProcessInfo> IntegrationTest::wait_job_gone(Milliseconds timeout) {
    std::vector<ProcessInfo> live;
    wait_until(
        [&] {
            reap_zombies(children_of_self());
            live = live_job_processes();
            if (!live.empty()) return false;
            // A zombie that cannot be reaped yet has threads still exiting, holding its
            // files (a scratch directory's lock): gone once reaped.
            auto children = children_of_self();
            return std::all_of(children.begin(), children.end(),
                               [this](pid_t pid) { return m_services.contains(pid); });
        },
        timeout);
    return live;
}

void IntegrationTest::assert_no_leftovers() {
    if (m_orphans_allowed_grace) {
        auto live = wait_job_gone(k_orphan_grace);
        EXPECT_TRUE(live.empty()) << "processes of the job still alive " << k_orphan_grace.count()
                                  << " ms after ddprun was killed:\n"
                                  << describe(live);
    } else {
        EXPECT_TRUE(m_survivors.empty())
            << "processes of the job were still alive after ddprun exited:\n"
            << describe(m_survivors);
        auto live = live_job_processes();
        EXPECT_TRUE(live.empty()) << "processes of the job alive at the end of the test:\n"
                                  << describe(live);
    }

    // Clean up whatever is left so one failing test does not leak into the next.
    for (const auto& info : live_job_processes()) ::kill(info.pid, SIGKILL);
    // Every child reaped, but the test's services (they outlive a test; their owner stops them).
    wait_until(
        [this] {
            auto children = children_of_self();
            reap_zombies(children);
            return std::all_of(children.begin(), children.end(), [this](pid_t pid) {
                return m_services.contains(pid) || !process_alive(pid);
            });
        },
        5s);
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

std::vector<std::string> non_empty_lines(const std::string& text) {
    std::vector<std::string> lines;
    for (auto& line : split_lines(text)) {
        if (!line.empty()) lines.push_back(line);
    }
    return lines;
}

std::vector<std::string> ddprun_own_lines(const std::string& err) {
    std::vector<std::string> lines;
    for (auto& line : non_empty_lines(err)) {
        if (!split_prefix(line)) lines.push_back(line);
    }
    return lines;
}

std::string ddprun_messages(const std::string& err) {
    std::string text;
    for (const auto& line : ddprun_own_lines(err)) text += line + "\n";
    return text;
}

std::vector<std::string> fail_when_all_ready(const std::string& dir, int world, int failing,
                                             const std::vector<std::string>& failure) {
    std::vector<std::string> actions{"ready", dir + "/ready.{rank}"};
    std::string who = std::to_string(failing);
    for (int rank = 0; rank < world; ++rank) {
        if (rank == failing) continue;
        actions.insert(actions.end(),
                       {"if-rank", who, "wait-file", fmt::format("{}/ready.{}", dir, rank)});
    }
    for (std::size_t i = 0; i + 1 < failure.size(); i += 2) {
        actions.insert(actions.end(), {"if-rank", who, failure[i], failure[i + 1]});
    }
    actions.insert(actions.end(), {"sleep", "300"});
    return actions;
}

}  // namespace ddprun_it
