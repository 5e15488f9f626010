// ddprun under a real Slurm: the real binary started by srun,
// sbatch and salloc on the two nodes of slurm_cluster.hpp, stopped by scancel,
// with fake_worker as the program. What a Slurm user relies on: one job of
// ranks 0-3 from `srun -N2 ddprun`, the batch script's rules, a failure or a
// scancel that ends every node the same way (checkpoints saved within
// KillWait), jobs and steps that share the nodes without sharing a world, and
// one clear line when node 0's name does not resolve.
//
// Every wait is bounded. Jobs left by a test are cancelled in TearDown, before
// the check that no worker outlived the test.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "slurm_cluster.hpp"

namespace ddprun_it {
namespace {

// How long one srun/sbatch job of these tests may take on a loaded 2-core
// machine before the test calls it a hang.
constexpr Milliseconds k_job_guard = 60s;
// The bound for every node to give up on an unresolvable node 0: far below the
// 60 s socket timeout a node that did not resolve it first would wait out.
constexpr Milliseconds k_resolve_bound = 15s;
// Jobs or steps sharing the nodes take about a second; this bounds how long a
// node left behind by a collision of the two (waiting for a store whose host
// has given up) holds up the test.
constexpr Milliseconds k_sharing_guard = 20s;
// The unresolvable-node job gets this long before the test calls it a hang.
constexpr Milliseconds k_resolve_guard = 20s;
// How long a duplicate delivery of a signal may lag behind the first: the
// workers stay up this long after every one of them counted one, so a second
// copy (relayed by ddprun, or sent again by Slurm) would be counted too.
constexpr Milliseconds k_duplicate_window = 1s;

// ddprun and its flags, then fake_worker and its actions.
std::vector<std::string> ddprun_job(std::vector<std::string> flags,
                                    const std::vector<std::string>& actions) {
    flags.insert(flags.begin(), k_ddprun);
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), actions.begin(), actions.end());
    return flags;
}

std::vector<std::string> concat(std::vector<std::vector<std::string>> parts) {
    std::vector<std::string> all;
    for (auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
}

// Waits (bounded) until every one of `paths` exists.
bool wait_for_files(const std::vector<std::string>& paths, Milliseconds timeout) {
    return wait_until(
        [&] {
            return std::all_of(paths.begin(), paths.end(), [](const std::string& path) {
                return std::filesystem::exists(path);
            });
        },
        timeout);
}

std::vector<std::string> rank_files(const std::string& prefix, int world) {
    std::vector<std::string> paths;
    for (int rank = 0; rank < world; ++rank) paths.push_back(fmt::format("{}.{}", prefix, rank));
    return paths;
}

// One job's view of a run: each rank's env lines (fake_worker's env + getenv).
using RankEnv = std::map<int, std::map<std::string, std::string>>;

// Ranks 0..world-1, each exactly once, all of one world: same WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT, the given SLURM variables the same too.
void expect_one_world(const std::string& output, int world, int nproc,
                      const std::vector<std::string>& same_everywhere, const std::string& what) {
    auto by_rank = lines_by_rank(output);
    RankEnv env = env_by_rank(output);
    std::set<int> ranks;
    for (const auto& [rank, lines] : by_rank) ranks.insert(rank);
    std::set<int> expected;
    for (int rank = 0; rank < world; ++rank) expected.insert(rank);
    EXPECT_EQ(ranks, expected) << what << ": ranks seen";
    for (int rank = 0; rank < world; ++rank) {
        auto lines = by_rank[rank];
        EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                                [](const std::string& line) { return line.starts_with("RANK="); }),
                  1)
            << what << ": rank " << rank << " ran once";
        EXPECT_EQ(env[rank]["RANK"], std::to_string(rank)) << what;
        EXPECT_EQ(env[rank]["WORLD_SIZE"], std::to_string(world)) << what << " rank " << rank;
        EXPECT_EQ(env[rank]["LOCAL_RANK"], std::to_string(rank % nproc)) << what;
        EXPECT_EQ(env[rank]["NODE_RANK"], std::to_string(rank / nproc)) << what;
        for (const auto& name :
             concat({{"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"}, same_everywhere})) {
            EXPECT_EQ(env[rank][name], env[0][name]) << what << ": " << name << " of rank " << rank;
        }
    }
}

class SlurmTest : public IntegrationTest {
  protected:
    void SetUp() override {
        IntegrationTest::SetUp();
        std::string why_not;
        m_cluster = shared_slurm_cluster(why_not);
        if (!m_cluster) GTEST_SKIP() << why_not;
        // Files the jobs write are read by the tasks Slurm starts (as root).
        std::filesystem::permissions(m_dir, std::filesystem::perms::all);
    }

