// A real sshd for the tests of --hosts (see sshd_server.hpp).
#include "support/sshd_server.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "support/free_port.hpp"
#include "support/service_process.hpp"

namespace ddprun {

namespace {

using namespace std::chrono_literals;

// Absolute: sshd re-executes itself for every connection and refuses to start
// from a relative path.
constexpr const char* k_sshd = "/usr/sbin/sshd";
constexpr const char* k_ssh = "/usr/bin/ssh";
constexpr const char* k_ssh_keygen = "/usr/bin/ssh-keygen";
// Where sshd's privilege-separated child chroots; Debian's package makes it at boot.
constexpr const char* k_privsep_dir = "/run/sshd";
constexpr auto k_start_bound = 20s;
constexpr int k_start_attempts = 3;

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string last_line(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    std::string last;
    while (std::getline(lines, line))
        if (!line.empty()) last = line;
    return last;
}

// What the log says went wrong: the line of a failed bind, which names the
// address and the port (sshd's last words only say that none could be bound),
// else its last line.
std::string failure(const std::string& text) {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line))
        if (line.starts_with("Bind to port ")) return line;
    return last_line(text);
}

bool accepts(const std::string& address, int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_port = htons(static_cast<std::uint16_t>(port));
    bool ok = ::inet_pton(AF_INET, address.c_str(), &peer.sin_addr) == 1 &&
              ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0;
    ::close(fd);
    return ok;
}

}  // namespace

SshServer::SshServer(std::vector<std::string> addresses) : m_addresses(std::move(addresses)) {
    if (::geteuid() != 0) {
        m_error = fmt::format("sshd needs root here (it logs in as root); running as uid {}",
                              ::geteuid());
        return;
    }
    for (const char* program : {k_sshd, k_ssh, k_ssh_keygen}) {
        if (::access(program, X_OK) != 0) {
            m_error = fmt::format(
                "{} is not installed (Debian's openssh-server and openssh-client; "
                "scripts/install-deps.sh)",
                program);
            return;
        }
    }
    if (::mkdir(k_privsep_dir, 0755) != 0 && errno != EEXIST) {
        m_error = fmt::format("mkdir {}: {}", k_privsep_dir, std::strerror(errno));
        return;
    }
    char dir[] = "/tmp/ddprun-sshd-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
        m_error = fmt::format("mkdtemp {}: {}", dir, std::strerror(errno));
        return;
    }
    m_dir = dir;
    for (const char* key : {"host_key", "client_key"}) {
        const std::string line = fmt::format(
            "{} -q -N '' -t ed25519 -C 'ddprun test {}' -f '{}/{}' </dev/null >>'{}/keygen.log' "
            "2>&1",
            k_ssh_keygen, key, m_dir, key, m_dir);
        if (std::system(line.c_str()) != 0) {
            m_error =
                fmt::format("ssh-keygen failed: {}", last_line(read_file(m_dir + "/keygen.log")));
            return;
        }
    }
    std::filesystem::copy_file(m_dir + "/client_key.pub", m_dir + "/authorized_keys");
    // Another test may hold the free port on one of the other addresses.
    for (int attempt = 1; attempt <= k_start_attempts; ++attempt) {
        m_error.clear();
        if (start() != Start::port_taken) return;
    }
}

// The files that name the port: sshd's config, the client's and its known hosts.
bool SshServer::write_files() {
    const std::string host_key = read_file(m_dir + "/host_key.pub");
    // "ssh-ed25519 BASE64 comment": known_hosts wants the first two.
    std::istringstream fields(host_key);
    std::string type;
    std::string key;
    if (!(fields >> type >> key)) {
        m_error = fmt::format("{}/host_key.pub is not a public key", m_dir);
        return false;
    }
    std::string listen;
    std::string known_hosts;
    for (const auto& address : m_addresses) {
        listen += fmt::format("ListenAddress {}:{}\n", address, m_port);
        known_hosts += fmt::format("[{}]:{} {} {}\n", address, m_port, type, key);
    }
    // MaxStartups: a launcher connects to every host at once, and sshd's default
    // (10:30:100) drops unauthenticated connections beyond the tenth at random.
    write_file(m_dir + "/sshd_config",
               fmt::format(R"(# ddprun's test sshd (tests/support/sshd_server.hpp)
{}HostKey {dir}/host_key
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
X11Forwarding no
AllowAgentForwarding no
AllowTcpForwarding no
PrintMotd no
PrintLastLog no
MaxStartups 1000
MaxSessions 1000
SetEnv SHLVL=1
LogLevel VERBOSE
)",
                           listen, fmt::arg("dir", m_dir)));
    write_file(m_dir + "/known_hosts", known_hosts);
    // -F: neither /etc/ssh/ssh_config nor ~/.ssh/config applies. The classic
    // key exchange: sntrup761 (9.x's default) costs each side about 0.1 s of CPU
    // per connection, which hundreds of connections on two cores feel.
    write_file(m_dir + "/ssh_config",
               fmt::format(R"(# ddprun's test sshd's client (tests/support/sshd_server.hpp)
Host *
  Port {port}
  User root
  IdentityFile {dir}/client_key
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile {dir}/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  UpdateHostKeys no
  CheckHostIP no
  BatchMode yes
  ConnectTimeout 30
  LogLevel ERROR
  ControlMaster no
  ControlPath none
  ForwardAgent no
  ForwardX11 no
  KexAlgorithms curve25519-sha256
)",
                           fmt::arg("port", m_port), fmt::arg("dir", m_dir)));
    return true;
}

