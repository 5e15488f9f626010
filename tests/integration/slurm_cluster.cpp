// The Slurm cluster of the scheduler tests: configuration, the keeper process
// that owns the daemons and the /etc/hosts line, and the bounded readiness
// checks (see slurm_cluster.hpp for why it is built this way).

#include "slurm_cluster.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ddprun_it {

namespace {

// How long each stage of a start may take on a loaded 2-core machine before
// the cluster counts as not coming up.
constexpr Milliseconds k_socket_bound = 10s;
constexpr Milliseconds k_controller_bound = 30s;
constexpr Milliseconds k_nodes_bound = 30s;
constexpr Milliseconds k_smoke_step_bound = 30s;
// How long the keeper gives the daemons to exit on SIGTERM, and itself to
// kill and reap what is left, before it gives up.
constexpr Milliseconds k_daemon_stop_bound = 10s;
constexpr Milliseconds k_sweep_bound = 10s;
// How long stop() waits for cancelled jobs to leave the queue.
constexpr Milliseconds k_jobs_gone_bound = 30s;

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

std::string last_lines(const std::string& text, std::size_t count) {
    auto lines = split_lines(text);
    std::size_t from = lines.size() > count ? lines.size() - count : 0;
    std::string out;
    for (std::size_t i = from; i < lines.size(); ++i) out += "    " + lines[i] + "\n";
    return out;
}

// --- /etc/hosts ---------------------------------------------------------------

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

// --- the keeper -------------------------------------------------------------------

struct KeeperSpec {
    std::string name;
    std::vector<std::string> argv;
    std::string log;
};

// Live processes whose parent is `parent`.
std::vector<pid_t> children_of_process(pid_t parent) {
    std::vector<pid_t> children;
    DIR* proc = ::opendir("/proc");
    if (!proc) return children;
    while (dirent* entry = ::readdir(proc)) {
        char* end = nullptr;
        long pid = std::strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        auto info = process_info(static_cast<pid_t>(pid));
        if (info && info->ppid == parent) children.push_back(info->pid);
    }
    ::closedir(proc);
    return children;
}

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
pid_t spawn_daemon(const KeeperSpec& spec) {
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

// The keeper's whole life. It runs in a process forked from the test binary
// while that is still single-threaded, so it may allocate.
[[noreturn]] void keeper_main(int control_fd, int report_fd, const std::vector<KeeperSpec>& specs,
                              const std::vector<std::string>& nodes) {
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
    auto deadline = Clock::now() + k_sweep_bound;
    for (;;) {
        reap_all();
        auto children = children_of_process(self);
        std::erase_if(children, [](pid_t pid) { return !process_alive(pid); });
        if (children.empty() || Clock::now() >= deadline) break;
        for (pid_t pid : children) ::kill(pid, SIGKILL);
        wait_child_event(signal_fd, 100ms);
    }
    for (const auto& node : nodes) remove_empty_cgroups(node);
    std::string restore_error =
        edit_hosts([self](std::string_view line) { return marked_keeper(line) != self; }, "");
    write_all(report_fd, restore_error.empty() ? std::string("stopped\n")
                                               : "stopped hosts error " + restore_error + "\n");
    std::_Exit(0);
}

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

// A "Key=Value" field of scontrol's output.
std::optional<std::string> scontrol_field(const std::string& text, const std::string& key) {
    std::string needle = key + "=";
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
        if (at > 0 && !std::isspace(static_cast<unsigned char>(text[at - 1]))) continue;
        auto begin = at + needle.size();
        auto end = text.find_first_of(" \n", begin);
        return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    }
    return std::nullopt;
}

// Two consecutive free ports (slurmd's Port=P-P+1 for n1 and n2).
int free_port_pair() {
    for (int attempt = 0; attempt < 100; ++attempt) {
        int port = free_port();
        if (port < 65535 && !port_accepts("127.0.0.1", port + 1)) {
            // Bindable too, not only unanswered: bind it for a moment.
            int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0) fail_syscall("socket");
            sockaddr_in address{};
            address.sin_family = AF_INET;
            address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            address.sin_port = htons(static_cast<std::uint16_t>(port + 1));
            bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
            ::close(fd);
            if (free) return port;
        }
    }
    throw std::runtime_error("no two consecutive free ports in 100 attempts");
}

}  // namespace

std::string find_program(const std::string& program) {
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
    path += ":/usr/sbin:/sbin:/usr/bin:/bin";
    std::istringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty()) continue;
        std::string candidate = dir + "/" + program;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
}

SlurmCluster::SlurmCluster(SlurmClusterOptions options) : m_options(std::move(options)) {
    // For a look at the daemons' logs after a run that passed.
    m_keep_dir = std::getenv("DDPRUN_TEST_KEEP_SLURM_DIR") != nullptr;
}

