// fake_worker: the program the integration tests launch under ddprun. Its
// behaviour is chosen by its arguments, run in order, so a test states what a
// worker does (print, fail, crash, hang, ignore SIGTERM, leave grandchildren
// behind) in its command line instead of needing one helper program per case.
// It uses no project code: it must behave like a foreign user program.
//
// Actions (arguments in <>; [x] optional):
//   print <n>               n lines "line <i> rank <RANK>" to stdout
//   stderr <n>              n lines "err <i> rank <RANK>" to stderr
//   partial <text>          <text> without a newline on stdout
//   partial-stderr <text>   the same on stderr
//   flood <n>               n lines of exactly 100 bytes "flood <RANK> <i> xxx...\n", fast
//   exit <code>             exit now with <code>
//   raise <signal>          die of <signal> (SIGSEGV, SEGV or 11); no core file
//   sleep <seconds>         sleep (fractions allowed); trapped signals do not cut it short
//   ignore-term             ignore SIGTERM (same as "ignore SIGTERM")
//   ignore <signal>         ignore <signal>
//   trap <signal>           on <signal> print "got <SIGNAME>" and carry on
//   trap-exit <signal>      on <signal> print "got <SIGNAME>" and die of it
//   wait-signal             wait (30 s at most) for SIGUSR1/SIGUSR2, print "got SIGUSR1";
//                           exits 98 with "no signal" on stderr if none came
//   save-on-term <seconds>  wait (30 s at most) for SIGTERM, then take <seconds> to "save a
//                           checkpoint", print "saved rank <RANK>" and exit 0 (a SIGKILL
//                           meanwhile loses the save); exits 98 if no SIGTERM came
//   save-marker <path>      a later save-on-term also creates <path> once its save is done
//                           (a proof of the save that does not depend on stdout reaching anyone)
//   count-signal <signal> <path>  from now on append "<SIGNAME> <RANK>" to <path> on every
//                           receipt of <signal> (one line per delivery), and carry on
//   wait-file <path>        wait (30 s at most) until <path> exists; exit 97 if it never does
//   ready <path>            create <path> (so a test knows the worker runs this far)
//   spawn-grandchild [setsid]  fork a child that sleeps forever (after setsid())
//   vfork-sleep <seconds>   vfork() a child that sleeps <seconds>, then _exit(0)s: meanwhile
//                           this process waits in the kernel in state D (uninterruptible
//                           sleep, though SIGKILL still ends it), then goes on
//   env                     print the launcher's variables as KEY=VALUE, "<unset>" if unset
//   getenv <name>           print "<name>=<value>" ("<unset>" if unset), e.g. SLURM_JOB_ID
//   args                    print "argc=<n>" and "argv[<i>]=<value>" for i >= 1, then stop
//                           reading actions (the rest is data)
//   write-error-file <msg>  write torch's @record JSON to $TORCHELASTIC_ERROR_FILE
//   stdout-close            close stdout
//   huge-line <bytes>       <bytes> bytes of 'h' on stdout and no newline, in 64 KiB writes
//   allocate <mib>          allocate <mib> MiB and write to every page of it (prey for the
//                           OOM killer of a memory cgroup with a smaller limit), then go on
//   read-stdin              read stdin to its end (30 s at most), then print
//                           "stdin: eof after <n> bytes" (or "stdin: <error>"); exits 96
//                           with "stdin: still open" on stderr if it never ends
//   beat <n>:<ms>[:<label>] n progress beats to $DDPRUN_PROGRESS_FD, <ms> apart, each the
//                           line "<label> <i>" ("step <i>" by default); exits 95 if the
//                           variable is unset or a write fails
//   beat-storm <n>          n beats "s <i>" as fast as it can write them, then prints
//                           "storm <n> beats in <us> us" (the cost of a beat)
//   beat-background <rate>  from now on a thread beats "bg <i>" <rate> times a second until
//                           the process exits (load on ddprun's beat watch); exits 95 if
//                           the variable is unset or a write fails
//   slow-while <path>       a later beat-background beats ten times slower while <path>
//                           exists (a straggler the test turns on and off)
//   if-rank <r> <action...>        run the next action only when RANK == r
//   if-local-rank <r> <action...>  ... only when LOCAL_RANK == r
//   if-restart <n> <action...>     ... only when TORCHELASTIC_RESTART_COUNT == n
// In paths and texts "{rank}", "{local_rank}", "{restart}", "{round}" (DDPRUN_ROUND),
// "{world}" (WORLD_SIZE) and "{master}" (MASTER_ADDR) are replaced.
//
// Every fake_worker, and every grandchild it spawns, appends "<pid> <what>" to
// $FAKE_WORKER_PIDFILE (when set) in a single write, so a test can check that
// none of them outlives the job.

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr int k_usage_exit = 64;
constexpr int k_stdin_timeout_exit = 96;
constexpr int k_wait_file_timeout_exit = 97;
constexpr int k_wait_signal_timeout_exit = 98;
constexpr std::chrono::seconds k_wait_bound{30};

