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
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "ddprun/store/etcd_client.hpp"
#include "support/free_port.hpp"
#include "support/service_process.hpp"

namespace ddprun {

namespace {

using namespace std::chrono_literals;

constexpr const char* k_etcd = "/usr/bin/etcd";

std::string url(int port, bool tls = false) {
    return fmt::format("{}://127.0.0.1:{}", tls ? "https" : "http", port);
}

constexpr const char* k_root_password = "root battery";

}  // namespace

EtcdCluster::EtcdCluster(int members, EtcdSecurity security, std::vector<std::string> flags)
    : m_security(security) {
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
    if (m_security.tls && !make_certificates()) return;
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
        const std::string client_url = url(member.client_port, m_security.tls);
        std::vector<std::string> args = {k_etcd,
                                         "--name=" + member.name,
                                         "--data-dir=" + m_dir + "/" + member.name,
                                         "--listen-client-urls=" + client_url,
                                         "--advertise-client-urls=" + client_url,
                                         "--listen-peer-urls=" + url(member.peer_port),
                                         "--initial-advertise-peer-urls=" + url(member.peer_port),
                                         "--initial-cluster=" + cluster,
                                         "--initial-cluster-state=new",
                                         "--initial-cluster-token=" + m_dir,
                                         "--logger=zap",
                                         "--log-level=error"};
        if (m_security.tls)
            args.insert(args.end(), {"--cert-file=" + m_dir + "/server.pem",
                                     "--key-file=" + m_dir + "/server.key"});
        if (m_security.client_cert_auth)
            args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file=" + ca_cert()});
        // The cheapest bcrypt: each authentication costs etcd a hash of the password.
        if (m_security.auth) args.push_back("--bcrypt-cost=4");
        if (m_security.auth_token_ttl > 0)
            args.push_back(fmt::format("--auth-token-ttl={}", m_security.auth_token_ttl));
        args.insert(args.end(), flags.begin(), flags.end());
        member.args = std::move(args);
        launch(member);
    }
    // Ready once a read through every member succeeds.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    for (std::size_t index = 0; index < m_members.size(); ++index) {
        const Member& member = m_members[index];
        EtcdClient client(client_options(static_cast<int>(index), 1s));
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
    if (m_security.auth) enable_authentication();
}

// A CA, etcd's certificate for 127.0.0.1 signed by it, a client certificate
// signed by it, and a second CA with the same client key signed by it too;
// and one with a CN, as etcd's gateway refuses with authentication on. P-256
// keys, quick to make.
bool EtcdCluster::make_certificates() {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
        m_error = "the openssl command is not installed (Debian's openssl)";
        return false;
    }
    // clientAuth too: etcd's gateway reaches etcd's own gRPC server with this certificate.
    write_file(m_dir + "/server.ext",
               "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
    write_file(m_dir + "/client.ext", "extendedKeyUsage=clientAuth\n");
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    // The client certificate has no CN: etcd's gateway refuses one that has a CN
    // while authentication is on (the CN would name the user over gRPC).
    const std::vector<std::string> commands = {
        fmt::format("openssl req -x509 {} -keyout ca.key -out ca.pem -days 2 "
                    "-subj '/CN=ddprun test CA'",
                    key),
        fmt::format("openssl req -x509 {} -keyout other-ca.key -out other-ca.pem -days 2 "
                    "-subj '/CN=ddprun other CA'",
                    key),
        fmt::format("openssl req {} -keyout server.key -out server.csr -subj '/CN=etcd'", key),
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile server.ext",
        fmt::format("openssl req {} -keyout client.key -out client.csr -subj '/O=ddprun tests'",
                    key),
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 2 -extfile client.ext",
        "openssl x509 -req -in client.csr -CA other-ca.pem -CAkey other-ca.key "
        "-CAcreateserial -out other-client.pem -days 2 -extfile client.ext",
        "openssl req -new -key client.key -out named-client.csr -subj '/CN=trainer'",
        "openssl x509 -req -in named-client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out named-client.pem -days 2 -extfile client.ext",
    };
    for (const auto& command : commands) {
        const std::string line =
            fmt::format("cd '{}' && {} >>openssl.log 2>&1 </dev/null", m_dir, command);
        if (std::system(line.c_str()) != 0) {
            m_error = fmt::format("'{}' failed; see {}/openssl.log", command, m_dir);
            return false;
        }
    }
    return true;
}

// Users root (etcd wants one before authentication goes on) and k_user, whose
// role may read and write the keys under /ddprun/, then authentication on.
bool EtcdCluster::enable_authentication() {
    try {
        EtcdClient root(client_options(0, 10s));
        const nlohmann::json steps[][2] = {
            {"/v3/auth/user/add", {{"name", "root"}, {"password", k_root_password}}},
            {"/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}}},
            {"/v3/auth/role/add", {{"name", "ddprun"}}},
            {"/v3/auth/role/grant",
             {{"name", "ddprun"},
              {"perm",
               {{"permType", "READWRITE"},
                {"key", etcd_base64("/ddprun/")},
                {"range_end", etcd_base64("/ddprun0")}}}}},
            {"/v3/auth/user/add", {{"name", k_user}, {"password", k_password}}},
            {"/v3/auth/user/grant", {{"user", k_user}, {"role", "ddprun"}}},
            {"/v3/auth/enable", nlohmann::json::object()},
        };
        for (const auto& [path, body] : steps) root.call(path.get<std::string>(), body);
    } catch (const StoreError& error) {
        m_error = fmt::format("could not turn etcd's authentication on: {}", error.what());
        return false;
    }
    write_file(password_file(), std::string(k_password) + "\n");
    m_auth_enabled = true;
    return true;
}

EtcdOptions EtcdCluster::client_options(int index, std::chrono::milliseconds timeout) const {
    EtcdOptions options;
    options.endpoints = {{"127.0.0.1", m_members.at(static_cast<std::size_t>(index)).client_port}};
    options.timeout = timeout;
    if (m_security.tls) options.tls = EtcdTls{ca_cert(), client_cert(), client_key()};
    if (m_auth_enabled) options.credentials = EtcdCredentials{"root", k_root_password};
    return options;
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
            EtcdClient client(client_options(static_cast<int>(i), 2s));
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

void EtcdCluster::launch(Member& member) {
    const std::string log = m_dir + "/" + member.name + ".log";
    std::vector<char*> argv;
    for (auto& arg : member.args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        // Dies with the test, whatever happens to it.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        ::execv(k_etcd, argv.data());
        ::_exit(127);
    }
    member.pid = pid;
}

bool EtcdCluster::restart(int index) {
    Member& member = m_members.at(static_cast<std::size_t>(index));
    if (member.pid > 0) return false;
    launch(member);
    EtcdClient client(client_options(index, 1s));
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
        try {
            client.call("/v3/kv/range", {{"key", etcd_base64("ready")}});
            return true;
        } catch (const StoreError&) {
            std::this_thread::sleep_for(50ms);
        }
    }
    return false;
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