    void TearDown() override {
        if (m_cluster) {
            // Whatever a test left (a guard that fired, a failed assertion
            // before its own scancel) is cancelled with Slurm's grace, and
            // gone, before the leftover check.
            for (const auto& name : m_job_names) m_cluster->client({"scancel", "-n", name}, 10s);
            bool gone = wait_until(
                [&] {
                    auto queue = m_cluster->client({"squeue", "-h", "-o", "%i %j %T"}, 10s);
                    return non_empty_lines(queue.out).empty();
                },
                30s);
            EXPECT_TRUE(gone) << "jobs still in the queue 30 s after scancel:\n"
                              << m_cluster->client({"squeue"}).out;
            EXPECT_TRUE(m_survivors.empty())
                << "workers still alive when the srun or salloc that ran them had exited:\n"
                << describe(m_survivors);
            // The workers of a job that ended by scancel may take Slurm's
            // KillWait to go; none may survive it.
            std::vector<ProcessInfo> live;
            wait_until(
                [&] {
                    live = live_workers();
                    return live.empty();
                },
                Milliseconds(std::chrono::seconds(m_cluster->options().kill_wait_seconds + 5)));
            EXPECT_TRUE(live.empty()) << "workers alive at the end of the test:\n"
                                      << describe(live);
            for (const auto& info : live) ::kill(info.pid, SIGKILL);
            if (HasFailure()) std::fprintf(stderr, "%s", m_cluster->failure_report().c_str());
        }
        IntegrationTest::TearDown();
    }

    SlurmCluster& cluster() { return *m_cluster; }

    // A job name unique in this run, so that squeue -n finds this job only.
    std::string new_job_name() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = fmt::format("{}-{}", info->name(), m_job_names.size());
        m_job_names.push_back(name);
        return name;
    }

    // A Slurm client (srun, sbatch, salloc) started like ddprun: own process
    // group, output captured, bounded, SLURM_CONF set. Its job's workers
    // record themselves in a pidfile of the job's own (srun passes the whole
    // environment on to the tasks), so that when a client that ran its job
    // to the end (srun, salloc; not sbatch, which only submits) exits, none
    // of its workers may be alive, whatever other jobs of the test still run.
    std::unique_ptr<DdprunProcess> start_client(const std::string& client,
                                                const std::vector<std::string>& args,
                                                Milliseconds guard = k_job_guard) {
        std::string pidfile = path(fmt::format("pids.{}", m_pidfiles.size()));
        m_pidfiles.push_back(pidfile);
        RunOptions options;
        options.program = find_program(client);
        options.env = cluster().client_env();
        options.env.emplace_back("FAKE_WORKER_PIDFILE", pidfile);
        options.timeout = guard;
        options.dies_with_test = true;
        bool runs_the_job = client != "sbatch";
        return std::make_unique<DdprunProcess>(
            args, options, [this, pidfile, runs_the_job](bool killed_by_harness) {
                // A client the hang guard killed left its job to TearDown's scancel.
                if (!runs_the_job || killed_by_harness) return;
                for (const auto& info : live_fake_workers(pidfile)) m_survivors.push_back(info);
            });
    }
    RunResult run_client(const std::string& client, const std::vector<std::string>& args,
                         Milliseconds guard = k_job_guard) {
        return start_client(client, args, guard)->wait();
    }

    // Every worker any job of this test started (pids).
    std::vector<pid_t> started_workers() const {
        std::vector<pid_t> pids;
        for (const auto& pidfile : m_pidfiles) {
            auto more = pids_in_file(pidfile);
            pids.insert(pids.end(), more.begin(), more.end());
        }
        return pids;
    }
    std::vector<ProcessInfo> live_workers() const {
        std::vector<ProcessInfo> live;
        for (const auto& pidfile : m_pidfiles) {
            auto more = live_fake_workers(pidfile);
            live.insert(live.end(), more.begin(), more.end());
        }
        return live;
    }

    // srun -N2 --ntasks-per-node=1 -J NAME, then `command`.
    std::vector<std::string> srun_two_nodes(const std::string& name,
                                            const std::vector<std::string>& command) {
        return concat({{"-N2", "--ntasks-per-node=1", "-J", name, "-t", "2"}, command});
    }

    // The job id of the one job named `name` (waits, bounded, until it is queued).
    std::string job_id(const std::string& name) {
        std::vector<std::string> ids;
        wait_until(
            [&] {
                ids = cluster().job_ids_named(name);
                return !ids.empty();
            },
            10s);
        EXPECT_EQ(ids.size(), 1u) << "jobs named " << name;
        return ids.empty() ? std::string() : ids.front();
    }

    // sbatch --parsable ... SCRIPT; the job id, empty on failure (with a test failure).
    // A batch script of `nodes` nodes that runs ddprun itself (no srun): the
    // job's id ("" if sbatch failed), its final state and its output.
    struct BatchRun {
        std::string id;
        std::optional<std::string> state;  // nullopt: it did not end within the guard
        std::string text;
    };
    BatchRun batch_without_srun(int nodes) {
        std::string output = path("job.out");
        std::string id =
            sbatch({fmt::format("-N{}", nodes)},
                   fmt::format("#!/bin/sh\nexec {}\n",
                               fmt::join(ddprun_job({"--nproc_per_node=2"}, {"env"}), " ")),
                   output);
        if (id.empty()) return {id, std::nullopt, read_text_file(output)};
        auto state = cluster().wait_job_end(id, k_job_guard);
        return {id, state, read_text_file(output)};
    }

    std::string sbatch(const std::vector<std::string>& flags, const std::string& script_text,
                       const std::string& output) {
        std::string script = path(fmt::format("batch-{}.sh", m_job_names.size()));
        write_text_file(script, script_text, 0755);
        auto submitted = run_client(
            "sbatch",
            concat(
                {{"--parsable", "-J", new_job_name(), "-o", output, "-t", "2"}, flags, {script}}));
        EXPECT_EQ(submitted.exit_code, 0) << submitted.describe();
        auto lines = non_empty_lines(submitted.out);
        if (lines.empty()) return {};
        return lines.front().substr(0, lines.front().find(';'));  // "ID" or "ID;cluster"
    }

    SlurmCluster* m_cluster = nullptr;
    std::vector<std::string> m_job_names;
    std::vector<std::string> m_pidfiles;
    std::vector<ProcessInfo> m_survivors;
};