// Only what the signal handlers need: the text each trapped signal prints.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* g_trap_text[NSIG] = {};
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
bool g_trap_exits[NSIG] = {};
// count-signal: the file each counted signal appends to, and the line it appends.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
int g_count_fd[NSIG] = {};
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* g_count_text[NSIG] = {};

std::string env_or(const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return value ? value : fallback;
}

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return;  // EPIPE/EBADF: the reader is gone; a real program would die or carry on
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

[[noreturn]] void usage(const std::string& message) {
    write_all(2, "fake_worker: " + message + "\n");
    std::_Exit(k_usage_exit);
}

void record_pid(pid_t pid, const std::string& what) {
    const char* path = std::getenv("FAKE_WORKER_PIDFILE");
    if (!path || !*path) return;
    int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    // One write() per line: O_APPEND makes concurrent writers safe.
    write_all(fd, std::to_string(pid) + " " + what + "\n");
    ::close(fd);
}

std::string substitute(std::string text) {
    const std::pair<std::string, std::string> keys[] = {
        {"{rank}", env_or("RANK", "")},
        {"{local_rank}", env_or("LOCAL_RANK", "")},
        {"{restart}", env_or("TORCHELASTIC_RESTART_COUNT", "")},
        {"{round}", env_or("DDPRUN_ROUND", "")},
        {"{world}", env_or("WORLD_SIZE", "")},
        {"{master}", env_or("MASTER_ADDR", "")},
    };
    for (const auto& [key, value] : keys) {
        for (std::size_t at = text.find(key); at != std::string::npos;
             at = text.find(key, at + value.size())) {
            text.replace(at, key.size(), value);
        }
    }
    return text;
}

int parse_int(const std::string& text) {
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0') usage("not a number: " + text);
    return static_cast<int>(value);
}

int parse_signal(std::string name) {
    if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) return parse_int(name);
    if (name.starts_with("SIG")) name = name.substr(3);
    for (int sig = 1; sig < NSIG; ++sig) {
        const char* abbrev = sigabbrev_np(sig);
        if (abbrev && name == abbrev) return sig;
    }
    usage("unknown signal: " + name);
}

std::string signal_name(int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void sleep_for(std::chrono::duration<double> duration) {
    // sleep_for resumes after EINTR, so trapped signals do not shorten it.
    auto deadline = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_until(deadline);
    }
}

void on_trapped_signal(int sig) {
    const char* text = g_trap_text[sig];
    if (text) {
        // Async-signal-safe: write(2) of a string prepared before the handler was set.
        std::size_t length = std::strlen(text);
        ssize_t ignored = ::write(1, text, length);
        (void)ignored;
    }
    if (g_trap_exits[sig]) {
        ::signal(sig, SIG_DFL);
        ::raise(sig);
    }
}

void trap(int sig, bool then_exit) {
    // Leaked on purpose: the handler may read it until the process ends.
    auto* text = new std::string("got " + signal_name(sig) + "\n");
    g_trap_text[sig] = text->c_str();
    g_trap_exits[sig] = then_exit;
    struct sigaction action {};
    action.sa_handler = on_trapped_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(sig, &action, nullptr);
}

void on_counted_signal(int sig) {
    // Async-signal-safe: one write(2) to an O_APPEND file opened beforehand, so
    // every delivery is exactly one whole line, whoever else appends.
    int saved_errno = errno;
    const char* text = g_count_text[sig];
    if (text) {
        ssize_t ignored = ::write(g_count_fd[sig], text, std::strlen(text));
        (void)ignored;
    }
    errno = saved_errno;
}

