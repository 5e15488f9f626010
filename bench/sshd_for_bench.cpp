// A real sshd for bench (l) (tests/support/sshd_server.hpp): listens on
// 127.0.0.2, .3 and .4, prints the --ssh-command that reaches them as its
// first line (or "error: WHY" and exits 1), and stops it, by pid, when its
// standard input closes. The benchmark runs it as a helper process.
#include <unistd.h>

#include <cstdio>

#include "support/sshd_server.hpp"

int main() {
    ddprun::SshServer server;
    if (!server.ready()) {
        std::printf("error: %s\n", server.error().c_str());
        return 1;
    }
    std::printf("%s\n", server.ssh_command().c_str());
    std::fflush(stdout);
    char byte;
    while (::read(0, &byte, 1) > 0) {
    }
    return 0;
}