class SlurmSrun : public SlurmTest {};
class SlurmBatch : public SlurmTest {};
class SlurmFailure : public SlurmTest {};
class SlurmSignals : public SlurmTest {};
class SlurmSharing : public SlurmTest {};
class SlurmNames : public SlurmTest {};
class SlurmStatus : public SlurmTest {};

// --- 1: srun -N2 ------------------------------------------------------------------

TEST_F(SlurmSrun, TwoNodesOfTwoWorkersAreRanksZeroToThreeWithNodeRanksFromSlurm) {
    auto r = run_client(
        "srun", srun_two_nodes(new_job_name(),
                               ddprun_job({"--nproc_per_node=2"}, {"env", "getenv", "SLURM_NODEID",
                                                                   "getenv", "SLURM_JOB_ID"})));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    expect_one_world(r.out, 4, 2, {"SLURM_JOB_ID"}, "srun -N2");
    RankEnv env = env_by_rank(r.out);
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_EQ(env[rank]["NODE_RANK"], env[rank]["SLURM_NODEID"]) << "rank " << rank;
        EXPECT_EQ(env[rank]["GROUP_WORLD_SIZE"], "2");
        EXPECT_EQ(env[rank]["MASTER_ADDR"], cluster().nodes()[0]);
    }
    std::printf("srun -N2 --ntasks-per-node=1 ddprun --nproc_per_node=2 (2x2): %lld ms\n",
                static_cast<long long>(r.elapsed.count()));
}

// --- 2: sbatch --------------------------------------------------------------------

TEST_F(SlurmBatch, SrunInTheScriptRunsRanksZeroToThree) {
    std::string output = path("job.out");
    std::string id = sbatch(
        {"-N2"},
        fmt::format(
            "#!/bin/sh\nexec srun --ntasks-per-node=1 {}\n",
            fmt::join(ddprun_job({"--nproc_per_node=2"}, {"env", "getenv", "SLURM_NODEID"}), " ")),
        output);
    ASSERT_FALSE(id.empty());
    auto state = cluster().wait_job_end(id, k_job_guard);
    std::string text = read_text_file(output);
    ASSERT_EQ(state, "COMPLETED") << "job output:\n" << text;
    expect_one_world(text, 4, 2, {}, "srun in sbatch");
    RankEnv env = env_by_rank(text);
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_EQ(env[rank]["NODE_RANK"], env[rank]["SLURM_NODEID"]) << "rank " << rank;
    }
}

TEST_F(SlurmBatch, OneNodeScriptWithoutSrunRunsTheNodesWorkers) {
    auto [id, state, text] = batch_without_srun(1);
    ASSERT_FALSE(id.empty()) << text;
    ASSERT_EQ(state, "COMPLETED") << "job output:\n" << text;
    expect_one_world(text, 2, 2, {}, "ddprun in a one-node batch script");
}

TEST_F(SlurmBatch, TwoNodeScriptWithoutSrunIsRefusedInOneLine) {
    auto [id, state, text] = batch_without_srun(2);
    ASSERT_FALSE(id.empty()) << text;
    EXPECT_EQ(state, "FAILED") << "job output:\n" << text;
    EXPECT_EQ(cluster().job_exit_code(id), "2:0") << "job output:\n" << text;
    auto lines = non_empty_lines(text);
    ASSERT_EQ(lines.size(), 1u) << "job output:\n" << text;
    EXPECT_TRUE(contains(lines[0], "SLURM_NNODES")) << lines[0];
    EXPECT_TRUE(contains(lines[0], "srun")) << lines[0];
    EXPECT_TRUE(started_workers().empty()) << "a worker started:\n" << text;
}

// --- 3 and 8: a failure -------------------------------------------------------------

