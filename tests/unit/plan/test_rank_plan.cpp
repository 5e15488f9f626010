// The rank plan is the contract workers depend on: every variable, every rank.
#include <gtest/gtest.h>

#include <csignal>

#include <map>

#include "ddprun/plan/rank_plan.hpp"

namespace ddprun {
namespace {

std::map<std::string, std::string> env_of(const WorkerSpec& w) {
    return {w.env.begin(), w.env.end()};
}

LaunchConfig basic_config(int nproc) {
    LaunchConfig c;
    c.nproc_per_node = {NprocKind::Count, nproc};
    c.program = "./train";
    c.args = {"--lr", "0.1", "-v"};
    return c;
}

RoundInfo round_of(std::vector<int> nproc_per_node, int node_rank) {
    RoundInfo r;
    r.nproc_per_node = std::move(nproc_per_node);
    r.node_rank = node_rank;
    r.master_addr = "10.0.0.1";
    r.master_port = 1234;
    return r;
}

struct RankCase {
    std::vector<int> nproc_per_node;
    int node_rank;
    int first_rank;
    int world_size;
};

class RankPlanRanks : public testing::TestWithParam<RankCase> {};

TEST_P(RankPlanRanks, RankIsNodeOffsetPlusLocalRank) {
    const auto& p = GetParam();
    int nproc = p.nproc_per_node.at(static_cast<std::size_t>(p.node_rank));
    auto workers =
        plan_node(basic_config(nproc), {}, round_of(p.nproc_per_node, p.node_rank), {}, "/e");
    ASSERT_EQ(static_cast<int>(workers.size()), nproc);
    for (int i = 0; i < nproc; ++i) {
        const auto& w = workers[static_cast<std::size_t>(i)];
        auto env = env_of(w);
        EXPECT_EQ(w.rank, p.first_rank + i);
        EXPECT_EQ(env["RANK"], std::to_string(p.first_rank + i));
        EXPECT_EQ(env["LOCAL_RANK"], std::to_string(i));
        EXPECT_EQ(env["WORLD_SIZE"], std::to_string(p.world_size));
        EXPECT_EQ(env["LOCAL_WORLD_SIZE"], std::to_string(nproc));
        EXPECT_EQ(env["GROUP_RANK"], std::to_string(p.node_rank));
        EXPECT_EQ(env["NODE_RANK"], std::to_string(p.node_rank));
        EXPECT_EQ(env["NNODES"], std::to_string(p.nproc_per_node.size()));
        EXPECT_EQ(env["GROUP_WORLD_SIZE"], std::to_string(p.nproc_per_node.size()));
        EXPECT_EQ(env["ROLE_RANK"], env["RANK"]);
        EXPECT_EQ(env["ROLE_WORLD_SIZE"], env["WORLD_SIZE"]);
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RankPlanRanks,
                         testing::Values(RankCase{{1}, 0, 0, 1}, RankCase{{8}, 0, 0, 8},
                                         RankCase{{8, 8}, 0, 0, 16}, RankCase{{8, 8}, 1, 8, 16},
                                         RankCase{{4, 4, 4, 4}, 3, 12, 16},
                                         // Heterogeneous nodes: prefix sums, as torchrun does.
                                         RankCase{{2, 3, 1}, 0, 0, 6}, RankCase{{2, 3, 1}, 1, 2, 6},
                                         RankCase{{2, 3, 1}, 2, 5, 6}));

TEST(RankPlan, SetsTheWholeEnvironmentContract) {
    LaunchConfig c = basic_config(2);
    c.role = "trainer";
    c.max_restarts = 3;
    c.rdzv_id = "job42";
    RoundInfo r = round_of({2}, 0);
    r.restart_count = 2;
    auto workers = plan_node(c, {}, r, {}, "/tmp/err");
    auto env = env_of(workers[1]);
    EXPECT_EQ(env["ROLE_NAME"], "trainer");
    EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "1234");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job42");
    EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/tmp/err/1/error.json");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["PYTHONUNBUFFERED"], "1");
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES")) << "no devices: left unset";
}

// torch's rendezvous.py reads exactly "True": every rank a client of the agent's store.
TEST(RankPlan, TheAgentStoreFlagSaysWhoHostsTheWorkersStore) {
    RoundInfo r = round_of({2, 2}, 1);
    EXPECT_EQ(env_of(plan_node(basic_config(2), {}, r, {}, "")[0])["TORCHELASTIC_USE_AGENT_STORE"],
              "False");
    r.agent_store = true;
    for (const auto& worker : plan_node(basic_config(2), {}, r, {}, ""))
        EXPECT_EQ(env_of(worker)["TORCHELASTIC_USE_AGENT_STORE"], "True");
}

TEST(RankPlan, InheritedDefaultsAreNotOverridden) {
    Environment inherited{{"OMP_NUM_THREADS", "4"},
                          {"PYTHONUNBUFFERED", "0"},
                          {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
    auto env = env_of(plan_node(basic_config(2), {}, round_of({2}, 0), inherited, "/e")[0]);
    EXPECT_FALSE(env.contains("OMP_NUM_THREADS"));
    EXPECT_FALSE(env.contains("PYTHONUNBUFFERED"));
    EXPECT_FALSE(env.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING"));
}

// As torchrun 2.14: only the current name, which torch 2.2 and later read (the old one
// is deprecated there and warned about on every rank); an inherited one is kept.
TEST(RankPlan, AsyncErrorHandlingIsSetUnderTheCurrentNameOnly) {
    auto env = env_of(plan_node(basic_config(2), {}, round_of({2}, 0), {}, "/e")[0]);
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING"));
}

// A torch < 2.2 user exports the old name; it reaches the worker unchanged.
TEST(RankPlan, TheOldAsyncErrorHandlingNameIsTheUsersToSet) {
    Environment inherited{{"NCCL_ASYNC_ERROR_HANDLING", "1"}};
    auto env = env_of(plan_node(basic_config(2), {}, round_of({2}, 0), inherited, "/e")[0]);
    EXPECT_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING")) << "inherited, not set by ddprun";
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
}

// torchrun 2.x passes its --signals_to_handle on to the workers.
TEST(RankPlan, SignalsToHandleReachTheWorkers) {
    LaunchConfig config = basic_config(2);
    config.stop_signals = {SIGTERM, SIGUSR1};
    auto env = env_of(plan_node(config, {}, round_of({2}, 0), {}, "/e")[1]);
    EXPECT_EQ(env["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGUSR1");
}

TEST(RankPlan, OmpThreadsOnlyWithSeveralWorkers) {
    auto env = env_of(plan_node(basic_config(1), {}, round_of({1}, 0), {}, "/e")[0]);
    EXPECT_FALSE(env.contains("OMP_NUM_THREADS"));
}

TEST(RankPlan, EachWorkerGetsItsOwnDeviceVerbatim) {
    NodeResources res;
    res.devices = {"4", "GPU-8f2a", "MIG-1c3d", "7"};
    auto workers = plan_node(basic_config(4), res, round_of({4}, 0), {}, "/e");
    for (std::size_t i = 0; i < 4; ++i)
        EXPECT_EQ(env_of(workers[i])["CUDA_VISIBLE_DEVICES"], res.devices[i]);
}

TEST(RankPlan, AllDevicesKeepsTheWholeList) {
    NodeResources res;
    res.devices = {"4", "5"};
    LaunchConfig c = basic_config(2);
    c.all_devices = true;
    for (const auto& w : plan_node(c, res, round_of({2}, 0), {}, "/e"))
        EXPECT_EQ(env_of(w)["CUDA_VISIBLE_DEVICES"], "4,5");
}

TEST(RankPlan, VirtualLocalRankIsZeroWithOwnDevice) {
    NodeResources res;
    res.devices = {"4", "5"};
    LaunchConfig c = basic_config(2);
    c.virtual_local_rank = true;
    c.all_devices = true;  // virtual local rank wins: each worker sees only its device
    auto workers = plan_node(c, res, round_of({2}, 0), {}, "/e");
    EXPECT_EQ(env_of(workers[1])["LOCAL_RANK"], "0");
    EXPECT_EQ(env_of(workers[1])["CUDA_VISIBLE_DEVICES"], "5");
    EXPECT_EQ(workers[1].local_rank, 1);
    EXPECT_EQ(env_of(workers[1])["TORCHELASTIC_ERROR_FILE"], "/e/1/error.json");
}

TEST(RankPlan, WorkerCommandByProgramKind) {
    LaunchConfig c = basic_config(1);
    EXPECT_EQ(worker_command(c, {}), (std::vector<std::string>{"./train", "--lr", "0.1", "-v"}));
    c.program = "train.py";
    c.program_kind = ProgramKind::PythonFile;
    EXPECT_EQ(worker_command(c, {}),
              (std::vector<std::string>{"python3", "-u", "train.py", "--lr", "0.1", "-v"}));
    c.program = "pkg.train";
    c.program_kind = ProgramKind::PythonModule;
    EXPECT_EQ(worker_command(c, {{"PYTHON_EXEC", "/usr/bin/python3"}}),
              (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "--lr", "0.1",
                                        "-v"}));
}

struct NprocCase {
    NprocSpec spec;
    std::vector<std::string> devices;
    int cpus;
    int expected;  // -1: error
    std::string message_part;
};

class RankPlanNproc : public testing::TestWithParam<NprocCase> {};

TEST_P(RankPlanNproc, Resolves) {
    const auto& p = GetParam();
    NodeResources res;
    res.devices = p.devices;
    res.cpus = p.cpus;
    auto n = resolve_nproc(p.spec, res);
    if (p.expected < 0) {
        ASSERT_FALSE(n.has_value());
        EXPECT_NE(n.error().message.find(p.message_part), std::string::npos) << n.error().message;
    } else {
        ASSERT_TRUE(n.has_value()) << n.error().message;
        EXPECT_EQ(*n, p.expected);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Words, RankPlanNproc,
    testing::Values(NprocCase{{NprocKind::Count, 3}, {}, 2, 3, ""},
                    NprocCase{{NprocKind::Count, 4}, {"4", "5", "6", "7"}, 2, 4, ""},
                    NprocCase{{NprocKind::Count, 8}, {"4", "5", "6", "7"}, 2, -1, "8"},
                    NprocCase{{NprocKind::Count, 8}, {"4", "5", "6", "7"}, 2, -1, "4 GPUs"},
                    NprocCase{{NprocKind::Gpu, 0}, {"0", "1"}, 2, 2, ""},
                    NprocCase{{NprocKind::Gpu, 0}, {}, 2, -1, "no GPU"},
                    NprocCase{{NprocKind::Cpu, 0}, {"0"}, 6, 6, ""},
                    NprocCase{{NprocKind::Auto, 0}, {"0", "1", "2"}, 6, 3, ""},
                    NprocCase{{NprocKind::Auto, 0}, {}, 6, 6, ""}));

TEST(RankPlan, RankOffsetIsPrefixSum) {
    EXPECT_EQ(rank_offset({2, 3, 1}, 0), 0);
    EXPECT_EQ(rank_offset({2, 3, 1}, 2), 5);
    EXPECT_EQ(rank_offset({8, 8}, 1), 8);
}

TEST(RankPlan, FormatPlanShowsEveryRankAndTheRule) {
    LaunchConfig c = basic_config(2);
    c.nnodes = 2;
    std::vector<WorkerSpec> all;
    for (int node = 0; node < 2; ++node) {
        auto w = plan_node(c, {}, round_of({2, 2}, node), {}, "");
        all.insert(all.end(), w.begin(), w.end());
    }
    std::string table = format_plan(c, all, "10.0.0.1:1234");
    EXPECT_NE(table.find("world_size 4"), std::string::npos) << table;
    EXPECT_NE(table.find("counts processes, not machines"), std::string::npos);
    EXPECT_NE(table.find("rank = node_rank * nproc_per_node + local_rank"), std::string::npos);
    EXPECT_NE(table.find("10.0.0.1:1234"), std::string::npos);
    EXPECT_NE(table.find("./train --lr 0.1 -v"), std::string::npos);
    // Header plus one row per rank.
    int rows = 0;
    for (std::size_t pos = 0; (pos = table.find("./train", pos)) != std::string::npos; ++pos)
        ++rows;
    EXPECT_EQ(rows, 4);
}

// torchrun's ${local_rank} macro, in the program's arguments (not the command's first word).
TEST(RankPlan, LocalRankMacroInTheArgumentsAsTorchrun) {
    LaunchConfig c = basic_config(2);
    c.program = "./train${local_rank}";
    c.args = {"--out=/ckpt/${local_rank}", "$local_rank", "$$HOME", "plain"};
    auto workers = plan_node(c, {}, round_of({2, 2}, 1), {}, "/e");
    ASSERT_EQ(workers.size(), 2u);
    EXPECT_EQ(workers[1].argv, (std::vector<std::string>{"./train${local_rank}", "--out=/ckpt/1",
                                                         "1", "$HOME", "plain"}));
    c.program_kind = ProgramKind::PythonFile;
    c.program = "t.py";
    c.args = {"${local_rank}"};
    workers = plan_node(c, {}, round_of({2}, 0), {}, "/e");
    EXPECT_EQ(workers[0].argv.back(), "0");
}

}  // namespace
}  // namespace ddprun
