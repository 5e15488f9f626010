// Why the release is a pipe's end of file: closing the one write end wakes
// every child's read at the same instant, and a child that holds no copy of
// it cannot be released by anything else. Reports are lines of text; the
// clock is CLOCK_MONOTONIC (steady_clock), the same in every process.
#include "agent_processes.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ddprun::bench {

namespace {

using Clock = std::chrono::steady_clock;

long long ns_of(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

Clock::time_point time_of(long long ns) {
    return Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

std::runtime_error system_error(const char* call) {
    return std::runtime_error(fmt::format("{}: {}", call, std::strerror(errno)));
}

std::string one_line(std::string text) {
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
}

// Writes all of `text`; false if the parent is gone.
bool write_all(int fd, const std::string& text) {
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) return false;
        done += static_cast<std::size_t>(wrote);
    }
    return true;
}

std::string status_text(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return fmt::format("ended with wait status {}", status);
}

}  // namespace

void ChildPids::add(pid_t pid) {
    std::lock_guard lock(m_mutex);
    m_pids.push_back(pid);
}

int ChildPids::reap(pid_t pid) {
    std::lock_guard lock(m_mutex);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::erase(m_pids, pid);
    return status;
}

void ChildPids::kill_all() {
    std::lock_guard lock(m_mutex);
    for (pid_t pid : m_pids) ::kill(pid, SIGKILL);
}

AgentProcesses::AgentProcesses(int agents, int processes, const OpenStores& open,
                               std::chrono::seconds timeout, ChildPids& pids)
    : m_agents(agents), m_timeout(timeout), m_pids(pids) {
    int go[2];
    if (::pipe2(go, O_CLOEXEC) != 0) throw system_error("pipe2");
    m_go_read.reset(go[0]);
    m_go_write.reset(go[1]);
    const pid_t parent = ::getpid();
    std::fflush(nullptr);
    m_children.reserve(static_cast<std::size_t>(processes));
    try {
        for (int k = 0; k < processes; ++k) {
            Child child;
            child.first = agents * k / processes;
            child.count = agents * (k + 1) / processes - child.first;
            int report[2];
            if (::pipe2(report, O_CLOEXEC) != 0) throw system_error("pipe2");
            UniqueFd read_end(report[0]);
            UniqueFd write_end(report[1]);
            const pid_t pid = ::fork();
            if (pid < 0) throw system_error("fork");
            if (pid == 0) {
                ::prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (::getppid() != parent) ::_exit(1);
                // The parent's ends: a child holding the release's write end would
                // never see its end of file.
                ::close(m_go_write.get());
                ::close(read_end.get());
                for (const auto& other : m_children) ::close(other.report.get());
                run_child(child, std::move(write_end), open);
            }
            m_pids.add(pid);
            child.pid = pid;
            child.report = std::move(read_end);
            m_children.push_back(std::move(child));
        }
        m_go_read.reset();

        const auto deadline = Clock::now() + m_timeout;
        bool first = true;
        for (auto& child : m_children) {
            const std::string line = next_line(child, deadline);
            std::istringstream fields(line);
            std::string word;
            long long start = 0;
            long long end = 0;
            if (!(fields >> word >> start >> end) || word != "ready") {
                if (!line.empty()) throw std::runtime_error(describe(child) + ": " + line);
                const int status = m_pids.reap(std::exchange(child.pid, -1));
                throw std::runtime_error(fmt::format("{} {} before its agents were ready",
                                                     describe(child), status_text(status)));
            }
            m_connect_start = first ? time_of(start) : std::min(m_connect_start, time_of(start));
            m_connect_end = first ? time_of(end) : std::max(m_connect_end, time_of(end));
            first = false;
        }
    } catch (...) {
        stop();
        throw;
    }
}

AgentProcesses::~AgentProcesses() {
    stop();
}