TEST_F(SlurmFailure, WorkerExit3OnNode1EndsBothNodesWith3) {
    auto r = run_client(
        "srun", srun_two_nodes(new_job_name(),
                               ddprun_job({"--nproc_per_node=2"},
                                          fail_when_all_ready(m_dir, 4, 2, {"exit", "3"}))));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    // srun names every task that failed: both ddprun, with the worker's code.
    const auto& nodes = cluster().nodes();
    EXPECT_TRUE(contains(r.err, fmt::format("{}: task 0: Exited with exit code 3", nodes[0])))
        << r.describe();
    EXPECT_TRUE(contains(r.err, fmt::format("{}: task 1: Exited with exit code 3", nodes[1])))
        << r.describe();
    // Every summary box names the same root cause: rank 2 on node 1.
    std::string messages = ddprun_messages(r.err);
    std::size_t boxes = count_occurrences(messages, "ddprun: job failed (exit code 3)");
    EXPECT_GE(boxes, 1u) << messages;
    EXPECT_EQ(count_occurrences(messages, "root cause: rank 2 (local_rank 0, node 1"), boxes)
        << messages;
}

TEST_F(SlurmFailure, SharedConsoleShowsTheSummaryBoxOnce) {
    auto r = run_client(
        "srun", srun_two_nodes(new_job_name(),
                               ddprun_job({"--nproc_per_node=2"},
                                          fail_when_all_ready(m_dir, 4, 2, {"exit", "3"}))));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    // srun gathers every node's output on one console: the job failed once.
    EXPECT_EQ(count_occurrences(r.out + r.err, "ddprun: job failed"), 1u) << r.describe();
    EXPECT_EQ(count_occurrences(r.out + r.err, "root cause: rank 2"), 1u) << r.describe();
}

// --- 4: scancel --signal=USR1 ------------------------------------------------------------

// Each worker counts every SIGUSR1 it receives; once all of them count one,
// they stay up k_duplicate_window longer, so a second copy would be counted.
class SignalCount {
  public:
    SignalCount(std::string dir, int world) : m_dir(std::move(dir)), m_world(world) {}

    std::vector<std::string> worker_actions() const {
        return {"count-signal",
                "SIGUSR1",
                m_dir + "/usr1.{rank}",
                "ready",
                m_dir + "/ready.{rank}",
                "wait-file",
                m_dir + "/go",
                "sleep",
                fmt::format("{}", k_duplicate_window.count() / 1000.0)};
    }
    bool wait_ready(Milliseconds timeout) const {
        return wait_for_files(rank_files(m_dir + "/ready", m_world), timeout);
    }
    // Waits (bounded) until every worker counted at least one, then lets them finish.
    bool wait_counted_then_finish(Milliseconds timeout) const {
        bool counted = wait_until(
            [&] {
                for (int rank = 0; rank < m_world; ++rank) {
                    if (read_text_file(fmt::format("{}/usr1.{}", m_dir, rank)).empty())
                        return false;
                }
                return true;
            },
            timeout);
        write_text_file(m_dir + "/go", "");
        return counted;
    }
    // "SIGUSR1 <rank>" lines per rank.
    std::map<int, std::size_t> receipts() const {
        std::map<int, std::size_t> counts;
        for (int rank = 0; rank < m_world; ++rank) {
            counts[rank] = count_occurrences(read_text_file(fmt::format("{}/usr1.{}", m_dir, rank)),
                                             fmt::format("SIGUSR1 {}\n", rank));
        }
        return counts;
    }
    std::map<int, std::size_t> once_each() const {
        std::map<int, std::size_t> counts;
        for (int rank = 0; rank < m_world; ++rank) counts[rank] = 1;
        return counts;
    }

  private:
    std::string m_dir;
    int m_world;
};

TEST_F(SlurmSignals, ScancelSignalUsr1ReachesEveryWorkerOnce) {
    SignalCount count(m_dir, 4);
    std::string name = new_job_name();
    auto srun = start_client(
        "srun", srun_two_nodes(name, ddprun_job({"--nproc_per_node=2"}, count.worker_actions())));
    ASSERT_TRUE(count.wait_ready(k_job_guard / 2)) << srun->err_so_far();
    std::string id = job_id(name);
    auto signalled = cluster().client({"scancel", "--signal=USR1", id});
    EXPECT_EQ(signalled.exit_code, 0) << signalled.describe();
    EXPECT_TRUE(count.wait_counted_then_finish(10s)) << "not every worker got SIGUSR1";
    auto r = srun->wait();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(count.receipts(), count.once_each())
        << "SIGUSR1 receipts by rank, proctrack/" << cluster().options().proctrack << "\n"
        << r.describe();
}

