// The workers' store of a multi-node job (worker_store.hpp): node 0's agent hosts it at
// MASTER_ADDR:MASTER_PORT and every rank is its client (TORCHELASTIC_USE_AGENT_STORE=True),
// as under torchrun 2.x's c10d rendezvous; where torch's own client of it could not start
// (a torch without libuv), rank 0 hosts it as before unless
// TORCH_DISABLE_SHARE_RDZV_TCP_STORE asks; over etcd, never.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "multi_node.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

// Each rank prints one line: what ddprun told it, the all_reduce's sum, how many
// sockets listen on MASTER_PORT on this machine and how many of them are its own.
// "env": init_process_group(env://), torch's own choice of client or server; "client":
// a TCPStore client of MASTER_ADDR:MASTER_PORT made by the worker, without libuv where
// torch has the argument (torch 2.14's env:// client of an agent store drops it). The
// process group on that store is what env:// builds under torchrun 2.14.
// destroy_process_group and os._exit: torch 1.13's gloo can deadlock at interpreter
// exit (DESIGN.md, platform facts).
constexpr const char* k_gloo_worker = R"(import datetime, inspect, os, sys
import torch
import torch.distributed as dist
e = os.environ
port = int(e["MASTER_PORT"])

def listeners():
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(f[9])
    return found

def own_sockets():
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found

if sys.argv[1] == "env":
    dist.init_process_group("gloo")
else:
    extra = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}
    store = dist.TCPStore(e["MASTER_ADDR"], port, int(e["WORLD_SIZE"]), False,
                          datetime.timedelta(seconds=30), **extra)
    dist.init_process_group("gloo", store=store, rank=int(e["RANK"]),
                            world_size=int(e["WORLD_SIZE"]))
t = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(t)
mine = listeners() & own_sockets()
print(f"agent_store={e['TORCHELASTIC_USE_AGENT_STORE']} sum={t.item()} "
      f"listeners={len(listeners())} own={len(mine)} USE_LIBUV={e.get('USE_LIBUV', 'unset')}",
      flush=True)
dist.barrier()
dist.destroy_process_group()
os._exit(0)
)";

class AgentStore : public MultiNodeTest {
  protected:
    void SetUp() override {
        MultiNodeTest::SetUp();
        if (std::string(ddprun_test::build_paths::store_client).empty())
            GTEST_SKIP() << "built without libtorch: no c10d store";
    }

    // Two nodes of two gloo ranks each; each rank's line, by rank.
    std::map<int, std::string> run_gloo(const std::string& mode, const RunOptions& options) {
        write_text_file(path("gloo_worker.py"), k_gloo_worker);
        Job job;
        job.guard = 120s;  // four torch imports on a busy 2-core machine
        auto lines =
            run_two_nodes(job, {"--no-python", k_python, path("gloo_worker.py"), mode}, options);
        if (exit_codes(m_results) != std::vector<int>{0, 0}) lines.clear();
        return lines;
    }

    // Two nodes of two shell workers that print TORCHELASTIC_USE_AGENT_STORE: by rank.
    std::map<int, std::string> run_flag_printers(const Job& job, const RunOptions& options) {
        auto flags = run_two_nodes(
            job, {"--no-python", "/bin/sh", "-c", "echo agent_store=$TORCHELASTIC_USE_AGENT_STORE"},
            options);
        for (auto& [rank, line] : flags) line.erase(0, std::string_view("agent_store=").size());
        return flags;
    }

    // `program` on node 0 (127.0.0.1) and node 1 (127.0.0.2), the results in m_results;
    // each rank's last line that starts with "agent_store=".
    std::map<int, std::string> run_two_nodes(const Job& job,
                                             const std::vector<std::string>& program,
                                             const RunOptions& options) {
        m_results = run_nodes(job,
                              {{.node_rank = 0, .addr = "127.0.0.1", .program = program},
                               {.node_rank = 1, .addr = "127.0.0.2", .program = program}},
                              options);
        std::map<int, std::string> lines;
        for (const auto& result : m_results)
            for (const auto& [rank, printed] : lines_by_rank(result.out))
                for (const auto& line : printed)
                    if (line.starts_with("agent_store=")) lines[rank] = line;
        return lines;
    }

