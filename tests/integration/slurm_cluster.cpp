// The Slurm cluster of the scheduler tests: its configuration, the order in
// which the keeper starts the daemons, the bounded readiness checks, and the
// clients the tests use (see slurm_cluster.hpp).

#include "slurm_cluster.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace ddprun_it {

namespace {

// How long each stage of a start may take on a loaded 2-core machine before
// the cluster counts as not coming up.
constexpr Milliseconds k_socket_bound = 10s;
constexpr Milliseconds k_controller_bound = 30s;
constexpr Milliseconds k_nodes_bound = 30s;
constexpr Milliseconds k_smoke_step_bound = 30s;
// How long stop() waits for cancelled jobs to leave the queue.
constexpr Milliseconds k_jobs_gone_bound = 30s;

[[noreturn]] void fail_syscall(const char* call) {
    throw std::runtime_error(fmt::format("{} failed: {}", call, std::strerror(errno)));
}

std::string last_lines(const std::string& text, std::size_t count) {
    auto lines = split_lines(text);
    std::size_t from = lines.size() > count ? lines.size() - count : 0;
    std::string out;
    for (std::size_t i = from; i < lines.size(); ++i) out += "    " + lines[i] + "\n";
    return out;
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
    if (::access("/etc/hosts", W_OK) != 0)
        return fmt::format("/etc/hosts is not writable: {}", std::strerror(errno));
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
    // Job ids from a random start: ports that ddprun derives from SLURM_JOB_ID
    // then differ from those of another cluster of this harness running at the
    // same time (another developer's test run), which also starts from its own.
    std::uniform_int_distribution<int> ids(1000, 1'000'000);
    std::random_device random;
    int first_job_id = ids(random);
    m_first_node_port = free_port_pair();
    const std::string& d = m_dir;
    std::string conf = fmt::format(
        R"(# Written by the ddprun scheduler tests (tests/integration/slurm_cluster.cpp).
ClusterName=ddpruntest
FirstJobId={first_job_id}
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
        fmt::arg("first_job_id", first_job_id), fmt::arg("controller_port", m_controller_port),
        fmt::arg("d", d), fmt::arg("proctrack", m_options.proctrack),
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

std::optional<SlurmDaemon> SlurmCluster::start_daemon(std::size_t index, std::string& error) {
    auto pid = m_keeper.start_daemon(index);
    if (!pid) {
        error = fmt::format("cannot start {}: {}", m_specs[index].name, pid.error());
        return std::nullopt;
    }
    SlurmDaemon daemon{m_specs[index].name, *pid, m_specs[index].log};
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

std::string SlurmCluster::failure_report() {
    m_keep_dir = true;
    std::string gone;
    for (const auto& daemon : m_daemons) {
        if (!process_alive(daemon.pid))
            gone += fmt::format(" {} (pid {})", daemon.name, daemon.pid);
    }
    return fmt::format("slurm daemons gone:{}\nsinfo: {}cluster files kept in {}\n{}",
                       gone.empty() ? " none" : gone,
                       client({"sinfo", "-h", "-N", "-o", "%N %T"}, 10s).out, m_dir,
                       describe_logs(20));
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
    if (error.empty())
        error = m_keeper.start(m_specs, m_nodes, "SLURM_CONF=" + conf_path(),
                               m_dir + "/log/keeper.out");
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
    if (m_keeper.running()) {
        // Jobs first, so that their workers get Slurm's SIGTERM and grace
        // instead of the keeper's SIGKILL.
        if (!m_daemons.empty()) {
            client({"scancel", "--user=root"}, 10s);
            wait_until(
                [&] {
                    auto queue = client({"squeue", "-h", "-o", "%i"}, 10s);
                    return queue.exit_code != 0 || non_empty_lines(queue.out).empty();
                },
                k_jobs_gone_bound);
        }
        if (auto error = m_keeper.stop(); !error.empty()) {
            std::fprintf(stderr, "slurm cluster: the keeper did not stop cleanly: %s\n",
                         error.c_str());
            m_keep_dir = true;
        }
        m_daemons.clear();
    }
    if (m_dir.empty()) return;
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
    options.dies_with_test = true;
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