SlurmCluster::~SlurmCluster() {
    stop();
}

std::string SlurmCluster::check_prerequisites() const {
    if (::geteuid() != 0) return "not root: the daemons run as root and /etc/hosts must name n1/n2";
    for (const char* program : {"munged", "slurmctld", "slurmd", "srun", "sbatch", "salloc",
                                "scancel", "scontrol", "sinfo", "squeue"}) {
        if (find_program(program).empty())
            return fmt::format(
                "{} not found (install slurm-wlm and munge: scripts/install-deps.sh)", program);
    }
    if (::access(k_hosts, W_OK) != 0)
        return fmt::format("{} is not writable: {}", k_hosts, std::strerror(errno));
    return {};
}

std::string SlurmCluster::write_config() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddprun-slurm-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) fail_syscall("mkdtemp");
    m_dir = pattern;
    // slurmd and the jobs' tasks (root) read and write under it.
    ::chmod(m_dir.c_str(), 0755);
    for (const char* sub : {"munge", "state", "spool", "log"}) {
        std::filesystem::create_directories(m_dir + "/" + sub);
    }
    for (const auto& node : m_nodes) std::filesystem::create_directories(m_dir + "/spool/" + node);

    // munged insists on a key only its owner can read.
    std::string key;
    {
        std::ifstream random("/dev/urandom", std::ios::binary);
        key.resize(1024);
        random.read(key.data(), static_cast<std::streamsize>(key.size()));
        if (!random) return "cannot read /dev/urandom for the munge key";
    }
    write_text_file(m_dir + "/munge/munge.key", key, 0400);

    m_controller_port = free_port();
    m_first_node_port = free_port_pair();
    const std::string& d = m_dir;
    std::string conf = fmt::format(
        R"(# Written by the ddprun scheduler tests (tests/integration/slurm_cluster.cpp).
ClusterName=ddpruntest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={controller_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/state/slurmctld.pid
SlurmdPidFile={d}/spool/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/{proctrack}
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0
KillWait={kill_wait}
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={nodes} NodeHostname=localhost NodeAddr=127.0.0.1 Port={first_node_port}-{last_node_port} CPUs={cpus} State=UNKNOWN
PartitionName=ddprun Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
)",
        fmt::arg("controller_port", m_controller_port), fmt::arg("d", d),
        fmt::arg("proctrack", m_options.proctrack),
        fmt::arg("kill_wait", m_options.kill_wait_seconds), fmt::arg("nodes", "n[1-2]"),
        fmt::arg("first_node_port", m_first_node_port),
        fmt::arg("last_node_port", m_first_node_port + 1),
        fmt::arg("cpus", m_options.cpus_per_node));
    write_text_file(conf_path(), conf);
    // No SPANK plugins: the machine's /etc/slurm/plugstack.conf is not ours.
    write_text_file(m_dir + "/plugstack.conf", "");
    // Read by slurmd beside slurm.conf. No systemd runs here, and autodetect
    // picks cgroup/v1 or v2 by what /sys/fs/cgroup is.
    write_text_file(m_dir + "/cgroup.conf",
                    "CgroupPlugin=autodetect\nIgnoreSystemd=yes\nCgroupAutomount=no\n"
                    "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n");

    std::string munged = find_program("munged");
    std::string slurmctld = find_program("slurmctld");
    std::string slurmd = find_program("slurmd");
    m_specs = {
        {"munged",
         {munged, "-F", "-f", "--num-threads=2", "--socket=" + d + "/munge/munge.socket",
          "--key-file=" + d + "/munge/munge.key", "--log-file=" + d + "/log/munged.log",
          "--pid-file=" + d + "/munge/munged.pid", "--seed-file=" + d + "/munge/munged.seed"},
         d + "/log/munged.out"},
        {"slurmctld", {slurmctld, "-D", "-f", conf_path()}, d + "/log/slurmctld.out"},
    };
    for (const auto& node : m_nodes) {
        m_specs.push_back({"slurmd " + node,
                           {slurmd, "-D", "-N", node, "-f", conf_path()},
                           d + "/log/slurmd-" + node + ".out"});
    }
    return {};
}