void count_signal(int sig, const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) usage("count-signal: cannot open " + path);
    // Leaked on purpose: the handler may read it until the process ends.
    auto* text = new std::string(signal_name(sig) + " " + env_or("RANK", "?") + "\n");
    g_count_fd[sig] = fd;
    g_count_text[sig] = text->c_str();
    struct sigaction action {};
    action.sa_handler = on_counted_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    ::sigaction(sig, &action, nullptr);
    // A signal blocked on the way here (wait-signal blocks SIGUSR1/2) would never arrive.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

std::string json_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buffer[8];
                    std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
                    out += buffer;
                } else {
                    out += c;
                }
        }
    }
    return out;
}

void write_error_file(const std::string& message) {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (!path || !*path) usage("write-error-file: TORCHELASTIC_ERROR_FILE is not set");
    std::string json = "{\"message\": {\"message\": \"" + json_escape(message) +
                       "\", \"extraInfo\": {\"timestamp\": \"" +
                       std::to_string(std::time(nullptr)) + "\"}}}\n";
    int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) usage(std::string("write-error-file: cannot open ") + path);
    write_all(fd, json);
    ::close(fd);
}

void spawn_grandchild(bool new_session) {
    pid_t pid = ::fork();
    if (pid < 0) usage("fork failed");
    if (pid == 0) {
        if (new_session) ::setsid();
        // Like a data-loader or daemon child: no PDEATHSIG, keeps the inherited fds.
        for (;;) ::pause();
    }
    // Recorded by the parent so the pid is in the file before any later action runs.
    record_pid(pid, new_session ? "grandchild setsid" : "grandchild");
}

void vfork_sleep(double seconds) {
    // Everything the child needs is ready before the vfork: it shares this process's
    // memory and stack until it exits, so it only makes system calls.
    const char* path = std::getenv("FAKE_WORKER_PIDFILE");
    const int pidfile =
        path && *path ? ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    const auto whole = static_cast<time_t>(seconds);
    const timespec duration{whole, static_cast<long>((seconds - static_cast<double>(whole)) * 1e9)};
    pid_t pid = ::vfork();
    if (pid < 0) usage("vfork failed");
    if (pid == 0) {
        if (pidfile >= 0) {
            // "<pid> vfork child\n", by hand: no allocation in a vfork child.
            char digits[16];
            int count = 0;
            pid_t self = ::getpid();
            do {
                digits[count++] = static_cast<char>('0' + self % 10);
                self /= 10;
            } while (self > 0);
            char line[32];
            std::size_t length = 0;
            while (count > 0) line[length++] = digits[--count];
            static constexpr char k_what[] = " vfork child\n";
            std::memcpy(line + length, k_what, sizeof k_what - 1);
            length += sizeof k_what - 1;
            ssize_t ignored = ::write(pidfile, line, length);
            (void)ignored;
        }
        timespec left = duration;
        while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
        }
        ::_exit(0);
    }
    if (pidfile >= 0) ::close(pidfile);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}

void print_env() {
    static constexpr const char* k_names[] = {
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
        "TORCHELASTIC_RESTART_COUNT",
        "DDPRUN_ROUND",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_ERROR_FILE",
        "OMP_NUM_THREADS",
        "PYTHONUNBUFFERED",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING",
        "TORCHELASTIC_SIGNALS_TO_HANDLE",
    };
    std::string out;
    for (const char* name : k_names) {
        out += std::string(name) + "=" + env_or(name, "<unset>") + "\n";
    }
    write_all(1, out);
}

// The fd ddprun names for progress beats; exits 95 when there is none.
int progress_fd() {
    const char* fd = std::getenv("DDPRUN_PROGRESS_FD");
    if (fd == nullptr) {
        write_all(2, "beat: DDPRUN_PROGRESS_FD is not set\n");
        std::_Exit(95);
    }
    return std::atoi(fd);
}

void beat_once(int fd, const std::string& line) {
    // One write per beat, as a worker's os.write(fd, b"step 3\n") is.
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
        write_all(2, "beat: write failed: " + std::string(std::strerror(errno)) + "\n");
        std::_Exit(95);
    }
}

// "<n>:<ms>[:<label>]": n beats <ms> apart.
void beat(const std::string& spec) {
    const int fd = progress_fd();
    const auto colon = spec.find(':');
    const int count = parse_int(spec.substr(0, colon));
    const auto rest = colon == std::string::npos ? std::string("0") : spec.substr(colon + 1);
    const auto second = rest.find(':');
    const int interval_ms = parse_int(rest.substr(0, second));
    const std::string label = second == std::string::npos ? "step" : rest.substr(second + 1);
    for (int i = 1; i <= count; ++i) {
        beat_once(fd, label + " " + std::to_string(i) + "\n");
        if (i < count) sleep_for(std::chrono::milliseconds(interval_ms));
    }
}