SshServer::Start SshServer::start() {
    m_port = free_test_port();
    if (!write_files()) return Start::failed;
    const std::string log_path = m_dir + "/sshd.log";
    // A fresh log: the previous attempt's "Address already in use" is not this one's.
    std::filesystem::remove(log_path);
    std::vector<std::string> args = {k_sshd, "-D",    "-e", "-f", m_dir + "/sshd_config",
                                     "-E",   log_path};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
        m_error = fmt::format("fork: {}", std::strerror(errno));
        return Start::failed;
    }
    if (pid == 0) {
        // Dies with the test, whatever happens to it.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        // sshd waits for SIGTERM and SIGCHLD with the mask it was started with.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        int null = ::open("/dev/null", O_RDONLY);
        int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (null >= 0) ::dup2(null, 0);
        if (log >= 0) {
            ::dup2(log, 1);
            ::dup2(log, 2);
        }
        ::execv(k_sshd, argv.data());
        ::_exit(127);
    }
    m_pid = pid;
    // Ready once sshd says it listens on every address and each one accepts.
    const auto deadline = std::chrono::steady_clock::now() + k_start_bound;
    for (;;) {
        const std::string text = log();
        if (text.find("Address already in use") != std::string::npos) {
            stop();
            m_error = fmt::format("port {} is taken: {}", m_port, failure(text));
            return Start::port_taken;
        }
        int status = 0;
        if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
            m_pid = -1;
            m_error = fmt::format("{} exited before listening: {}", k_sshd, failure(text));
            return Start::failed;
        }
        bool listening = true;
        for (const auto& address : m_addresses) {
            const std::string line =
                fmt::format("Server listening on {} port {}.", address, m_port);
            if (text.find(line) == std::string::npos || !accepts(address, m_port)) {
                listening = false;
                break;
            }
        }
        if (listening) return Start::ready;
        if (std::chrono::steady_clock::now() >= deadline) {
            stop();
            m_error = fmt::format("sshd did not listen on port {} within {} s: {}", m_port,
                                  std::chrono::seconds(k_start_bound).count(), last_line(text));
            return Start::failed;
        }
        std::this_thread::sleep_for(10ms);
    }
}

SshServer::~SshServer() {
    stop();
    if (!m_dir.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(m_dir, ignored);
    }
}

std::string SshServer::ssh_command() const {
    return fmt::format("{} -F {}", k_ssh, ssh_config());
}

std::vector<std::string> SshServer::ssh_argv(const std::string& address,
                                             const std::string& command) const {
    return {k_ssh, "-F", ssh_config(), address, command};
}

std::string SshServer::log() const {
    return m_dir.empty() ? std::string() : read_file(m_dir + "/sshd.log");
}

std::vector<pid_t> SshServer::connection_pids() const {
    std::vector<pid_t> children;
    if (m_pid <= 0) return children;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return children;
    while (const dirent* entry = ::readdir(proc)) {
        char* end = nullptr;
        long pid = std::strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
        auto close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(stat.substr(close + 1));
        char state = '?';
        long ppid = 0;
        if (!(fields >> state >> ppid)) continue;
        if (ppid == m_pid && state != 'Z' && state != 'X')
            children.push_back(static_cast<pid_t>(pid));
    }
    ::closedir(proc);
    return children;
}

void SshServer::stop() {
    if (m_pid <= 0) return;
    stop_process(m_pid, 5s);
    m_pid = -1;
}

}  // namespace ddprun
