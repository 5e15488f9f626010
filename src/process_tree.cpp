// Subreaper housekeeping (see process_tree.hpp).
#include "ddprun/process_tree.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace ddprun {

std::string become_subreaper() {
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return std::string("prctl(PR_SET_CHILD_SUBREAPER): ") + std::strerror(errno);
    return {};
}

std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> children;
    DIR* proc = ::opendir("/proc");
    if (!proc) return children;
    while (dirent* entry = ::readdir(proc)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        char path[300];
        std::snprintf(path, sizeof path, "/proc/%s/stat", entry->d_name);
        std::ifstream stat(path);
        std::string line;
        if (!std::getline(stat, line)) continue;
        // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
        auto close = line.rfind(')');
        if (close == std::string::npos) continue;
        char state = 0;
        int ppid = 0;
        if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
        if (ppid == parent) children.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
    }
    ::closedir(proc);
    return children;
}

void reap_exited(const std::function<void(pid_t, int)>& on_reaped) {
    for (;;) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        if (on_reaped) on_reaped(pid, status);
    }
}

int sweep_children(std::chrono::milliseconds bound,
                   const std::function<void(pid_t, int)>& on_reaped) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    for (;;) {
        // For a subreaper, no child means no descendant at all: a living descendant's parent
        // is either alive (so some ancestor of it is our child) or it was reparented to us.
        // That check is one syscall; the /proc scan below is only needed when something is left.
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == ECHILD) return 0;
        if (pid > 0) {
            if (on_reaped) on_reaped(pid, status);
            continue;
        }
        auto children = children_of(::getpid());
        for (pid_t child : children) {
            if (::getpgid(child) == child) ::kill(-child, SIGKILL);
            ::kill(child, SIGKILL);
        }
        auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::milliseconds::zero())
            return static_cast<int>(children_of(::getpid()).size());
        // Wait for the next child to change state; a short cap covers a SIGCHLD
        // that was already consumed before the children list was read.
        auto wait = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(50));
        timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                    static_cast<long>(wait.count() % 1000000000)};
        ::sigtimedwait(&chld, nullptr, &ts);
    }
}

}  // namespace ddprun