    std::vector<RunResult> m_results;
};

// A 2x2 torch gloo job over the shared agent store, USE_LIBUV set nowhere:
// every rank a client of node 0's agent's store, no rank listening on MASTER_PORT.
// Where torch's own env:// client cannot start (no libuv), the worker makes its client.
TEST_F(AgentStore, AGlooJobOfTwoNodesRunsOverNodeZerosStoreWithoutUseLibuv) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}};
    options.unset_env = {"USE_LIBUV"};
    auto lines = run_gloo(torch_defaults_start() ? "env" : "client", options);
    ASSERT_EQ(lines.size(), 4u) << describe_all(m_results);
    for (const auto& [rank, line] : lines)
        EXPECT_EQ(line, "agent_store=True sum=10 listeners=1 own=0 USE_LIBUV=unset")
            << "rank " << rank << "\n"
            << describe_all(m_results);
}

// Unset, the variable leaves it to the workers' torch: shared where torch's own env://
// client of the agent's store starts (torch 1.13, a torch with libuv: the test above
// runs env:// there); rank 0's store, and one line on node 0 saying why, where it would
// not (Debian's torch 2.x, where rank 0's server needs USE_LIBUV=0, as before).
TEST_F(AgentStore, ByDefaultSharedWhereTorchsOwnClientStarts) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    const bool shares = torch_defaults_start();
    RunOptions options;
    options.unset_env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE"};
    auto flags = run_flag_printers(Job{}, options);
    EXPECT_EQ(flags, (std::map<int, std::string>{{0, shares ? "True" : "False"},
                                                 {1, shares ? "True" : "False"},
                                                 {2, shares ? "True" : "False"},
                                                 {3, shares ? "True" : "False"}}))
        << describe_all(m_results);
    EXPECT_EQ(own_lines_with(m_results[0].err, {"the workers keep their own store", "no libuv",
                                                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0"})
                  .size(),
              shares ? 0u : 1u)
        << describe_all(m_results);
    EXPECT_TRUE(own_lines_with(m_results[1].err, {"the workers keep their own store"}).empty())
        << "node 0 says it for the job\n"
        << describe_all(m_results);
}

// torchrun's opt-out: rank 0 hosts, as before (with the harness's USE_LIBUV=0, which
// its server needs on a torch without libuv; torch 1.13 ignores it).
TEST_F(AgentStore, TheVariableSetToOneKeepsRankZerosStore) {
    if (!python_has_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}};
    auto lines = run_gloo("env", options);
    ASSERT_EQ(lines.size(), 4u) << describe_all(m_results);
    for (const auto& [rank, line] : lines)
        EXPECT_EQ(line, fmt::format("agent_store=False sum=10 listeners=1 own={} USE_LIBUV=0",
                                    rank == 0 ? 1 : 0))
            << "rank " << rank << "\n"
            << describe_all(m_results);
}