void beat_storm(int count) {
    const int fd = progress_fd();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) beat_once(fd, "s " + std::to_string(i) + "\n");
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    write_all(1, "storm " + std::to_string(count) + " beats in " + std::to_string(us) + " us\n");
}

// A thread that beats `rate` times a second for as long as the process lives.
// Deadlines are absolute, so the rate holds on average even though a sleep
// this short overshoots; after a stall (a stopped process) it does not try to
// catch up more than a second.
std::string g_slow_while;  // slow-while's path: beat-background slows while it exists

void beat_background(int rate) {
    if (rate <= 0) usage("beat-background: the rate must be positive");
    const int fd = progress_fd();
    std::thread([fd, rate, slow_while = g_slow_while] {
        const auto period = std::chrono::nanoseconds(1'000'000'000LL / rate);
        auto deadline = std::chrono::steady_clock::now();
        for (long long i = 1;; ++i) {
            beat_once(fd, "bg " + std::to_string(i) + "\n");
            const bool slow = !slow_while.empty() && ::access(slow_while.c_str(), F_OK) == 0;
            deadline += slow ? period * 10 : period;
            const auto now = std::chrono::steady_clock::now();
            if (now - deadline > std::chrono::seconds(1)) deadline = now;
            std::this_thread::sleep_until(deadline);
        }
    }).detach();
}

void flood(int count) {
    // Writes of whole lines, at most PIPE_BUF bytes each, so each is atomic and
    // the pipe never holds half a line: a worker descheduled in the middle of
    // a larger write would leave a partial line that the launcher rightly shows
    // after its partial-line delay, and the test would measure the scheduler.
    std::string rank = env_or("RANK", "?");
    std::string buffer;
    constexpr std::size_t k_line = 100;
    constexpr std::size_t k_chunk = PIPE_BUF / k_line * k_line;
    for (int i = 0; i < count; ++i) {
        std::string line = "flood " + rank + " " + std::to_string(i) + " ";
        line.resize(k_line - 1, 'x');
        line += '\n';
        buffer += line;
        if (buffer.size() + k_line > k_chunk) {
            write_all(1, buffer);
            buffer.clear();
        }
    }
    write_all(1, buffer);
}

void huge_line(int bytes) {
    const std::string chunk(64 * 1024, 'h');
    for (int left = bytes; left > 0;) {
        int now = std::min(left, static_cast<int>(chunk.size()));
        write_all(1, std::string_view(chunk).substr(0, static_cast<std::size_t>(now)));
        left -= now;
    }
}

void read_stdin() {
    // Bounded: a worker handed a terminal or an open pipe would block here for
    // good, which is the fault the tests look for.
    std::size_t total = 0;
    char buffer[4096];
    auto deadline = std::chrono::steady_clock::now() + k_wait_bound;
    for (;;) {
        pollfd pfd{0, POLLIN, 0};
        int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline - std::chrono::steady_clock::now())
                                        .count());
        if (left <= 0 || ::poll(&pfd, 1, left) == 0) {
            write_all(2, "stdin: still open\n");
            std::_Exit(k_stdin_timeout_exit);
        }
        ssize_t n = ::read(0, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            write_all(1, std::string("stdin: ") + std::strerror(errno) + "\n");
            return;
        }
        if (n == 0) break;
        total += static_cast<std::size_t>(n);
    }
    write_all(1, "stdin: eof after " + std::to_string(total) + " bytes\n");
}

void wait_signal() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    timespec timeout{static_cast<time_t>(k_wait_bound.count()), 0};
    for (;;) {
        int sig = ::sigtimedwait(&set, nullptr, &timeout);
        if (sig > 0) {
            write_all(1, "got " + signal_name(sig) + "\n");
            return;
        }
        if (errno == EINTR) continue;
        write_all(2, "no signal\n");
        std::_Exit(k_wait_signal_timeout_exit);
    }
}

void make_ready(const std::string& path);

// save-marker: the file save_on_term creates when its save is done; empty: none.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
std::string g_save_marker;

