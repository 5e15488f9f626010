// The multi-node fixture shared by the multi-node, elastic and etcd suites:
// several agents on this machine, one per loopback address (127.0.0.1, .2, .3),
// meet through the rendezvous store like the nodes of a cluster, over c10d or
// etcd (backend.hpp); plus the helpers that read what they printed and what
// their workers recorded.
#pragma once

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend.hpp"
#include "harness.hpp"

namespace ddprun_it {

inline constexpr int k_rendezvous_exit = 75;

// Long enough for an agent to start, join and run short workers on a loaded
// 2-core machine; short enough that a node left waiting for a lost peer (or
// for a grace it should not need) fails the test instead of stalling it.
inline constexpr Milliseconds k_node_guard = 30s;

// ddprun's own lines that mention every one of `needles`.
inline std::vector<std::string> own_lines_with(const std::string& err,
                                               const std::vector<std::string>& needles) {
    std::vector<std::string> found;
    for (const auto& line : ddprun_own_lines(err)) {
        if (std::all_of(needles.begin(), needles.end(),
                        [&](const std::string& needle) { return contains(line, needle); })) {
            found.push_back(line);
        }
    }
    return found;
}

inline std::string describe_all(const std::vector<RunResult>& results) {
    std::string text;
    for (std::size_t i = 0; i < results.size(); ++i) {
        text += fmt::format("=== agent {} ===\n{}\n", i, results[i].describe());
    }
    return text;
}

inline std::vector<int> exit_codes(const std::vector<RunResult>& results) {
    std::vector<int> codes;
    for (const auto& r : results) codes.push_back(r.exit_code);
    return codes;
}

// The worker's `env` output, one block per run of the worker (a block starts
// at "RANK="), so the rounds of a restarted job can be told apart.
inline std::vector<std::map<std::string, std::string>> env_blocks(
    const std::vector<std::string>& lines) {
    std::vector<std::map<std::string, std::string>> blocks;
    for (const auto& line : lines) {
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string name = line.substr(0, eq);
        if (name == "RANK") blocks.emplace_back();
        if (!blocks.empty()) blocks.back()[name] = line.substr(eq + 1);
    }
    return blocks;
}

// `action argument` for each of `ranks` only. Every agent of a job must run
// the same program and arguments, so what differs between nodes is chosen by
// rank.
inline std::vector<std::string> on_ranks(const std::vector<int>& ranks, const std::string& action,
                                         const std::string& argument) {
    std::vector<std::string> actions;
    for (int rank : ranks) {
        actions.insert(actions.end(), {"if-rank", std::to_string(rank), action, argument});
    }
    return actions;
}

inline std::vector<std::string> concat(std::vector<std::vector<std::string>> parts) {
    std::vector<std::string> all;
    for (auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
}

// Workers that report ready and then sleep far beyond any hang guard.
inline std::vector<std::string> sleepers(const std::string& dir,
                                         std::vector<std::string> setup = {}) {
    setup.insert(setup.end(), {"ready", dir + "/ready.{rank}", "sleep", "300"});
    return setup;
}

// /usr/bin/python3 can import torch (Debian's python3-torch).
inline bool python_has_torch() {
    std::string command = k_python + " -c 'import torch' >/dev/null 2>&1";
    return std::system(command.c_str()) == 0;
}

// The agent: the one process ddprun's top process supervises.
inline pid_t agent_of(const DdprunProcess& ddprun) {
    auto children = children_of(ddprun.pid());
    return children.size() == 1 ? children[0] : -1;
}

// What every agent of one job shares.
struct Job {
    int nnodes = 2;
    int min_nnodes = 0;  // an elastic job's MIN (--nnodes=MIN:nnodes); 0: a fixed size
    int nproc = 2;
    // --rdzv_conf; join_timeout bounds a broken rendezvous with a message
    // instead of the hang guard.
    std::map<std::string, std::string> conf = {{"join_timeout", "20"}};
    std::vector<std::string> flags;  // more flags for every agent
    Milliseconds guard = k_node_guard;
};

// One agent.
struct Node {
    int node_rank = -1;                     // -1: --node_rank omitted (assigned at join)
    std::string addr;                       // --local_addr
    std::vector<std::string> flags = {};    // this agent's own flags (override the job's)
    std::vector<std::string> program = {};  // empty: fake_worker with `actions`
    std::vector<std::string> actions = {};
};

class MultiNodeTest : public BackendTest {
  protected:
    std::vector<std::string> agent_args(const Job& job, const Node& node) const {
        std::vector<std::string> args{
            job.min_nnodes > 0 ? fmt::format("--nnodes={}:{}", job.min_nnodes, job.nnodes)
                               : fmt::format("--nnodes={}", job.nnodes),
            fmt::format("--nproc_per_node={}", job.nproc),
            "--rdzv_id=" + m_run_id,
        };
        auto rendezvous = rendezvous_flags(etcd(), m_port);
        args.insert(args.end(), rendezvous.begin(), rendezvous.end());
        if (node.node_rank >= 0) args.push_back(fmt::format("--node_rank={}", node.node_rank));
        args.push_back("--local_addr=" + node.addr);
        std::string conf;
        for (const auto& [key, value] : job.conf) {
            conf += (conf.empty() ? "" : ",") + key + "=" + value;
        }
        args.push_back("--rdzv_conf=" + conf);
        // Later flags win, so a node's own flags override the job's.
        args.insert(args.end(), job.flags.begin(), job.flags.end());
        args.insert(args.end(), node.flags.begin(), node.flags.end());
        if (node.program.empty()) {
            args.push_back(k_fake_worker);
            args.insert(args.end(), node.actions.begin(), node.actions.end());
        } else {
            args.insert(args.end(), node.program.begin(), node.program.end());
        }
        return args;
    }

    std::unique_ptr<DdprunProcess> start_node(const Job& job, const Node& node,
                                              RunOptions options = {}) {
        options.timeout = job.guard;
        return start(agent_args(job, node), std::move(options));
    }

    // Starts every agent, waits for all of them.
    std::vector<RunResult> run_nodes(const Job& job, const std::vector<Node>& nodes,
                                     const RunOptions& options = {}) {
        std::vector<std::unique_ptr<DdprunProcess>> agents;
        for (const auto& node : nodes) agents.push_back(start_node(job, node, options));
        return wait_nodes(agents);
    }

    // Kills an agent the way a host dies: its supervisor and the agent itself at once, so
    // that nothing is published and only the heartbeats (or leases) tell.
    void kill_node(DdprunProcess& victim) {
        pid_t agent = agent_of(victim);
        ASSERT_GT(agent, 0) << "no agent process under ddprun " << victim.pid();
        ::kill(agent, SIGKILL);
        ::kill(victim.pid(), SIGKILL);
        expect_orphans_to_clean_up();
    }

    static std::vector<RunResult> wait_nodes(
        const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        std::vector<DdprunProcess*> raw;
        for (const auto& agent : agents) raw.push_back(agent.get());
        return wait_all(raw);
    }

    void wait_ready(int world, const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        for (int rank = 0; rank < world; ++rank) {
            ASSERT_TRUE(wait_for_file(path(fmt::format("ready.{}", rank)), 30s))
                << "worker " << rank << " never started\n"
                << stderr_of(agents);
        }
    }

    static std::string stderr_of(const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        std::string text;
        for (std::size_t i = 0; i < agents.size(); ++i) {
            text += fmt::format("--- agent {} stderr so far ---\n{}\n", i, agents[i]->err_so_far());
        }
        return text;
    }

    // Waits until the workers of these ranks have all exited (and were reaped).
    bool wait_workers_gone(const std::vector<int>& ranks, Milliseconds timeout) const {
        return wait_until(
            [&] {
                auto workers = recorded_workers();
                for (int rank : ranks) {
                    auto it = workers.find(rank);
                    if (it == workers.end()) return false;
                    for (pid_t pid : it->second) {
                        // Alive, or dead but not yet reaped by its agent (a
                        // reused pid names another program).
                        auto info = process_info(pid);
                        if (info && (info->state == 'Z' || contains(info->cmdline, "fake_worker")))
                            return false;
                    }
                }
                return true;
            },
            timeout);
    }

    static std::string run_id_for_this_test() {
        // Parameterized names hold '/', which the run id must not (it names directories).
        std::string id =
            std::string("mn-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
        std::replace(id.begin(), id.end(), '/', '-');
        return id;
    }

    int m_port = free_port();
    std::string m_run_id = run_id_for_this_test();
};

// A multi-node test run over each backend; its parameter is the backend:
//   INSTANTIATE_TEST_SUITE_P(MultiNode, Suite, ::testing::ValuesIn(k_backends), backend_name);
class MultiNodeBackendTest : public MultiNodeTest,
                             public ::testing::WithParamInterface<std::string> {
  protected:
    bool etcd() const override { return GetParam() == "etcd"; }
};

// A multi-node test with cases of its own, each over each backend (on_backends()).
template <class Case>
class MultiNodeCaseTest : public MultiNodeTest,
                          public ::testing::WithParamInterface<OnBackend<Case>> {
  protected:
    bool etcd() const override { return this->GetParam().backend == "etcd"; }
    const Case& the_case() const { return this->GetParam().c; }
};

}  // namespace ddprun_it