// A restart gets a store of its own (the last round's keys gone), on the same port when
// --master_port fixes it, and the workers reach it as plain clients: nothing of theirs
// listens (they are shell scripts).
TEST_F(AgentStore, EveryRoundGetsAFreshStoreOnItsPort) {
    const std::string client = ddprun_test::build_paths::store_client;
    const std::string script =
        "echo agent_store=$TORCHELASTIC_USE_AGENT_STORE; "
        "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then "
        "  if [ $RANK = 0 ]; then " +
        client +
        " $MASTER_ADDR $MASTER_PORT add left_over 1 || exit 9; exit 1; fi; sleep 300; "
        "else " +
        client + " $MASTER_ADDR $MASTER_PORT add round_1 1 add left_over 0; fi";
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}};
    Job job;
    job.flags = {"--max_restarts=1", fmt::format("--master_port={}", free_port())};
    const std::vector<std::string> program = {"--no-python", "/bin/sh", "-c", script};
    auto r = run_nodes(job,
                       {{.node_rank = 0, .addr = "127.0.0.1", .program = program},
                        {.node_rank = 1, .addr = "127.0.0.2", .program = program}},
                       options);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    std::multiset<std::string> round_one_counts;
    for (int node = 0; node < 2; ++node) {
        for (const auto& [rank, lines] : lines_by_rank(r[static_cast<std::size_t>(node)].out)) {
            SCOPED_TRACE(fmt::format("rank {}", rank));
            ASSERT_GE(lines.size(), 1u) << describe_all(r);
            EXPECT_EQ(lines.front(), "agent_store=True") << describe_all(r);
            if (lines.size() < 3) continue;  // a round-0 rank stopped before it printed again
            // Round 1: round_1 counts this rank in (1-4), left_over is 0: a fresh store.
            EXPECT_EQ(lines.back(), "0") << describe_all(r);
            round_one_counts.insert(lines[lines.size() - 2]);
        }
    }
    EXPECT_EQ(round_one_counts, (std::multiset<std::string>{"1", "2", "3", "4"}))
        << describe_all(r);
}

// The nodes must agree on who hosts: else both node 0's agent and rank 0 would listen,
// or the ranks of torch 1.13 look under different prefixes. The join says so on every
// node, naming the variable, and nothing starts.
TEST_F(AgentStore, NodesThatDisagreeStopAtTheJoinNamingTheVariable) {
    Job job;
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    for (int node : {0, 1}) {
        RunOptions options;
        options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", node == 0 ? "1" : "0"}};
        agents.push_back(start_node(job,
                                    {.node_rank = node,
                                     .addr = fmt::format("127.0.0.{}", node + 1),
                                     .actions = {"ready", path("ran.{rank}")}},
                                    options));
    }
    auto r = wait_nodes(agents);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, k_rendezvous_exit}))
        << describe_all(r);
    for (const auto& result : r)
        EXPECT_EQ(own_lines_with(result.err, {"who hosts the workers' store",
                                              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
                                              "rank 0 on node 0", "node 0's agent on node 1"})
                      .size(),
                  1u)
            << describe_all(r);
    for (int rank = 0; rank < 4; ++rank)
        EXPECT_FALSE(std::filesystem::exists(path(fmt::format("ran.{}", rank)))) << rank;
}

// One node loads no libtorch unless asked: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0 has its
// agent host the workers' store, as torchrun's on one node (the debug server's client
// before init_process_group needs one); unset, rank 0 hosts.
TEST_F(AgentStore, OneNodeHostsTheWorkersStoreWhenAsked) {
    const std::string client = ddprun_test::build_paths::store_client;
    const std::vector<std::string> program = {
        "--nproc_per_node=2", "--no-python", "/bin/sh", "-c",
        "echo agent_store=$TORCHELASTIC_USE_AGENT_STORE; [ $TORCHELASTIC_USE_AGENT_STORE = "
        "False ] || " +
            client + " $MASTER_ADDR $MASTER_PORT add ranks 1"};
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}};
    auto shared = run(program, options);
    ASSERT_EQ(shared.exit_code, 0) << shared.describe();
    std::multiset<std::string> printed;
    for (const auto& [rank, lines] : lines_by_rank(shared.out))
        printed.insert(lines.begin(), lines.end());
    EXPECT_EQ(printed,
              (std::multiset<std::string>{"agent_store=True", "agent_store=True", "1", "2"}))
        << shared.describe();
    options.env.clear();
    options.unset_env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE"};
    auto unset = run(program, options);
    ASSERT_EQ(unset.exit_code, 0) << unset.describe();
    EXPECT_EQ(lines_by_rank(unset.out),
              (std::map<int, std::vector<std::string>>{{0, {"agent_store=False"}},
                                                       {1, {"agent_store=False"}}}))
        << unset.describe();
}