// A batch job: --full signals the batch script's processes (here srun itself,
// which the script exec'd) as well as the step's. A script that neither execs
// srun nor traps the signal dies of it, and Slurm ends the job: that is
// Slurm's rule, not ddprun's, so the script follows the usual `exec srun`.
TEST_F(SlurmSignals, ScancelFullSignalUsr1OfABatchJobReachesEveryWorkerOnce) {
    SignalCount count(m_dir, 4);
    std::string output = path("job.out");
    std::string id = sbatch(
        {"-N2"},
        fmt::format("#!/bin/sh\nexec srun --ntasks-per-node=1 {}\n",
                    fmt::join(ddprun_job({"--nproc_per_node=2"}, count.worker_actions()), " ")),
        output);
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(count.wait_ready(k_job_guard / 2)) << read_text_file(output);
    auto signalled = cluster().client({"scancel", "--full", "--signal=USR1", id});
    EXPECT_EQ(signalled.exit_code, 0) << signalled.describe();
    EXPECT_TRUE(count.wait_counted_then_finish(10s)) << "not every worker got SIGUSR1";
    auto state = cluster().wait_job_end(id, k_job_guard);
    EXPECT_EQ(state, "COMPLETED") << read_text_file(output);
    EXPECT_EQ(count.receipts(), count.once_each())
        << "SIGUSR1 receipts by rank, proctrack/" << cluster().options().proctrack << "\n"
        << read_text_file(output);
}

// --- 5: scancel with checkpoints to save -------------------------------------------

TEST_F(SlurmSignals, ScancelLetsEveryWorkerFinishItsTwoSecondSave) {
    // 20 jobs, 4 at a time on the two nodes, each on the store and master ports
    // ddprun derives from its job id (SlurmSharing checks that they never meet).
    constexpr int k_rounds = 20;
    constexpr int k_at_once = 4;
    ASSERT_GE(cluster().options().kill_wait_seconds, 5) << "KillWait leaves no time to save";
    std::vector<std::string> lost;
    for (int first = 0; first < k_rounds; first += k_at_once) {
        std::vector<std::unique_ptr<DdprunProcess>> sruns;
        std::vector<std::string> names;
        std::vector<std::string> dirs;
        for (int round = first; round < first + k_at_once && round < k_rounds; ++round) {
            std::string dir = path(fmt::format("round{}", round));
            std::filesystem::create_directory(dir);
            std::filesystem::permissions(dir, std::filesystem::perms::all);
            names.push_back(new_job_name());
            dirs.push_back(dir);
            sruns.push_back(start_client(
                "srun", srun_two_nodes(names.back(),
                                       ddprun_job({"--nproc_per_node=2"},
                                                  {"save-marker", dir + "/saved.{rank}", "ready",
                                                   dir + "/ready.{rank}", "save-on-term", "2"}))));
        }
        for (std::size_t i = 0; i < dirs.size(); ++i) {
            ASSERT_TRUE(wait_for_files(rank_files(dirs[i] + "/ready", 4), k_job_guard / 2))
                << "round " << first + static_cast<int>(i) << " never got ready:\n"
                << sruns[i]->err_so_far();
        }
        std::vector<std::string> cancel{"scancel"};
        for (const auto& name : names) cancel.push_back(job_id(name));
        auto cancelled = cluster().client(cancel);
        EXPECT_EQ(cancelled.exit_code, 0) << cancelled.describe();
        std::vector<DdprunProcess*> waiting;
        for (auto& srun : sruns) waiting.push_back(srun.get());
        auto results = wait_all(waiting);
        for (std::size_t i = 0; i < dirs.size(); ++i) {
            EXPECT_FALSE(results[i].timed_out) << results[i].describe();
            // The step has ended when srun returns; the saves are done by then
            // or were cut short by SIGKILL. The bound only absorbs a lagging srun.
            auto saved = rank_files(dirs[i] + "/saved", 4);
            wait_for_files(saved, 5s);
            for (int rank = 0; rank < 4; ++rank) {
                if (!std::filesystem::exists(saved[static_cast<std::size_t>(rank)])) {
                    lost.push_back(fmt::format("round {} rank {}:\n{}", first + static_cast<int>(i),
                                               rank, results[i].describe()));
                }
            }
        }
    }
    EXPECT_TRUE(lost.empty()) << lost.size() << " of " << k_rounds * 4
                              << " saves lost under proctrack/" << cluster().options().proctrack
                              << "; the first:\n"
                              << (lost.empty() ? "" : lost.front());
}

