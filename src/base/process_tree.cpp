// Subreaper housekeeping (see process_tree.hpp).
#include "ddprun/base/process_tree.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"

namespace ddprun {

Status become_subreaper() {
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return std::unexpected(system_error("prctl(PR_SET_CHILD_SUBREAPER)"));
    return {};
}

std::optional<ProcessIds> process_ids(pid_t pid) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(stat, line)) return std::nullopt;
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    auto close = line.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    // " S PPID PGRP ...": the state, then the parent's pid and the process group.
    std::string_view fields = trim(std::string_view(line).substr(close + 1));
    const char state = fields.empty() ? '?' : fields.front();
    auto next_field = [&fields]() -> std::optional<long long> {
        auto space = fields.find(' ');
        if (space == std::string_view::npos) return std::nullopt;
        fields.remove_prefix(space + 1);
        return to_integer(fields.substr(0, fields.find(' ')));
    };
    auto ppid = next_field();
    auto pgid = next_field();
    if (!ppid || !pgid) return std::nullopt;
    return ProcessIds{static_cast<pid_t>(*ppid), static_cast<pid_t>(*pgid), state};
}

std::expected<std::vector<pid_t>, Error> children_of(pid_t parent) {
    std::vector<pid_t> children;
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return std::unexpected(system_error("opendir(/proc)"));
    for (;;) {
        errno = 0;  // how readdir tells an error from the end
        dirent* entry = ::readdir(proc);
        if (entry == nullptr) break;
        auto pid = to_integer(entry->d_name);
        if (!pid || *pid <= 0) continue;  // not a process
        // A process may end while we look: its stat is then gone, and so is it.
        auto ids = process_ids(static_cast<pid_t>(*pid));
        if (ids && ids->ppid == parent) children.push_back(static_cast<pid_t>(*pid));
    }
    int read_error = errno;
    ::closedir(proc);
    if (read_error != 0) {
        errno = read_error;
        return std::unexpected(system_error("readdir(/proc)"));
    }
    return children;
}

namespace {

// The owned children (process_tree.hpp) and their status once reaped. The lock
// is held across every waitpid that may reap one of them.
struct Owned {
    std::mutex lock;
    std::map<pid_t, std::optional<int>> children;
};

Owned& owned() {
    static Owned instance;
    return instance;
}

// waitpid(-1, WNOHANG) for the reapers: an owned child's status is kept for its
// owner, and the next child is looked at.
pid_t reap_one(int& status) {
    Owned& registry = owned();
    std::lock_guard guard(registry.lock);
    for (;;) {
        pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return pid;
        auto entry = registry.children.find(pid);
        if (entry == registry.children.end()) return pid;
        entry->second = status;
    }
}

}  // namespace

namespace owned_children {

pid_t start(const std::function<pid_t()>& start) {
    Owned& registry = owned();
    std::lock_guard guard(registry.lock);
    pid_t pid = start();
    if (pid > 0) registry.children[pid] = std::nullopt;
    return pid;
}

std::optional<int> exit_status(pid_t pid) {
    Owned& registry = owned();
    std::lock_guard guard(registry.lock);
    auto entry = registry.children.find(pid);
    if (entry == registry.children.end()) return std::nullopt;
    if (!entry->second) {
        int status = 0;
        pid_t done = ::waitpid(pid, &status, WNOHANG);
        while (done < 0 && errno == EINTR) done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) entry->second = status;
    }
    return entry->second;
}

void kill(pid_t pid, int signal) {
    Owned& registry = owned();
    std::lock_guard guard(registry.lock);
    auto entry = registry.children.find(pid);
    if (entry == registry.children.end() || entry->second) return;
    ::kill(-pid, signal);
    ::kill(pid, signal);
}

void release(pid_t pid) {
    Owned& registry = owned();
    std::lock_guard guard(registry.lock);
    registry.children.erase(pid);
}

}  // namespace owned_children

void reap_exited(const std::function<void(pid_t, int)>& on_reaped) {
    for (;;) {
        int status = 0;
        pid_t pid = reap_one(status);
        if (pid < 0 && errno == EINTR) continue;
        // 0: children left, none exited; ECHILD: no child at all.
        if (pid <= 0) return;
        if (on_reaped) on_reaped(pid, status);
    }
}

std::expected<int, Error> sweep_children(std::chrono::milliseconds bound,
                                         const std::function<void(pid_t, int)>& on_reaped) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    // The first kill that failed for another reason than the child being gone.
    std::optional<Error> kill_error;
    for (;;) {
        // For a subreaper, no child means no descendant at all: a living descendant's parent
        // is either alive (so some ancestor of it is our child) or it was reparented to us.
        // That check is one syscall; the /proc scan below is only needed when something is left.
        int status = 0;
        pid_t pid = reap_one(status);
        if (pid < 0 && errno == ECHILD) return 0;
        if (pid < 0 && errno != EINTR) return std::unexpected(system_error("waitpid"));
        if (pid > 0) {
            if (on_reaped) on_reaped(pid, status);
            continue;
        }
        auto children = children_of(::getpid());
        if (!children) return std::unexpected(children.error());
        for (pid_t child : *children) {
            // ESRCH: it is already gone (or, for the group, it leads none).
            if (::getpgid(child) == child && ::kill(-child, SIGKILL) != 0 && errno != ESRCH &&
                !kill_error)
                kill_error = system_error(fmt::format("kill(-{}, SIGKILL)", child));
            if (::kill(child, SIGKILL) != 0 && errno != ESRCH && !kill_error)
                kill_error = system_error(fmt::format("kill({}, SIGKILL)", child));
        }
        auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::milliseconds::zero()) {
            auto still = children_of(::getpid());
            if (!still) return std::unexpected(still.error());
            if (!still->empty() && kill_error) {
                kill_error->message = fmt::format("{} process(es) of the job are still alive: {}",
                                                  still->size(), kill_error->message);
                return std::unexpected(*kill_error);
            }
            return static_cast<int>(still->size());
        }
        // Wait for the next child to change state; a short cap covers a SIGCHLD
        // that was already consumed before the children list was read.
        auto wait = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(50));
        timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                    static_cast<long>(wait.count() % 1000000000)};
        // EAGAIN: the cap passed; EINTR: another signal. Either way, look again.
        if (::sigtimedwait(&chld, nullptr, &ts) < 0 && errno != EAGAIN && errno != EINTR)
            return std::unexpected(system_error("sigtimedwait"));
    }
}

}  // namespace ddprun