std::string SlurmCluster::start_keeper() {
    int control[2];
    int report[2];
    if (::pipe2(control, O_CLOEXEC) != 0) fail_syscall("pipe2");
    if (::pipe2(report, O_CLOEXEC) != 0) fail_syscall("pipe2");
    std::vector<KeeperSpec> specs;
    for (const auto& spec : m_specs) specs.push_back({spec.name, spec.argv, spec.log});
    std::string keeper_log = m_dir + "/log/keeper.out";

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
        int log = ::open(keeper_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        // Only its two pipe ends: an inherited write end of a test's pipe would
        // keep that pipe open for as long as the cluster runs.
        int keep_control = ::fcntl(control[0], F_DUPFD, 3);
        int keep_report = ::fcntl(report[1], F_DUPFD, keep_control + 1);
        ::close_range(3, static_cast<unsigned>(keep_control - 1), 0);
        ::close_range(static_cast<unsigned>(keep_report + 1), ~0U, 0);
        keeper_main(keep_control, keep_report, specs, m_nodes);
    }
    int status = 0;
    while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(control[0]);
    ::close(report[1]);
    m_keeper_control = control[1];
    m_keeper_report = report[0];

    std::string hosts = read_report_line(m_keeper_report, 10s);
    if (hosts != "hosts ok") {
        return hosts.empty() ? "the cluster's keeper process did not answer"
                             : "cannot add the node names to /etc/hosts: " + hosts.substr(12);
    }
    return {};
}

std::optional<SlurmDaemon> SlurmCluster::start_daemon(std::size_t index, std::string& error) {
    write_all(m_keeper_control, fmt::format("start {}\n", index));
    std::string answer = read_report_line(m_keeper_report, 10s);
    if (!answer.starts_with("started ")) {
        error = fmt::format("cannot start {}: {}", m_specs[index].name,
                            answer.empty() ? "the keeper did not answer" : answer);
        return std::nullopt;
    }
    SlurmDaemon daemon{m_specs[index].name,
                       static_cast<pid_t>(std::strtol(answer.c_str() + 8, nullptr, 10)),
                       m_specs[index].log};
    m_daemons.push_back(daemon);
    return daemon;
}

std::string SlurmCluster::daemon_died() const {
    for (const auto& daemon : m_daemons) {
        if (!process_alive(daemon.pid)) {
            return fmt::format("{} (pid {}) exited during start-up; the end of {}:\n{}",
                               daemon.name, daemon.pid, daemon.log,
                               last_lines(read_text_file(daemon.log), 10));
        }
    }
    return {};
}

std::string SlurmCluster::wait_ready() {
    std::string error;
    // munged: its socket exists.
    if (!start_daemon(0, error)) return error;
    std::string socket = m_dir + "/munge/munge.socket";
    if (!wait_until([&] { return std::filesystem::exists(socket) || !daemon_died().empty(); },
                    k_socket_bound) ||
        !daemon_died().empty()) {
        std::string died = daemon_died();
        return died.empty() ? fmt::format("munged made no socket {} within {} ms", socket,
                                          k_socket_bound.count())
                            : died;
    }

    // slurmctld: answers `scontrol ping` as UP.
    if (!start_daemon(1, error)) return error;
    std::string last;
    bool up = wait_until(
        [&] {
            if (!daemon_died().empty()) return true;
            auto ping = client({"scontrol", "ping"}, 10s);
            last = ping.out + ping.err;
            return ping.exit_code == 0 && contains(ping.out, "is UP");
        },
        k_controller_bound);
    if (auto died = daemon_died(); !died.empty()) return died;
    if (!up)
        return fmt::format("slurmctld did not answer `scontrol ping` within {} ms: {}",
                           k_controller_bound.count(), last);

    // Both slurmd: registered and idle.
    for (std::size_t i = 2; i < m_specs.size(); ++i) {
        if (!start_daemon(i, error)) return error;
    }
    bool idle = wait_until(
        [&] {
            if (!daemon_died().empty()) return true;
            auto nodes = client({"sinfo", "-h", "-N", "-o", "%N %T"}, 10s);
            last = nodes.out + nodes.err;
            return nodes.exit_code == 0 && contains(nodes.out, m_nodes[0] + " idle") &&
                   contains(nodes.out, m_nodes[1] + " idle");
        },
        k_nodes_bound);
    if (auto died = daemon_died(); !died.empty()) return died;
    if (!idle)
        return fmt::format("the nodes were not idle within {} ms; sinfo says: {}",
                           k_nodes_bound.count(), last);

    // A trivial step on both nodes: a proctrack plugin that cannot work here
    // fails it (the daemons themselves come up regardless).
    auto smoke =
        client({"srun", "-N2", "--ntasks-per-node=1", "-t", "1", "true"}, k_smoke_step_bound);
    if (smoke.exit_code != 0 || smoke.timed_out)
        return fmt::format("a trivial step (srun -N2 true) failed with exit code {}{}: {}",
                           smoke.exit_code, smoke.timed_out ? " (timed out)" : "",
                           last_lines(smoke.err + smoke.out, 10));
    return {};
}

std::string SlurmCluster::start() {
    if (running()) return {};
    if (auto missing = check_prerequisites(); !missing.empty()) return missing;
    std::string error = write_config();
    if (error.empty()) error = start_keeper();
    if (error.empty()) error = wait_ready();
    if (!error.empty()) {
        m_keep_dir = true;
        // A daemon that died has said why already; otherwise every log may tell.
        bool daemon_said_why = contains(error, "exited during start-up");
        error += fmt::format("\n  (cluster files kept in {}){}", m_dir,
                             daemon_said_why ? "" : "\n" + describe_logs(5));
        stop();
    }
    return error;
}