void AgentProcesses::run_child(const Child& child, UniqueFd report, const OpenStores& open) {
    // Every way out is _exit: nothing of the parent's (its etcd, its buffered
    // output) may be destroyed or flushed from here.
    int status = 0;
    try {
        const auto connect_start = Clock::now();
        auto stores = open(child.first, child.count);
        const auto connect_end = Clock::now();
        GroupOutcome outcome = run_agents(stores, child.first, m_agents, false, m_timeout, [&] {
            write_all(report.get(),
                      fmt::format("ready {} {}\n", ns_of(connect_start), ns_of(connect_end)));
            char byte = 0;
            while (::read(m_go_read.get(), &byte, 1) < 0 && errno == EINTR) {
            }
        });
        std::string lines;
        for (std::size_t k = 0; k < outcome.agents.size(); ++k) {
            const auto& agent = outcome.agents[k];
            const auto i = static_cast<std::size_t>(child.first) + k;
            if (agent.joined)
                lines += fmt::format("agent {} joined {} {} {}\n", i, agent.ops, agent.bytes,
                                     agent.node_rank);
            else
                lines += fmt::format("agent {} failed {} {} {}\n", i, agent.ops, agent.bytes,
                                     one_line(agent.error));
        }
        lines += fmt::format("done {:.3f} {}\n", outcome.cpu_ms, ns_of(outcome.join_end));
        write_all(report.get(), lines);
    } catch (const std::exception& e) {
        write_all(report.get(), fmt::format("error {}\n", one_line(e.what())));
        status = 1;
    }
    ::_exit(status);
}

ProcessesOutcome AgentProcesses::release() {
    ProcessesOutcome outcome;
    outcome.agents.resize(static_cast<std::size_t>(m_agents));
    try {
        outcome.join_start = Clock::now();
        m_go_write.reset();
        // The agents give up after the timeout themselves; this bounds a child
        // that neither reports nor ends.
        const auto deadline = outcome.join_start + m_timeout + std::chrono::seconds(30);
        bool first = true;
        for (auto& child : m_children) {
            int reported = 0;
            for (;;) {
                const std::string line = next_line(child, deadline);
                if (line.empty()) break;
                std::istringstream fields(line);
                std::string word;
                fields >> word;
                if (word == "agent") {
                    std::size_t i = 0;
                    std::string how;
                    AgentOutcome agent;
                    fields >> i >> how >> agent.ops >> agent.bytes;
                    if (!fields || i < static_cast<std::size_t>(child.first) ||
                        i >= static_cast<std::size_t>(child.first + child.count))
                        throw std::runtime_error(describe(child) + " wrote: " + line);
                    agent.joined = how == "joined";
                    if (agent.joined) {
                        fields >> agent.node_rank;
                    } else {
                        std::getline(fields >> std::ws, agent.error);
                    }
                    outcome.agents[i] = std::move(agent);
                    ++reported;
                } else if (word == "done") {
                    double cpu_ms = 0;
                    long long end = 0;
                    fields >> cpu_ms >> end;
                    outcome.cpu_ms += cpu_ms;
                    outcome.join_end =
                        first ? time_of(end) : std::max(outcome.join_end, time_of(end));
                    first = false;
                } else {
                    throw std::runtime_error(describe(child) + ": " + line);
                }
            }
            const int status = m_pids.reap(std::exchange(child.pid, -1));
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || reported != child.count)
                throw std::runtime_error(fmt::format("{} {} having reported {} of its agents",
                                                     describe(child), status_text(status),
                                                     reported));
        }
    } catch (...) {
        stop();
        throw;
    }
    return outcome;
}

std::string AgentProcesses::next_line(Child& child, Clock::time_point deadline) {
    for (;;) {
        const auto newline = child.buffer.find('\n');
        if (newline != std::string::npos) {
            std::string line = child.buffer.substr(0, newline);
            child.buffer.erase(0, newline + 1);
            return line;
        }
        if (!child.report) return std::exchange(child.buffer, {});
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0)
            throw std::runtime_error(
                fmt::format("{} did not report within {} s", describe(child), m_timeout.count()));
        pollfd ready{child.report.get(), POLLIN, 0};
        const int polled =
            ::poll(&ready, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
        if (polled < 0 && errno != EINTR) throw system_error("poll");
        if (polled <= 0) continue;
        char chunk[65536];
        const ssize_t got = ::read(child.report.get(), chunk, sizeof chunk);
        if (got < 0 && errno != EINTR) throw system_error("read");
        if (got == 0) child.report.reset();
        if (got > 0) child.buffer.append(chunk, static_cast<std::size_t>(got));
    }
}

std::string AgentProcesses::describe(const Child& child) const {
    return fmt::format("the process of agents {}-{}", child.first, child.first + child.count - 1);
}

void AgentProcesses::stop() {
    for (auto& child : m_children) {
        if (child.pid < 0) continue;
        ::kill(child.pid, SIGKILL);
        m_pids.reap(std::exchange(child.pid, -1));
    }
    m_go_write.reset();
    m_go_read.reset();
}

}  // namespace ddprun::bench
