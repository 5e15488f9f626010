#include "support/service_process.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <fstream>
#include <thread>

namespace ddprun {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
}

bool reap_within(pid_t pid, std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
        int status = 0;
        pid_t got = ::waitpid(pid, &status, WNOHANG);
        if (got == pid || (got < 0 && errno == ECHILD)) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

void stop_process(pid_t pid, std::chrono::milliseconds grace) {
    ::kill(pid, SIGTERM);
    if (reap_within(pid, grace)) return;
    ::kill(pid, SIGKILL);
    reap_within(pid, grace);
}

}  // namespace ddprun