void SlurmCluster::stop() {
    if (m_keeper_control < 0) {
        if (!m_dir.empty() && !m_keep_dir) {
            std::error_code ignored;
            std::filesystem::remove_all(m_dir, ignored);
            m_dir.clear();
        }
        return;
    }
    // Jobs first, so that their workers get Slurm's SIGTERM and grace instead
    // of the keeper's SIGKILL.
    if (!m_daemons.empty()) {
        client({"scancel", "--user=root"}, 10s);
        wait_until(
            [&] {
                auto queue = client({"squeue", "-h", "-o", "%i"}, 10s);
                return queue.exit_code != 0 || non_empty_lines(queue.out).empty();
            },
            k_jobs_gone_bound);
    }
    write_all(m_keeper_control, "stop\n");
    // The keeper answers "stopped" when it has cleaned up; its bounds add up to
    // well under this.
    std::string answer;
    auto deadline = Clock::now() + k_daemon_stop_bound * 5 + k_sweep_bound + 10s;
    while (!answer.starts_with("stopped") && Clock::now() < deadline) {
        answer = read_report_line(
            m_keeper_report, std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
        if (answer.empty()) break;
    }
    if (answer != "stopped") {
        std::fprintf(stderr, "slurm cluster: the keeper did not stop cleanly: %s\n",
                     answer.empty() ? "no answer" : answer.c_str());
        m_keep_dir = true;
    }
    ::close(m_keeper_control);
    ::close(m_keeper_report);
    m_keeper_control = m_keeper_report = -1;
    m_daemons.clear();
    if (m_keep_dir) {
        std::fprintf(stderr, "slurm cluster files kept in %s\n", m_dir.c_str());
    } else {
        std::error_code ignored;
        std::filesystem::remove_all(m_dir, ignored);
        m_dir.clear();
    }
}

std::vector<std::pair<std::string, std::string>> SlurmCluster::client_env() const {
    return {{"SLURM_CONF", conf_path()}};
}

RunResult SlurmCluster::client(const std::vector<std::string>& argv, Milliseconds timeout) const {
    RunOptions options;
    options.env = client_env();
    options.timeout = timeout;
    std::vector<std::string> command = argv;
    command.front() = find_program(argv.front());
    if (command.front().empty()) {
        RunResult missing;
        missing.exit_code = 127;
        missing.err = argv.front() + ": not found";
        return missing;
    }
    return run_command(command, options);
}

std::optional<std::string> SlurmCluster::job_state(const std::string& job_id) const {
    auto shown = client({"scontrol", "show", "job", job_id}, 10s);
    if (shown.exit_code != 0) return std::nullopt;
    return scontrol_field(shown.out, "JobState");
}

std::optional<std::string> SlurmCluster::job_exit_code(const std::string& job_id) const {
    auto shown = client({"scontrol", "show", "job", job_id}, 10s);
    if (shown.exit_code != 0) return std::nullopt;
    return scontrol_field(shown.out, "ExitCode");
}

std::optional<std::string> SlurmCluster::wait_job_end(const std::string& job_id,
                                                      Milliseconds timeout) const {
    static const std::set<std::string, std::less<>> k_unfinished = {
        "PENDING",  "RUNNING",  "CONFIGURING", "COMPLETING", "SUSPENDED",
        "REQUEUED", "RESIZING", "SIGNALING",   "STAGE_OUT",  "STOPPED"};
    std::optional<std::string> state;
    bool ended = wait_until(
        [&] {
            state = job_state(job_id);
            return state && !k_unfinished.contains(*state);
        },
        timeout);
    if (!ended) return std::nullopt;
    return state;
}

std::vector<std::string> SlurmCluster::job_ids_named(const std::string& name) const {
    auto queue = client({"squeue", "-h", "-n", name, "-o", "%i", "--sort=i"}, 10s);
    return non_empty_lines(queue.out);
}

std::string SlurmCluster::describe_logs(std::size_t lines_each) const {
    std::string text;
    if (m_dir.empty()) return text;
    std::error_code error;
    std::vector<std::string> logs;
    for (std::filesystem::directory_iterator it(m_dir + "/log", error), end; !error && it != end;
         it.increment(error)) {
        logs.push_back(it->path().string());
    }
    std::sort(logs.begin(), logs.end());
    for (const auto& log : logs) {
        std::string content = read_text_file(log);
        if (content.empty()) continue;
        text += fmt::format("  --- {} ---\n{}", log, last_lines(content, lines_each));
    }
    return text;
}

}  // namespace ddprun_it
