// A real OpenSSH server for the tests of --hosts: one sshd, started
// by the test from a temp dir of its own (throwaway host and client keys, its
// own sshd_config, its log), listening on one free port on several loopback
// addresses, so that "hosts" 127.0.0.2, 127.0.0.3, ... are real ssh logins to
// this machine. It is stopped by pid (SIGTERM, then SIGKILL), never by name.
// The client side is an ssh_config in the same dir: ssh_command() is what a
// test passes as --ssh-command.
//
// Where it cannot run (not root, OpenSSH not installed, sshd exits), ready() is
// false and error() says why in one line, so the test can skip with it.
//
// What a remote command gets. It runs as root, through root's login shell
// (`$SHELL -c COMMAND`), in /root. With UsePAM no its environment is sshd's own:
// USER, LOGNAME, HOME=/root, SHELL, MAIL, PATH=sshd's compiled-in default for
// root (Debian: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin),
// SSH_CLIENT and SSH_CONNECTION ("client-addr client-port server-addr
// server-port": the server address is the host the client asked for, the
// client address is 127.0.0.1 whichever address it reached), and SHLVL (sshd
// sets 1, bash makes it 2; see below). Nothing of the client's environment
// reaches it (no AcceptEnv): what a launcher wants there it must put on the
// command line. No terminal.
//
// bash (Debian's) reads ~/.bashrc for a command that sshd runs, unless SHLVL
// says it is not the first shell; a developer's ~/.bashrc (pyenv, cargo) makes
// every login slow (pyenv: 0.2 s) and may print to its stderr. SetEnv SHLVL=1
// keeps it out, so what a remote command sees is what this comment says, not
// the machine's dotfiles.
//
// Sessions. sshd forks a process per connection (in a session of its own),
// which runs the command. Stopping the listener does not end the sessions that
// are live: a test ends those through their ssh clients (stdin closed, or the
// client killed) and waits until connection_pids() is empty. The destructor
// stops the listener by pid regardless; a session left then is reparented
// (to the test, when it is a subreaper) and is the test's leftover.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun {

class SshServer {
  public:
    // Starts sshd listening on ADDRESS:port() for each address and waits
    // (bounded) until every address accepts TCP connections.
    explicit SshServer(std::vector<std::string> addresses = {"127.0.0.2", "127.0.0.3",
                                                             "127.0.0.4"});
    ~SshServer();
    SshServer(const SshServer&) = delete;
    SshServer& operator=(const SshServer&) = delete;

    bool ready() const { return m_error.empty(); }
    const std::string& error() const { return m_error; }

    // "/usr/bin/ssh -F DIR/ssh_config": what --ssh-command gets. Port, user,
    // key and known hosts come from the file, so `ssh -F FILE 127.0.0.3 CMD`
    // logs in without a question (BatchMode) or it fails.
    std::string ssh_command() const;
    std::string ssh_config() const { return m_dir + "/ssh_config"; }
    // argv of an ssh client running `command` on `address` (ssh joins the
    // words of a command and the remote shell parses them again: pass one).
    std::vector<std::string> ssh_argv(const std::string& address, const std::string& command) const;

    // The listener (-1 once stopped).
    pid_t pid() const { return m_pid; }
    int port() const { return m_port; }
    const std::vector<std::string>& addresses() const { return m_addresses; }
    // sshd's log so far (its own -E file): for a failure message.
    std::string log() const;
    // The listener's live children: one per connection that has not ended
    // (empty once the listener is stopped).
    std::vector<pid_t> connection_pids() const;

    // Stops the listener (SIGTERM, then SIGKILL) and reaps it. Live sessions go on.
    void stop();

  private:
    enum class Start { ready, port_taken, failed };
    Start start();
    bool write_files();

    std::vector<std::string> m_addresses;
    std::string m_dir;
    int m_port = 0;
    pid_t m_pid = -1;
    std::string m_error;
};

}  // namespace ddprun
