// A real etcd cluster for the tests (see etcd_server.hpp).
#include "support/etcd_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "ddprun/etcd_client.hpp"
#include "support/free_port.hpp"

namespace ddprun {

namespace {

using namespace std::chrono_literals;

constexpr const char* k_etcd = "/usr/bin/etcd";

std::string url(int port) {
    return fmt::format("http://127.0.0.1:{}", port);
}

// Reaps `pid` within `bound`; false if it still runs.
bool reap_within(pid_t pid, std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
        int status = 0;
        pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got == pid || (got < 0 && errno == ECHILD)) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(10ms);
    }
}

}  // namespace

EtcdCluster::EtcdCluster(int members) {
    if (::access(k_etcd, X_OK) != 0) {
        m_error = fmt::format("{} is not installed (Debian's etcd-server; scripts/install-deps.sh)",
                              k_etcd);
        return;
    }
    char dir[] = "/tmp/ddprun-etcd-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
        m_error = "mkdtemp failed";
        return;
    }
    m_dir = dir;
    std::string cluster;
    for (int i = 0; i < members; ++i) {
        Member member;
        member.name = fmt::format("m{}", i);
        member.client_port = free_test_port();
        member.peer_port = free_test_port();
        cluster += fmt::format("{}{}={}", i == 0 ? "" : ",", member.name, url(member.peer_port));
        m_members.push_back(member);
    }
    for (auto& member : m_members) {
        std::vector<std::string> args = {k_etcd,
                                         "--name=" + member.name,
                                         "--data-dir=" + m_dir + "/" + member.name,
                                         "--listen-client-urls=" + url(member.client_port),
                                         "--advertise-client-urls=" + url(member.client_port),
                                         "--listen-peer-urls=" + url(member.peer_port),
                                         "--initial-advertise-peer-urls=" + url(member.peer_port),
                                         "--initial-cluster=" + cluster,
                                         "--initial-cluster-state=new",
                                         "--initial-cluster-token=" + m_dir,
                                         "--logger=zap",
                                         "--log-level=error"};
        const std::string log = m_dir + "/" + member.name + ".log";
        std::vector<char*> argv;
        for (auto& arg : args) argv.push_back(arg.data());
        argv.push_back(nullptr);
        pid_t pid = ::fork();
        if (pid == 0) {
            // Dies with the test, whatever happens to it.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) {
                ::dup2(fd, 1);
                ::dup2(fd, 2);
            }
            ::execv(k_etcd, argv.data());
            ::_exit(127);
        }
        member.pid = pid;
    }
    // Ready once a read through every member succeeds.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (const auto& member : m_members) {
        EtcdClient client({{{"127.0.0.1", member.client_port}}, 1s});
        for (;;) {
            try {
                client.call("/v3/kv/range", {{"key", etcd_base64("ready")}});
                break;
            } catch (const StoreError& error) {
                if (std::chrono::steady_clock::now() >= deadline) {
                    m_error = fmt::format("etcd member {} did not answer within 30 s ({}); see {}",
                                          member.name, error.what(), m_dir);
                    return;
                }
                std::this_thread::sleep_for(50ms);
            }
        }
    }
}

EtcdCluster::~EtcdCluster() {
    stop();
    if (!m_dir.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(m_dir, ignored);
    }
}

std::string EtcdCluster::endpoints() const {
    std::string text;
    for (const auto& member : m_members)
        text += fmt::format("{}127.0.0.1:{}", text.empty() ? "" : ",", member.client_port);
    return text;
}

std::vector<int> EtcdCluster::client_ports() const {
    std::vector<int> ports;
    for (const auto& member : m_members) ports.push_back(member.client_port);
    return ports;
}

int EtcdCluster::leader() const {
    for (std::size_t i = 0; i < m_members.size(); ++i) {
        if (m_members[i].pid <= 0) continue;
        try {
            EtcdClient client({{{"127.0.0.1", m_members[i].client_port}}, 2s});
            auto status = client.call("/v3/maintenance/status", nlohmann::json::object());
            if (status.contains("leader") && status.contains("header") &&
                status["header"].contains("member_id") &&
                status["leader"] == status["header"]["member_id"])
                return static_cast<int>(i);
        } catch (const StoreError&) {
        }
    }
    return -1;
}

std::string EtcdCluster::endpoints_from(int first) const {
    std::string text =
        fmt::format("127.0.0.1:{}", m_members.at(static_cast<std::size_t>(first)).client_port);
    for (std::size_t i = 0; i < m_members.size(); ++i)
        if (static_cast<int>(i) != first)
            text += fmt::format(",127.0.0.1:{}", m_members[i].client_port);
    return text;
}

void EtcdCluster::kill(int index) {
    Member& member = m_members.at(static_cast<std::size_t>(index));
    if (member.pid <= 0) return;
    ::kill(member.pid, SIGKILL);
    reap_within(member.pid, 5s);
    member.pid = -1;
}

void EtcdCluster::stop() {
    for (auto& member : m_members)
        if (member.pid > 0) ::kill(member.pid, SIGTERM);
    for (auto& member : m_members) {
        if (member.pid <= 0) continue;
        if (!reap_within(member.pid, 5s)) {
            ::kill(member.pid, SIGKILL);
            reap_within(member.pid, 5s);
        }
        member.pid = -1;
    }
}

}  // namespace ddprun