void save_on_term(std::chrono::duration<double> saving) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    timespec timeout{static_cast<time_t>(k_wait_bound.count()), 0};
    while (::sigtimedwait(&set, nullptr, &timeout) < 0) {
        if (errno == EINTR) continue;
        write_all(2, "no SIGTERM\n");
        std::_Exit(k_wait_signal_timeout_exit);
    }
    sleep_for(saving);
    if (!g_save_marker.empty()) make_ready(g_save_marker);
    write_all(1, "saved rank " + env_or("RANK", "?") + "\n");
    std::_Exit(0);
}

void wait_file(const std::string& path) {
    auto deadline = std::chrono::steady_clock::now() + k_wait_bound;
    struct stat info {};
    while (::stat(path.c_str(), &info) != 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            write_all(2, "wait-file: " + path + " never appeared\n");
            std::_Exit(k_wait_file_timeout_exit);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

void make_ready(const std::string& path) {
    // Created complete under a temporary name, so a waiter never sees half of it.
    std::string temporary = path + ".tmp" + std::to_string(::getpid());
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) usage("ready: cannot create " + temporary);
    write_all(fd, std::to_string(::getpid()) + "\n");
    ::close(fd);
    if (::rename(temporary.c_str(), path.c_str()) != 0) usage("ready: cannot rename to " + path);
}

class Interpreter {
  public:
    explicit Interpreter(std::span<char*> args) : m_args(args) {}

    void run() {
        std::size_t at = 0;
        while (at < m_args.size()) at = step(at, true);
    }

  private:
    std::string arg(std::size_t at, const char* action) const {
        if (at >= m_args.size()) usage(std::string(action) + ": missing argument");
        return m_args[at];
    }

    // Runs (or, when `execute` is false, only skips) the action at `at`;
    // returns the index of the next action.
    std::size_t step(std::size_t at, bool execute) {
        const std::string action = m_args[at];
        auto conditional = [&](const char* variable) {
            bool matches = env_or(variable, "") == arg(at + 1, action.c_str());
            if (at + 2 >= m_args.size()) usage(action + ": missing action");
            return step(at + 2, execute && matches);
        };
        if (action == "if-rank") return conditional("RANK");
        if (action == "if-local-rank") return conditional("LOCAL_RANK");
        if (action == "if-restart") return conditional("TORCHELASTIC_RESTART_COUNT");

        if (action == "args") {
            if (execute) print_args();
            return m_args.size();
        }
        if (action == "count-signal") {
            std::string sig = arg(at + 1, "count-signal");
            std::string path = arg(at + 2, "count-signal");
            if (execute) count_signal(parse_signal(sig), substitute(path));
            return at + 3;
        }
        if (action == "spawn-grandchild") {
            bool new_session = at + 1 < m_args.size() && std::string(m_args[at + 1]) == "setsid";
            if (execute) spawn_grandchild(new_session);
            return at + (new_session ? 2 : 1);
        }
        if (action == "ignore-term" || action == "wait-signal" || action == "env" ||
            action == "stdout-close" || action == "read-stdin") {
            if (execute) run_plain(action);
            return at + 1;
        }
        static constexpr std::string_view k_with_value[] = {
            "print",      "stderr",          "partial",     "partial-stderr",   "flood",
            "exit",       "raise",           "sleep",       "ignore",           "trap",
            "trap-exit",  "wait-file",       "ready",       "write-error-file", "huge-line",
            "allocate",   "save-on-term",    "save-marker", "getenv",           "beat",
            "beat-storm", "beat-background", "slow-while",  "vfork-sleep",
        };
        if (std::find(std::begin(k_with_value), std::end(k_with_value), action) ==
            std::end(k_with_value)) {
            usage("unknown action: " + action);
        }
        std::string value = arg(at + 1, action.c_str());
        if (execute) run_with_value(action, value);
        return at + 2;
    }

    void run_plain(const std::string& action) {
        if (action == "ignore-term") {
            ::signal(SIGTERM, SIG_IGN);
        } else if (action == "wait-signal") {
            wait_signal();
        } else if (action == "env") {
            print_env();
        } else if (action == "stdout-close") {
            ::close(1);
        } else if (action == "read-stdin") {
            read_stdin();
        }
    }

    void run_with_value(const std::string& action, const std::string& raw) {
        std::string value = substitute(raw);
        std::string rank = env_or("RANK", "?");
        if (action == "print" || action == "stderr") {
            bool to_stderr = action == "stderr";
            int count = parse_int(value);
            for (int i = 0; i < count; ++i) {
                write_all(to_stderr ? 2 : 1, std::string(to_stderr ? "err " : "line ") +
                                                 std::to_string(i) + " rank " + rank + "\n");
            }
        } else if (action == "partial") {
            write_all(1, value);
        } else if (action == "partial-stderr") {
            write_all(2, value);
        } else if (action == "flood") {
            flood(parse_int(value));
        } else if (action == "beat") {
            beat(value);
        } else if (action == "beat-storm") {
            beat_storm(parse_int(value));
        } else if (action == "beat-background") {
            beat_background(parse_int(value));
        } else if (action == "slow-while") {
            g_slow_while = value;
        } else if (action == "huge-line") {
            huge_line(parse_int(value));
        } else if (action == "allocate") {
            const std::size_t bytes = static_cast<std::size_t>(parse_int(value)) << 20;
            // Kept to the end; volatile, so that the writes are not optimized away.
            auto* memory = static_cast<volatile char*>(std::malloc(bytes));
            if (memory == nullptr) usage("allocate: malloc failed");
            for (std::size_t i = 0; i < bytes; i += 4096) memory[i] = 1;
        } else if (action == "exit") {
            std::_Exit(parse_int(value));
        } else if (action == "raise") {
            int sig = parse_signal(value);
            rlimit no_core{0, 0};
            ::setrlimit(RLIMIT_CORE, &no_core);
            ::signal(sig, SIG_DFL);
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, sig);
            ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
            ::raise(sig);
            usage("raise: still alive after " + value);
        } else if (action == "sleep") {
            char* end = nullptr;
            double seconds = std::strtod(value.c_str(), &end);
            if (end == value.c_str() || *end != '\0' || seconds < 0) usage("bad sleep: " + value);
            sleep_for(std::chrono::duration<double>(seconds));
        } else if (action == "vfork-sleep") {
            char* end = nullptr;
            double seconds = std::strtod(value.c_str(), &end);
            if (end == value.c_str() || *end != '\0' || seconds < 0)
                usage("bad vfork-sleep: " + value);
            vfork_sleep(seconds);
        } else if (action == "save-on-term") {
            char* end = nullptr;
            double seconds = std::strtod(value.c_str(), &end);
            if (end == value.c_str() || *end != '\0' || seconds < 0)
                usage("bad save-on-term: " + value);
            save_on_term(std::chrono::duration<double>(seconds));
        } else if (action == "save-marker") {
            g_save_marker = value;
        } else if (action == "getenv") {
            write_all(1, value + "=" + env_or(value.c_str(), "<unset>") + "\n");
        } else if (action == "ignore") {
            ::signal(parse_signal(value), SIG_IGN);
        } else if (action == "trap" || action == "trap-exit") {
            trap(parse_signal(value), action == "trap-exit");
        } else if (action == "wait-file") {
            wait_file(value);
        } else if (action == "ready") {
            make_ready(value);
        } else if (action == "write-error-file") {
            write_error_file(value);
        }
    }

    void print_args() const {
        std::string out = "argc=" + std::to_string(m_args.size() + 1) + "\n";
        for (std::size_t i = 0; i < m_args.size(); ++i) {
            out += "argv[" + std::to_string(i + 1) + "]=" + m_args[i] + "\n";
        }
        write_all(1, out);
    }

    std::span<char*> m_args;
};

}  // namespace

int main(int argc, char** argv) {
    record_pid(::getpid(), "worker rank=" + env_or("RANK", "?"));

    std::span<char*> args(argv + 1, static_cast<std::size_t>(argc - 1));
    // SIGUSR1/2 are blocked up front when a wait-signal follows, so a signal
    // forwarded before the worker reaches it stays pending instead of killing it.
    // SIGTERM likewise when a save-on-term follows.
    for (char* arg : args) {
        if (std::string_view(arg) == "save-on-term") {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGTERM);
            ::sigprocmask(SIG_BLOCK, &set, nullptr);
            break;
        }
    }
    for (char* arg : args) {
        if (std::string_view(arg) == "wait-signal") {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGUSR1);
            sigaddset(&set, SIGUSR2);
            ::sigprocmask(SIG_BLOCK, &set, nullptr);
            break;
        }
    }

    Interpreter(args).run();
    return 0;
}