// The same stop, 4 jobs at once, three times: once srun has returned, no scratch
// directory of the job's ($TMPDIR/ddprun-XXXXXX, one per agent) is left, whatever
// the ProctrackType. (The next ddprun's sweep is for a SIGKILLed agent; a clean
// stop must not need it.) Jobs 0 and 1 of each round get scancel --signal=USR1
// first (every worker counts its one copy), as a job told to checkpoint and then
// cancelled sees it; jobs 2 and 3 only the scancel.
class SlurmScratch : public SlurmTest {
  protected:
    void expect_no_scratch_left() {
        constexpr int k_at_once = 4;
        for (int round = 0; round < 3; ++round) {
            std::vector<std::unique_ptr<DdprunProcess>> sruns;
            std::vector<std::string> dirs, ids;
            for (int job = 0; job < k_at_once; ++job) {
                const std::string dir = path(fmt::format("scratch{}.{}", round, job));
                std::filesystem::create_directories(dir + "/tmp");
                for (const auto& own : {dir, dir + "/tmp"})
                    std::filesystem::permissions(own, std::filesystem::perms::all);
                const std::string name = new_job_name();
                sruns.push_back(start_client(
                    "srun", srun_two_nodes(name, concat({{"env", "TMPDIR=" + dir + "/tmp"},
                                                         ddprun_job({"--nproc_per_node=2"},
                                                                    {"count-signal", "SIGUSR1",
                                                                     dir + "/usr1.{rank}", "ready",
                                                                     dir + "/ready.{rank}",
                                                                     "save-on-term", "2"})}))));
                dirs.push_back(dir);
                ids.push_back(job_id(name));
            }
            for (std::size_t job = 0; job < dirs.size(); ++job) {
                ASSERT_TRUE(wait_for_files(rank_files(dirs[job] + "/ready", 4), k_job_guard / 2))
                    << sruns[job]->err_so_far();
                // One per agent while the job runs: the check below can fail.
                EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dirs[job] + "/tmp"),
                                        std::filesystem::directory_iterator()),
                          2)
                    << "scratch directories under the job's $TMPDIR while it runs";
            }
            {
                const std::vector<std::string> first_two(ids.begin(), ids.begin() + 2);
                auto signalled =
                    cluster().client(concat({{"scancel", "--signal=USR1"}, first_two}));
                EXPECT_EQ(signalled.exit_code, 0) << signalled.describe();
                for (const auto& dir : {dirs[0], dirs[1]})
                    EXPECT_TRUE(wait_until(
                        [&] {
                            for (int rank = 0; rank < 4; ++rank)
                                if (read_text_file(fmt::format("{}/usr1.{}", dir, rank)).empty())
                                    return false;
                            return true;
                        },
                        10s))
                        << "not every worker of " << dir << " got SIGUSR1";
            }
            auto cancelled = cluster().client(concat({{"scancel"}, ids}));
            EXPECT_EQ(cancelled.exit_code, 0) << cancelled.describe();
            for (std::size_t job = 0; job < dirs.size(); ++job) {
                auto result = sruns[job]->wait();
                std::vector<std::string> left;
                for (const auto& entry : std::filesystem::directory_iterator(dirs[job] + "/tmp"))
                    left.push_back(entry.path().filename().string());
                EXPECT_TRUE(left.empty())
                    << "round " << round << " job " << job << ": " << left.size()
                    << " left in $TMPDIR, e.g. " << (left.empty() ? "" : left.front())
                    << ", under proctrack/" << cluster().options().proctrack << "\n"
                    << result.describe();
            }
        }
    }
};

TEST_F(SlurmScratch, ScancelWithOrWithoutSignalUsr1FirstLeavesNoScratchDirectory) {
    expect_no_scratch_left();
}

// --- 6: jobs and steps that share the nodes ------------------------------------------

// Two jobs (or steps) at once: each worker prints its world, reports ready and
// waits for the test's go, which comes once all 8 workers of both are up, so
// the two certainly overlap. If one of them fails before that (two worlds that
// collide), the go comes at once and the test fails on what each printed,
// instead of the other job's workers waiting out their own bound.
class TwoWorlds {
  public:
    explicit TwoWorlds(const std::string& dir)
        : m_a(dir + "/a"), m_b(dir + "/b"), m_go(dir + "/go") {
        for (const auto& own : {m_a, m_b}) {
            std::filesystem::create_directory(own);
            std::filesystem::permissions(own, std::filesystem::perms::all);
        }
    }
    const std::string& a() const { return m_a; }
    const std::string& b() const { return m_b; }

    std::vector<std::string> worker(const std::string& own) const {
        return {"env",
                "getenv",
                "SLURM_JOB_ID",
                "getenv",
                "SLURM_STEP_ID",
                "ready",
                own + "/ready.{rank}",
                "wait-file",
                m_go};
    }
    // Waits (bounded) until all 8 workers are ready or `ended` says one of the
    // two is over; then lets them go. True when all 8 were up at once.
    bool release(const std::function<bool()>& ended) const {
        auto all = concat({rank_files(m_a + "/ready", 4), rank_files(m_b + "/ready", 4)});
        bool together = false;
        wait_until(
            [&] {
                together = std::all_of(all.begin(), all.end(), [](const std::string& path) {
                    return std::filesystem::exists(path);
                });
                return together || ended();
            },
            k_job_guard / 2);
        write_text_file(m_go, "");
        return together;
    }

  private:
    std::string m_a;
    std::string m_b;
    std::string m_go;
};

