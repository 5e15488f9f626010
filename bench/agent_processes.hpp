// Simulated agents spread over forked processes, for bench/rendezvous_scale
// counts whose connections one process cannot hold: over etcd an agent holds
// about 8 descriptors, so 4096 of them need about 32,800, past a common hard
// RLIMIT_NOFILE. Each child runs one group of agents (simulated_agents.hpp)
// and reports over a pipe; all of them are released at the same instant (the
// parent closes a pipe every child reads, once every child's threads wait).
// Children are SIGKILLed by pid when the parent is done with them early, and
// by the kernel if the parent dies (PR_SET_PDEATHSIG): none outlives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddprun/base/fd.hpp"
#include "ddprun/store/store.hpp"
#include "simulated_agents.hpp"

namespace ddprun::bench {

// The children running now, by pid, shared with a thread that may have to
// stop them all (rendezvous_scale's --limit).
class ChildPids {
  public:
    void add(pid_t pid);
    // Waits for `pid` to end and forgets it (under the lock, so that
    // kill_all() never signals a pid the kernel gave to another process).
    int reap(pid_t pid);
    // SIGKILLs every child still known; they are reaped by their owner.
    void kill_all();

  private:
    std::mutex m_mutex;
    std::vector<pid_t> m_pids;
};

// A child's way to open its agents' connections: agents first .. first + count - 1.
using OpenStores = std::function<std::vector<std::unique_ptr<Store>>(int first, int count)>;

struct ProcessesOutcome {
    std::vector<AgentOutcome> agents;  // agent i's at index i
    double cpu_ms = 0;                 // all children's, each measured as run_agents does
    std::chrono::steady_clock::time_point join_start;  // the release
    std::chrono::steady_clock::time_point join_end;    // the last child's last join
};

class AgentProcesses {
  public:
    // Forks `processes` children and gives each an even share of `agents`
    // (none hosts a store); each opens its connections, creates its threads
    // and says it is ready. Returns once all are ready, or throws
    // std::runtime_error (naming the child and its agents) if one fails or
    // does not get ready within `timeout`, having killed them all.
    AgentProcesses(int agents, int processes, const OpenStores& open, std::chrono::seconds timeout,
                   ChildPids& pids);
    ~AgentProcesses();  // kills and reaps the children still running
    AgentProcesses(const AgentProcesses&) = delete;
    AgentProcesses& operator=(const AgentProcesses&) = delete;

    // From the first child's start of its connections to the last one's end
    // (the children connect at the same time, each one after another).
    std::chrono::steady_clock::time_point connect_start() const { return m_connect_start; }
    std::chrono::steady_clock::time_point connect_end() const { return m_connect_end; }

    // Releases every agent at once and waits for all of them (bounded by the
    // timeout given at construction, past the agents' own); throws
    // std::runtime_error if a child fails or does not report.
    ProcessesOutcome release();

  private:
    struct Child {
        pid_t pid = -1;
        int first = 0;
        int count = 0;
        UniqueFd report;     // the read end of its report pipe
        std::string buffer;  // read, not yet split into lines
    };
    [[noreturn]] void run_child(const Child& child, UniqueFd report, const OpenStores& open);
    // The child's next line (without '\n'); empty at end of file. Throws at the deadline.
    std::string next_line(Child& child, std::chrono::steady_clock::time_point deadline);
    std::string describe(const Child& child) const;
    // Kills and reaps every child not reaped yet.
    void stop();

    int m_agents;
    std::chrono::seconds m_timeout;
    ChildPids& m_pids;
    UniqueFd m_go_read;   // the children's; EOF is the release
    UniqueFd m_go_write;  // closed to release them
    std::vector<Child> m_children;
    std::chrono::steady_clock::time_point m_connect_start;
    std::chrono::steady_clock::time_point m_connect_end;
};

}  // namespace ddprun::bench
