// ddprun under Open MPI's mpirun: one ddprun per "host", two hosts
// (127.0.0.1 and 127.0.0.2, both this machine; tests/mpi/rsh_local starts
// mpirun's daemon on the second one locally, as ssh would remotely), each with
// two fake_worker workers. What an mpirun user relies on: ranks 0-3 from
// `mpirun -N 1 -x MASTER_ADDR=... ddprun`, a missing MASTER_ADDR refused in
// one line, and a worker's failure reaching mpirun's exit code.

#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "slurm_cluster.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

constexpr Milliseconds k_mpirun_guard = 60s;

class MpiTest : public IntegrationTest {
  protected:
    void SetUp() override {
        IntegrationTest::SetUp();
        m_mpirun = find_program("mpirun");
        if (m_mpirun.empty()) GTEST_SKIP() << "mpirun not found (install openmpi-bin)";
        if (find_program("orted").empty()) GTEST_SKIP() << "orted not found (install openmpi-bin)";
        // mpirun may exit a moment before the daemon it started through the rsh agent
        // on the second "host" (the agent's shell and orted): Open MPI's teardown, not
        // the job's, and bounded by the grace like any orphan's.
        expect_orphans_to_clean_up();
    }

    // mpirun, one ddprun on each of the two hosts, `exports` as -x; then ddprun
    // --nproc_per_node=2 fake_worker `actions`.
    RunResult mpirun(const std::vector<std::string>& exports,
                     const std::vector<std::string>& actions) {
        std::vector<std::string> args{"--allow-run-as-root", "--tag-output", "--mca",
                                      "plm_rsh_agent",       k_rsh_local,    "-H",
                                      "127.0.0.1,127.0.0.2", "-N",           "1"};
        for (const auto& variable : exports) args.insert(args.end(), {"-x", variable});
        args.insert(args.end(), {k_ddprun, "--nproc_per_node=2", k_fake_worker});
        args.insert(args.end(), actions.begin(), actions.end());
        RunOptions options;
        options.program = m_mpirun;
        options.timeout = k_mpirun_guard;
        options.dies_with_test = true;
        return start(args, options)->wait();
    }

    // The lines mpirun --tag-output shows for MPI rank `node` (one ddprun), the
    // tag "[1,<node>]<stdout>:" or "<stderr>:" removed.
    static std::vector<std::string> node_lines(const RunResult& r, int node) {
        std::vector<std::string> lines;
        for (const auto& line : non_empty_lines(r.out + "\n" + r.err)) {
            for (const char* stream : {"stdout", "stderr"}) {
                std::string tag = fmt::format("[1,{}]<{}>:", node, stream);
                if (line.starts_with(tag)) lines.push_back(line.substr(tag.size()));
            }
        }
        return lines;
    }

    // Worker output of both nodes with the mpirun tags removed, so that the
    // harness's "[rank]: " parsers apply.
    static std::string worker_output(const RunResult& r) {
        std::string text;
        for (int node = 0; node < 2; ++node) {
            for (const auto& line : node_lines(r, node)) text += line + "\n";
        }
        return text;
    }

    inline static const std::string k_rsh_local = ddprun_test::build_paths::mpi_rsh_local;
    std::string m_mpirun;
};

class Mpi : public MpiTest {};

TEST_F(Mpi, TwoHostsOfTwoWorkersAreRanksZeroToThree) {
    auto r = mpirun({"MASTER_ADDR=127.0.0.1"}, {"env"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(worker_output(r));
    ASSERT_EQ(env.size(), 4u) << r.describe();
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_EQ(env[rank]["RANK"], std::to_string(rank));
        EXPECT_EQ(env[rank]["WORLD_SIZE"], "4");
        EXPECT_EQ(env[rank]["LOCAL_RANK"], std::to_string(rank % 2));
        EXPECT_EQ(env[rank]["NODE_RANK"], std::to_string(rank / 2));
        EXPECT_EQ(env[rank]["MASTER_ADDR"], "127.0.0.1");
        EXPECT_EQ(env[rank]["MASTER_PORT"], env[0]["MASTER_PORT"]);
    }
    // ddprun's node rank is its MPI rank: workers 0-1 under MPI rank 0.
    for (int node = 0; node < 2; ++node) {
        auto lines = node_lines(r, node);
        for (int rank = node * 2; rank < node * 2 + 2; ++rank) {
            EXPECT_NE(
                std::find(lines.begin(), lines.end(), fmt::format("[{}]: RANK={}", rank, rank)),
                lines.end())
                << "rank " << rank << " under MPI rank " << node << "\n"
                << r.describe();
        }
    }
}

TEST_F(Mpi, MissingMasterAddrIsRefusedInOneLine) {
    auto r = mpirun({}, {"env"});
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    bool any = false;
    for (int node = 0; node < 2; ++node) {
        auto lines = node_lines(r, node);
        if (lines.empty()) continue;  // mpirun may stop the other copy before it speaks
        any = true;
        ASSERT_EQ(lines.size(), 1u) << "MPI rank " << node << "\n" << r.describe();
        EXPECT_TRUE(contains(lines[0], "MASTER_ADDR")) << lines[0];
        EXPECT_TRUE(contains(lines[0], "mpirun")) << lines[0];
    }
    EXPECT_TRUE(any) << "no ddprun said why\n" << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "a worker started\n" << r.describe();
}

TEST_F(Mpi, WorkerFailureGivesMpirunTheWorkersExitCode) {
    std::vector<std::string> actions{"ready", m_dir + "/ready.{rank}"};
    for (int rank : {0, 1, 3}) {
        actions.insert(actions.end(),
                       {"if-rank", "2", "wait-file", fmt::format("{}/ready.{}", m_dir, rank)});
    }
    actions.insert(actions.end(), {"if-rank", "2", "exit", "3", "sleep", "300"});
    auto r = mpirun({"MASTER_ADDR=127.0.0.1"}, actions);
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    // mpirun's console is shared: one box, on node 0, naming every node's workers.
    const std::string all = r.out + r.err;
    EXPECT_EQ(count_occurrences(all, "ddprun: job failed"), 1u) << r.describe();
    EXPECT_EQ(count_occurrences(all, "root cause: rank 2"), 1u) << r.describe();
    EXPECT_TRUE(contains(all, "other failures (3):")) << r.describe();
}

}  // namespace
}  // namespace ddprun_it