TEST_F(SlurmSharing, TwoJobsAtOnceOnTheSameNodesKeepTheirOwnWorlds) {
    TwoWorlds worlds(m_dir);
    auto job_a = start_client("srun",
                              srun_two_nodes(new_job_name(), ddprun_job({"--nproc_per_node=2"},
                                                                        worlds.worker(worlds.a()))),
                              k_sharing_guard);
    auto job_b = start_client("srun",
                              srun_two_nodes(new_job_name(), ddprun_job({"--nproc_per_node=2"},
                                                                        worlds.worker(worlds.b()))),
                              k_sharing_guard);
    // A task that failed (srun says so at once) or a job that ended.
    bool together = worlds.release([&] {
        return contains(job_a->err_so_far(), "srun: error:") ||
               contains(job_b->err_so_far(), "srun: error:") || job_a->reap_if_exited() ||
               job_b->reap_if_exited();
    });
    auto results = wait_all({job_a.get(), job_b.get()});
    std::string both =
        fmt::format("job A:\n{}\njob B:\n{}", results[0].describe(), results[1].describe());
    EXPECT_TRUE(together) << "the two jobs' workers were never all up at once\n" << both;
    ASSERT_EQ(results[0].exit_code, 0) << both;
    ASSERT_EQ(results[1].exit_code, 0) << both;
    expect_one_world(results[0].out, 4, 2, {"SLURM_JOB_ID"}, "job A");
    expect_one_world(results[1].out, 4, 2, {"SLURM_JOB_ID"}, "job B");
    RankEnv env_a = env_by_rank(results[0].out);
    RankEnv env_b = env_by_rank(results[1].out);
    EXPECT_NE(env_a[0]["SLURM_JOB_ID"], env_b[0]["SLURM_JOB_ID"]);
    EXPECT_NE(env_a[0]["MASTER_PORT"], env_b[0]["MASTER_PORT"]) << "two jobs, one MASTER_PORT";
}

TEST_F(SlurmSharing, TwoExactStepsOfOneAllocationAtOnceKeepTheirOwnWorlds) {
    TwoWorlds worlds(m_dir);
    // Inside the allocation: both steps at once, each writing its exit code
    // when it ends (`exit` in its directory) and its output beside it.
    auto step = [&](const std::string& own) {
        return fmt::format(
            "(srun --exact -N2 -n2 --ntasks-per-node=1 {} >{}/out 2>{}/err; echo $? >{}/exit) &",
            fmt::join(ddprun_job({"--nproc_per_node=2"}, worlds.worker(own)), " "), own, own, own);
    };
    std::string script = path("steps.sh");
    write_text_file(
        script, fmt::format("#!/bin/sh\n{}\n{}\nwait\n", step(worlds.a()), step(worlds.b())), 0755);
    auto salloc = start_client(
        "salloc",
        {"-N2", "--ntasks-per-node=2", "-J", new_job_name(), "-t", "2", "/bin/sh", script},
        k_sharing_guard);
    bool together = worlds.release([&] {
        for (const auto& own : {worlds.a(), worlds.b()}) {
            if (std::filesystem::exists(own + "/exit") ||
                contains(read_text_file(own + "/err"), "srun: error:")) {
                return true;
            }
        }
        return salloc->reap_if_exited();
    });
    auto r = salloc->wait();
    std::string out_a = read_text_file(worlds.a() + "/out");
    std::string out_b = read_text_file(worlds.b() + "/out");
    std::string both = fmt::format(
        "salloc:\n{}\n--- step A (exit {}) stderr ---\n{}\n--- step B (exit {}) stderr ---\n{}",
        r.describe(), read_text_file(worlds.a() + "/exit"), read_text_file(worlds.a() + "/err"),
        read_text_file(worlds.b() + "/exit"), read_text_file(worlds.b() + "/err"));
    EXPECT_TRUE(together) << "the two steps' workers were never all up at once\n" << both;
    ASSERT_EQ(r.exit_code, 0) << both;
    ASSERT_EQ(read_text_file(worlds.a() + "/exit"), "0\n") << both;
    ASSERT_EQ(read_text_file(worlds.b() + "/exit"), "0\n") << both;
    expect_one_world(out_a, 4, 2, {"SLURM_JOB_ID", "SLURM_STEP_ID"}, "step A");
    expect_one_world(out_b, 4, 2, {"SLURM_JOB_ID", "SLURM_STEP_ID"}, "step B");
    RankEnv env_a = env_by_rank(out_a);
    RankEnv env_b = env_by_rank(out_b);
    EXPECT_EQ(env_a[0]["SLURM_JOB_ID"], env_b[0]["SLURM_JOB_ID"]) << "one allocation";
    EXPECT_NE(env_a[0]["SLURM_STEP_ID"], env_b[0]["SLURM_STEP_ID"]);
    EXPECT_NE(env_a[0]["MASTER_PORT"], env_b[0]["MASTER_PORT"]) << "two steps, one MASTER_PORT";
}

// --- 7: node 0's name does not resolve ----------------------------------------------------

