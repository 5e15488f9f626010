// The test sshd (tests/support/sshd_server.hpp) and the facts about OpenSSH
// that --hosts builds on, checked against a real sshd: every address is a
// login of its own, a remote command's environment is sshd's, the remote stdin
// ends when the client's stdin closes and when the client is SIGKILLed (the
// agents' lifeline), and hundreds of connections at once all get in (the
// launcher's preflight). Each test skips with the server's reason where it
// cannot start (not root, OpenSSH not installed).

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "support/sshd_server.hpp"

namespace ddprun_it {
namespace {

// How long one ssh login and command may take on a loaded machine before the
// test calls it a hang.
constexpr Milliseconds k_ssh_guard = 30s;

// An ssh client the test starts and reaps by pid: stdin a pipe the test holds
// (or /dev/null), stdout and stderr in files of the test's dir.
class SshClient {
  public:
    SshClient(const std::vector<std::string>& args, const std::string& output, bool stdin_pipe)
        : m_out_path(output + ".out"), m_err_path(output + ".err") {
        std::vector<std::string> copy = args;
        std::vector<char*> argv;
        for (auto& arg : copy) argv.push_back(arg.data());
        argv.push_back(nullptr);
        int pipe_fds[2] = {-1, -1};
        // Close-on-exec: a write end that leaked into ssh would keep its stdin open.
        if (stdin_pipe && ::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
        m_pid = ::fork();
        if (m_pid < 0) throw std::runtime_error("fork");
        if (m_pid == 0) {
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            int in = stdin_pipe ? pipe_fds[0] : ::open("/dev/null", O_RDONLY);
            int out = ::open(m_out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            int err = ::open(m_err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (in < 0 || out < 0 || err < 0) ::_exit(126);
            ::dup2(in, 0);
            ::dup2(out, 1);
            ::dup2(err, 2);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        if (stdin_pipe) {
            ::close(pipe_fds[0]);
            m_stdin = pipe_fds[1];
        }
    }
    ~SshClient() {
        close_stdin();
        if (m_reaped) return;
        ::kill(m_pid, SIGKILL);
        ::waitpid(m_pid, nullptr, 0);
    }
    SshClient(const SshClient&) = delete;
    SshClient& operator=(const SshClient&) = delete;

    pid_t pid() const { return m_pid; }
    bool write_stdin(const std::string& text) {
        return ::write(m_stdin, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    }
    void close_stdin() {
        if (m_stdin >= 0) ::close(m_stdin);
        m_stdin = -1;
    }
    // Reaps it if it has exited; true once it is reaped.
    bool reap_if_exited() {
        if (m_reaped) return true;
        int status = 0;
        if (::waitpid(m_pid, &status, WNOHANG) != m_pid) return false;
        m_reaped = true;
        m_exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
    }
    // Its exit code (128+N for signal N) once it exits within `timeout`.
    std::optional<int> wait_exit(Milliseconds timeout) {
        if (!wait_until([this] { return reap_if_exited(); }, timeout)) return std::nullopt;
        return m_exit_code;
    }
    std::optional<int> exit_code() const {
        return m_reaped ? std::optional<int>(m_exit_code) : std::nullopt;
    }
    std::string out() const { return read_text_file(m_out_path); }
    std::string err() const { return read_text_file(m_err_path); }

  private:
    pid_t m_pid = -1;
    int m_stdin = -1;
    bool m_reaped = false;
    int m_exit_code = -1;
    std::string m_out_path;
    std::string m_err_path;
};

class SshdTest : public IntegrationTest {
  protected:
    void SetUp() override {
        IntegrationTest::SetUp();
        m_server = std::make_unique<ddprun::SshServer>();
        if (!m_server->ready()) GTEST_SKIP() << m_server->error();
        add_service(m_server->pid());
    }

    // Every session ends through its client; only then is the listener stopped,
    // so that no session is left to be reparented to the test.
    void TearDown() override {
        if (m_server && m_server->ready()) {
            EXPECT_TRUE(
                wait_until([this] { return m_server->connection_pids().empty(); }, k_ssh_guard))
                << "sessions still open: " << m_server->connection_pids().size() << "\n"
                << m_server->log();
        }
        m_server.reset();
        IntegrationTest::TearDown();
    }

    std::unique_ptr<SshClient> ssh(const std::string& address, const std::string& command,
                                   const std::string& name, bool stdin_pipe = false) {
        return std::make_unique<SshClient>(m_server->ssh_argv(address, command), path(name),
                                           stdin_pipe);
    }

    static std::string report(const SshClient& client) {
        return fmt::format("exit {}\nstdout:\n{}\nstderr:\n{}",
                           client.exit_code() ? std::to_string(*client.exit_code()) : "none",
                           client.out(), client.err());
    }

    std::unique_ptr<ddprun::SshServer> m_server;
};

TEST_F(SshdTest, EachAddressIsALoginOfItsOwn) {
    EXPECT_EQ(m_server->ssh_command(), "/usr/bin/ssh -F " + m_server->ssh_config());
    for (const auto& address : m_server->addresses()) {
        auto client = ssh(address, "echo $SSH_CONNECTION", "connection." + address);
        ASSERT_EQ(client->wait_exit(k_ssh_guard), 0) << address << "\n"
                                                     << report(*client) << m_server->log();
        // "client-addr client-port server-addr server-port"
        std::istringstream fields(client->out());
        std::string client_address, client_port, server_address, server_port;
        fields >> client_address >> client_port >> server_address >> server_port;
        EXPECT_EQ(server_address, address) << report(*client);
        EXPECT_EQ(server_port, std::to_string(m_server->port())) << report(*client);
        EXPECT_EQ(client->err(), "") << report(*client);
    }
}

TEST_F(SshdTest, TheRemoteEnvironmentIsSshdsOwn) {
    // A variable of the client's environment does not reach the remote command.
    std::vector<std::string> args = {"/usr/bin/env", "DDPRUN_SSHD_TEST_PROBE=local"};
    for (auto& arg : m_server->ssh_argv(m_server->addresses().front(), "env; pwd"))
        args.push_back(arg);
    SshClient client(args, path("env"), false);
    ASSERT_EQ(client.wait_exit(k_ssh_guard), 0) << report(client);
    const std::string out = client.out();
    EXPECT_TRUE(contains(out, "\nHOME=/root\n") || out.starts_with("HOME=/root\n")) << out;
    EXPECT_TRUE(contains(out, "USER=root\n")) << out;
    EXPECT_TRUE(contains(out, "SHLVL=")) << out;
    EXPECT_TRUE(contains(out, "\n/root\n")) << "the command runs in HOME\n" << out;
    EXPECT_FALSE(contains(out, "DDPRUN_SSHD_TEST_PROBE")) << out;
    // sshd's PATH for root, not one a ~/.bashrc made.
    auto env = split_lines(out);
    auto path_line = std::find_if(
        env.begin(), env.end(), [](const std::string& line) { return line.starts_with("PATH="); });
    ASSERT_NE(path_line, env.end()) << out;
    EXPECT_TRUE(contains(*path_line + ":", ":/usr/bin:")) << *path_line;
    EXPECT_FALSE(contains(*path_line, "/root/")) << *path_line;
    EXPECT_EQ(client.err(), "") << report(client);
}

TEST_F(SshdTest, ClosingTheClientsStdinEndsTheRemoteStdin) {
    auto client = ssh(m_server->addresses().back(), "cat; echo end of file", "cat", true);
    ASSERT_TRUE(client->write_stdin("through ssh\n"));
    client->close_stdin();
    ASSERT_EQ(client->wait_exit(k_ssh_guard), 0) << report(*client) << m_server->log();
    EXPECT_EQ(client->out(), "through ssh\nend of file\n") << report(*client);
}

// The lifeline of --hosts: an agent's stdin is its ssh session, and it ends
// when the launcher's ssh client dies, however it dies.
TEST_F(SshdTest, KillingTheClientEndsTheRemoteStdin) {
    const std::string ended = path("remote-stdin-ended");
    auto client =
        ssh(m_server->addresses().front(),
            fmt::format("echo started; cat >/dev/null; touch '{}'", ended), "lifeline", true);
    ASSERT_TRUE(wait_until([&] { return contains(client->out(), "started\n"); }, k_ssh_guard))
        << report(*client) << m_server->log();
    EXPECT_FALSE(std::filesystem::exists(ended)) << "the remote stdin ended on its own";
    // The test still holds the write end of the client's stdin: only the kill ends it.
    ::kill(client->pid(), SIGKILL);
    ASSERT_EQ(client->wait_exit(k_ssh_guard), 128 + SIGKILL);
    EXPECT_TRUE(wait_for_file(ended, k_ssh_guard)) << "the remote cat never saw end of file\n"
                                                   << m_server->log();
}

// The launcher's preflight reaches every host at once.
TEST_F(SshdTest, TwoHundredConnectionsAtOnceAllSucceed) {
    constexpr int k_connections = 200;
    const auto& addresses = m_server->addresses();
    std::vector<std::unique_ptr<SshClient>> clients;
    for (int i = 0; i < k_connections; ++i) {
        const std::string& address = addresses[static_cast<std::size_t>(i) % addresses.size()];
        clients.push_back(ssh(address, "true", fmt::format("many.{}", i)));
    }
    // Generous: 200 key exchanges on a busy two-core machine.
    bool all_exited = wait_until(
        [&] {
            bool all = true;
            for (auto& client : clients) all = client->reap_if_exited() && all;
            return all;
        },
        90s);
    int failed = 0;
    std::string first_failure;
    for (auto& client : clients) {
        if (client->exit_code() == 0) continue;
        if (failed++ == 0) first_failure = report(*client);
    }
    ASSERT_TRUE(all_exited) << "not every ssh client exited within 90 s";
    EXPECT_EQ(failed, 0) << "of " << k_connections << "; the first:\n" << first_failure;
}

// Stopping the listener leaves a live session alone (sshd_server.hpp): the
// session still answers, and ends through its client.
TEST_F(SshdTest, AStoppedListenerLeavesLiveSessionsAlone) {
    auto client = ssh(m_server->addresses().front(), "echo started; cat", "outlive", true);
    ASSERT_TRUE(wait_until([&] { return contains(client->out(), "started\n"); }, k_ssh_guard))
        << report(*client) << m_server->log();
    auto sessions = m_server->connection_pids();
    ASSERT_EQ(sessions.size(), 1u);
    const int port = m_server->port();
    m_server->stop();
    EXPECT_EQ(m_server->pid(), -1);
    for (const auto& address : m_server->addresses())
        EXPECT_FALSE(port_accepts(address, port)) << address;
    EXPECT_TRUE(process_alive(sessions.front()));
    ASSERT_TRUE(client->write_stdin("still here\n"));
    client->close_stdin();
    ASSERT_EQ(client->wait_exit(k_ssh_guard), 0) << report(*client);
    EXPECT_EQ(client->out(), "started\nstill here\n");
    // The session's processes were reparented to the test (a subreaper): gone
    // and reaped here, so none is a leftover.
    auto left = wait_job_gone(k_ssh_guard);
    EXPECT_TRUE(left.empty()) << describe(left);
}

TEST_F(SshdTest, AnAddressSshdCannotBindIsAOneLineError) {
    // 192.0.2.1 (TEST-NET-1) is on no interface here.
    ddprun::SshServer server({"192.0.2.1"});
    EXPECT_FALSE(server.ready());
    EXPECT_EQ(server.pid(), -1);
    EXPECT_TRUE(contains(server.error(), "192.0.2.1")) << server.error();
    EXPECT_FALSE(contains(server.error(), "\n")) << server.error();
}

}  // namespace
}  // namespace ddprun_it