// torch 2.14's debug server (torch.distributed.debug.start_debug_server): each rank
// registers its worker server in the store at MASTER_ADDR:MASTER_PORT, through a client
// it makes at once, so that before init_process_group only a store the agent hosts can
// answer it. Rank 0's frontend then shows every rank's stack (/stacks). Debian's torch
// has no libuv and the debug server's client takes TCPStore's default: the worker makes
// that default False first, as bench/torchrun_site does for torchrun's workers.
constexpr const char* k_debug_worker = R"(import datetime, importlib, os, sys, time
import urllib.request
import torch.distributed as dist

# The module: torch.distributed.rendezvous as an attribute is a function of it.
rendezvous = importlib.import_module("torch.distributed.rendezvous")

try:
    dist.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=5))
except Exception as error:
    if "libuv" not in str(error):
        raise
    _original = dist.TCPStore

    def _tcp_store(*args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        return _original(*args, **kwargs)

    dist.TCPStore = rendezvous.TCPStore = _tcp_store

if __name__ == "__main__":
    from torch.distributed import debug

    when, port = sys.argv[1], int(sys.argv[2])
    if when == "before":
        debug.start_debug_server(port=port)
    dist.init_process_group("gloo")
    if when == "after":
        debug.start_debug_server(port=port)
    dist.barrier()
    if dist.get_rank() == 0:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/stacks", timeout=60)
                body = page.read().decode()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the frontend's process is still starting
        world = dist.get_world_size()
        answered = sum(f"<h2>Rank {r}:" in body for r in range(world))
        print(f"stacks status={page.status} ranks={answered}/{world} "
              f"failed={body.count('Failed to fetch')}", flush=True)
    dist.barrier()
    if dist.get_rank() == 0:  # torch's stop is rank 0's alone (the frontend's process)
        debug.stop_debug_server()
    dist.destroy_process_group()
    os._exit(0)
)";

// torch 2.14's torch.distributed.debug and its frontend's own imports (jinja2,
// tabulate) are there (asked once: a torch import takes seconds).
bool torch_has_debug_server() {
    static const bool has = [] {
        const std::string command =
            k_python + " -c 'import torch.distributed.debug._debug_handlers' >/dev/null 2>&1";
        return std::system(command.c_str()) == 0;
    }();
    return has;
}

class DebugServer : public AgentStore, public ::testing::WithParamInterface<std::string> {};

TEST_P(DebugServer, AnswersForEveryRankUnderDdprun) {
    if (!torch_has_debug_server())
        GTEST_SKIP() << k_python
                     << "'s torch has no torch.distributed.debug (torch 2.14 has; its frontend "
                        "needs python3-jinja2 and python3-tabulate)";
    write_text_file(path("debug_worker.py"), k_debug_worker);
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}};
    options.unset_env = {"USE_LIBUV"};
    Job job;
    job.nproc = 1;
    job.guard = 120s;
    const std::vector<std::string> program = {"--no-python", k_python, path("debug_worker.py"),
                                              GetParam(), std::to_string(free_port())};
    auto r = run_nodes(job,
                       {{.node_rank = 0, .addr = "127.0.0.1", .program = program},
                        {.node_rank = 1, .addr = "127.0.0.2", .program = program}},
                       options);
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    auto lines = lines_by_rank(r[0].out)[0];
    EXPECT_NE(std::find(lines.begin(), lines.end(), "stacks status=200 ranks=2/2 failed=0"),
              lines.end())
        << describe_all(r);
}

INSTANTIATE_TEST_SUITE_P(InitProcessGroup, DebugServer, ::testing::Values("before", "after"),
                         [](const auto& test) { return test.param + "_init"; });

class AgentStoreOverEtcd : public AgentStore {
  protected:
    bool etcd() const override { return true; }
};

// etcd's agents have no TCPStore to share: rank 0 hosts, whatever the variable says.
TEST_F(AgentStoreOverEtcd, IsNeverShared) {
    RunOptions options;
    options.env = {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}};
    auto flags = run_flag_printers(Job{}, options);
    EXPECT_EQ(flags,
              (std::map<int, std::string>{{0, "False"}, {1, "False"}, {2, "False"}, {3, "False"}}))
        << describe_all(m_results);
}

}  // namespace
}  // namespace ddprun_it