TEST_F(SlurmNames, UnresolvableFirstNodeEndsEveryNodeWithOneLine) {
    // ddprun runs in a mount namespace of its own where /etc/hosts lacks node
    // 0's name (n1); Slurm itself reaches its nodes by address and is unaffected.
    std::string unshare = find_program("unshare");
    if (unshare.empty()) GTEST_SKIP() << "unshare not found (util-linux)";
    auto probe = run_command({unshare, "-m", "/bin/true"});
    if (probe.exit_code != 0) GTEST_SKIP() << "unshare -m does not work here: " << probe.err;
    std::string hosts = path("hosts-without-" + cluster().nodes()[0]);
    std::string text;
    for (const auto& line : split_lines(read_text_file("/etc/hosts"))) {
        if (!contains(line, std::string(k_hosts_marker))) text += line + "\n";
    }
    text += "127.0.0.1 " + cluster().nodes()[1] + "\n";
    write_text_file(hosts, text);

    auto r = run_client(
        "srun",
        concat({{"--label"},
                srun_two_nodes(
                    new_job_name(),
                    concat({{unshare, "-m", "/bin/sh", "-c",
                             "mount --bind \"$0\" /etc/hosts && exec \"$@\"", hosts},
                            ddprun_job({"--nproc_per_node=2"},
                                       {"ready", m_dir + "/ready.{rank}", "sleep", "300"})}))}),
        k_resolve_guard);
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_LT(r.elapsed, k_resolve_bound) << r.describe();
    const auto& nodes = cluster().nodes();
    for (int task = 0; task < 2; ++task) {
        EXPECT_TRUE(contains(r.err, fmt::format("{}: task {}: Exited with exit code 2",
                                                nodes[static_cast<std::size_t>(task)], task)))
            << r.describe();
        // srun --label: "<task>: <line>"; that node's own lines.
        std::vector<std::string> lines;
        for (const auto& line : non_empty_lines(r.out + r.err)) {
            std::string label = fmt::format("{}: ", task);
            if (line.starts_with(label)) lines.push_back(line.substr(label.size()));
        }
        auto errors = std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
            return contains(line, "does not resolve") && contains(line, "--master_addr");
        });
        EXPECT_EQ(errors, 1) << "node " << task << ":\n" << r.describe();
    }
    EXPECT_TRUE(started_workers().empty()) << "a worker started:\n" << r.describe();
}

}  // namespace
}  // namespace ddprun_it

namespace ddprun_it {
namespace {

// --- the harness itself ---------------------------------------------------------------------

TEST(SlurmHarness, AClusterThatCannotStartSaysWhyAndLeavesNothingBehind) {
    std::string why_not;
    if (!shared_slurm_cluster(why_not)) GTEST_SKIP() << why_not;
    // A second cluster beside the shared one (ports of its own, the same node
    // names), whose slurmd cannot load its proctrack plugin.
    SlurmCluster broken(SlurmClusterOptions{.proctrack = "no_such_plugin"});
    std::string error = broken.start();
    EXPECT_FALSE(broken.running());
    EXPECT_TRUE(contains(error, "slurmd n") && contains(error, "exited during start-up") &&
                contains(error, "proctrack/no_such_plugin"))
        << error;
    // Nothing of it runs, and only the shared cluster's line is in /etc/hosts.
    std::vector<ProcessInfo> left;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        std::string name = entry.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        auto info = process_info(static_cast<pid_t>(std::stol(name)));
        if (info && info->state != 'Z' && contains(info->cmdline, broken.dir()))
            left.push_back(*info);
    }
    EXPECT_TRUE(left.empty()) << describe(left);
    EXPECT_EQ(count_occurrences(read_text_file("/etc/hosts"), k_hosts_marker), 1u)
        << read_text_file("/etc/hosts");
    if (!HasFailure()) std::filesystem::remove_all(broken.dir());
}

// `ddprun status` with no flag at all inside the allocation (its own step, as a
// user's `srun --overlap --jobid=ID ddprun status`): it finds the job's step (the
// first whose store answers at the allocation's first host) and shows both nodes.
TEST_F(SlurmStatus, NoFlagsInsideTheAllocationShowTheJob) {
    const std::string name = new_job_name();
    const std::string done = path("done");
    auto srun = start_client(
        "srun",
        srun_two_nodes(name, ddprun_job({"--nproc_per_node=2"},
                                        {"ready", path("ready.{rank}"), "wait-file", done})));
    for (int rank = 0; rank < 4; ++rank)
        ASSERT_TRUE(wait_for_file(path(fmt::format("ready.{}", rank)), k_job_guard / 2))
            << srun->err_so_far();
    const std::string id = job_id(name);
    RunResult status;
    ASSERT_TRUE(wait_until(
        [&] {
            status = run_client("srun",
                                {"--overlap", "--jobid=" + id, "-N1", "-n1", k_ddprun, "status"});
            return contains(status.out, "state:      running round 0");
        },
        40s))
        << status.describe();
    EXPECT_TRUE(contains(status.out, fmt::format("job 'slurm-{}.0' (the c10d store at ", id)))
        << status.out;
    EXPECT_TRUE(contains(status.out, "nodes:      2 (world size 4)")) << status.out;
    write_text_file(done, "");
    auto r = srun->wait();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    // An allocation without a ddprun job: one line, exit 1.
    auto none = run_client("srun", {"-N1", "-n1", "-t", "1", k_ddprun, "status"});
    EXPECT_EQ(none.exit_code, 1) << none.describe();
    EXPECT_TRUE(contains(none.err, "ddprun status: no ddprun job in Slurm job ")) << none.err;
}

}  // namespace

}  // namespace ddprun_it
