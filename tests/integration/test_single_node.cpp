// Black-box tests of a single-node ddprun: the real binary runs fake_worker
// (or a script) like a user would, and the tests check what a user relies on:
// the worker environment, devices, output, exit codes, the failure summary,
// signals and that no process of the job outlives ddprun.

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "ddprun/base/elf_dependencies.hpp"
#include "harness.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

// ddprun flags, then fake_worker and its actions.
std::vector<std::string> job(std::vector<std::string> flags,
                             const std::vector<std::string>& actions) {
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), actions.begin(), actions.end());
    return flags;
}

std::vector<std::string> lines_of(const std::map<int, std::vector<std::string>>& by_rank,
                                  int rank) {
    auto it = by_rank.find(rank);
    return it == by_rank.end() ? std::vector<std::string>{} : it->second;
}

std::vector<std::string> numbered(const std::string& what, int count, int rank) {
    std::vector<std::string> lines;
    for (int i = 0; i < count; ++i) lines.push_back(fmt::format("{} {} rank {}", what, i, rank));
    return lines;
}

class SingleNodeBasics : public IntegrationTest {};
class SingleNodeEnv : public IntegrationTest {};
class SingleNodeDevices : public IntegrationTest {};
class SingleNodeOutput : public IntegrationTest {};
class SingleNodeFailures : public IntegrationTest {};
class SingleNodeRestarts : public IntegrationTest {};
class SingleNodeSignals : public IntegrationTest {};
class SingleNodeCleanup : public IntegrationTest {};
class SingleNodeProgram : public IntegrationTest {};
class SingleNodeDryRun : public IntegrationTest {};
class SingleNodePython : public IntegrationTest {};

// --- basics -----------------------------------------------------------------

TEST_F(SingleNodeBasics, AllWorkersSucceed) {
    auto r = run(job({"--nproc_per_node=3"}, {"print", "2"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    ASSERT_EQ(by_rank.size(), 3u) << r.describe();
    for (int rank = 0; rank < 3; ++rank) {
        EXPECT_EQ(lines_of(by_rank, rank), numbered("line", 2, rank)) << r.describe();
    }
    // ddprun's stdout carries worker output only.
    for (const auto& line : non_empty_lines(r.out)) {
        EXPECT_TRUE(split_prefix(line)) << "unprefixed stdout line: " << line;
    }
    EXPECT_EQ(recorded_pids().size(), 3u);
}

// The version and commit, then what jobs would load later: the store plugin
// and its libtorch, the OpenSSL plugin and its OpenSSL, found beside the
// binary in the build tree (tests/install/install_test.sh checks an install).
TEST_F(SingleNodeBasics, VersionPrintsNameAndVersion) {
    auto r = run({"--version"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto lines = non_empty_lines(r.out);
    ASSERT_EQ(lines.size(), 6u) << r.describe();
    EXPECT_TRUE(lines[0].starts_with("ddprun ")) << lines[0];
    EXPECT_NE(lines[0].find(" (commit "), std::string::npos) << lines[0];
    EXPECT_TRUE(lines[1].starts_with("store plugin: ")) << lines[1];
    EXPECT_TRUE(lines[2].starts_with("libtorch: ")) << lines[2];
    // The libtorch the plugin was compiled against, read from the plugin
    // file itself: what a mismatch with the loaded libtorch comes down to.
    EXPECT_TRUE(lines[3].starts_with("store plugin built against: libtorch ")) << lines[3];
    const std::string plugin =
        (std::filesystem::path(ddprun_test::build_paths::ddprun_binary).parent_path() /
         "libddprun_openssl.so")
            .string();
    EXPECT_EQ(lines[4], "openssl plugin: " + plugin) << r.describe();
    EXPECT_TRUE(lines[5].starts_with("OpenSSL: /")) << lines[5];
    EXPECT_NE(lines[5].find("libcrypto.so"), std::string::npos) << lines[5];
    EXPECT_TRUE(r.out.ends_with("\n")) << r.describe();
}

// What keeps the start within reach of /bin/true (bench/run.sh (m)): the
// binary links no OpenSSL, whose libcrypto alone takes 1.7 ms to load; the
// plugin does, and is loaded by etcd jobs and job secrets only.
TEST_F(SingleNodeBasics, TheBinaryLinksNoOpenSsl) {
    auto dependencies = ddprun::read_elf_dependencies(ddprun_test::build_paths::ddprun_binary);
    ASSERT_TRUE(dependencies) << dependencies.error();
    for (const auto& name : dependencies->needed) {
        EXPECT_FALSE(name.starts_with("libssl") || name.starts_with("libcrypto")) << name;
    }
    EXPECT_FALSE(dependencies->needed.empty())
        << "read no DT_NEEDED of " << ddprun_test::build_paths::ddprun_binary;
}

// --- worker environment -------------------------------------------------------

TEST_F(SingleNodeEnv, EveryWorkerGetsTheContractVariables) {
    auto r = run(job({"--nproc_per_node=2"}, {"env"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE(fmt::format("rank {}", rank));
        auto& e = env[rank];
        EXPECT_EQ(e["RANK"], std::to_string(rank));
        EXPECT_EQ(e["LOCAL_RANK"], std::to_string(rank));
        EXPECT_EQ(e["WORLD_SIZE"], "2");
        EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
        EXPECT_EQ(e["GROUP_RANK"], "0");
        EXPECT_EQ(e["NODE_RANK"], "0");
        EXPECT_EQ(e["GROUP_WORLD_SIZE"], "1");
        EXPECT_EQ(e["NNODES"], "1");
        EXPECT_EQ(e["ROLE_NAME"], "default");
        EXPECT_EQ(e["ROLE_RANK"], std::to_string(rank));
        EXPECT_EQ(e["ROLE_WORLD_SIZE"], "2");
        EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
        int port = std::atoi(e["MASTER_PORT"].c_str());
        EXPECT_GT(port, 0) << e["MASTER_PORT"];
        EXPECT_LT(port, 65536) << e["MASTER_PORT"];
        EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
        EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "0");
        EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "none");
        EXPECT_NE(e["TORCHELASTIC_ERROR_FILE"], "<unset>");
        EXPECT_FALSE(e["TORCHELASTIC_ERROR_FILE"].empty());
        EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
        EXPECT_EQ(e["PYTHONUNBUFFERED"], "1");
        EXPECT_EQ(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
        // As torchrun 2.14: the deprecated name is not set, the stop signals are named.
        EXPECT_EQ(e["NCCL_ASYNC_ERROR_HANDLING"], "<unset>");
        EXPECT_EQ(e["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
    }
    EXPECT_EQ(env[0]["MASTER_PORT"], env[1]["MASTER_PORT"]);
    EXPECT_NE(env[0]["TORCHELASTIC_ERROR_FILE"], env[1]["TORCHELASTIC_ERROR_FILE"])
        << "each worker needs its own error file";
}

TEST_F(SingleNodeEnv, RoleRunIdAndMaxRestartsReachTheWorker) {
    auto r = run(job(
        {"--nproc_per_node=1", "--role=trainer", "--rdzv_id=job42", "--max_restarts=3"}, {"env"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 1u) << r.describe();
    EXPECT_EQ(env[0]["ROLE_NAME"], "trainer");
    EXPECT_EQ(env[0]["TORCHELASTIC_RUN_ID"], "job42");
    EXPECT_EQ(env[0]["TORCHELASTIC_MAX_RESTARTS"], "3");
    // One worker: OMP_NUM_THREADS is left alone.
    EXPECT_EQ(env[0]["OMP_NUM_THREADS"], "<unset>");
}

TEST_F(SingleNodeEnv, InheritedValuesAreKept) {
    RunOptions options;
    options.env = {{"OMP_NUM_THREADS", "7"},
                   {"PYTHONUNBUFFERED", "0"},
                   {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"},
                   {"SOME_USER_VARIABLE", "kept"}};
    auto r = run(job({"--nproc_per_node=2"}, {"env"}), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    for (int rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(env[rank]["OMP_NUM_THREADS"], "7");
        EXPECT_EQ(env[rank]["PYTHONUNBUFFERED"], "0");
        EXPECT_EQ(env[rank]["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0");
    }
}

TEST_F(SingleNodeEnv, GivenMasterPortIsUsed) {
    int port = free_port();
    auto r = run(job({"--nproc_per_node=2", fmt::format("--master_port={}", port)}, {"env"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    EXPECT_EQ(env[0]["MASTER_PORT"], std::to_string(port));
    EXPECT_EQ(env[1]["MASTER_PORT"], std::to_string(port));
}

TEST_F(SingleNodeEnv, SimultaneousJobsGetDifferentPorts) {
    // Both jobs are held running (wait-file) until both have started, so the
    // two ports are chosen while the other job exists.
    std::string go = path("go");
    auto first = start(job({"--nproc_per_node=1"}, {"env", "ready", path("a"), "wait-file", go}));
    auto second = start(job({"--nproc_per_node=1"}, {"env", "ready", path("b"), "wait-file", go}));
    ASSERT_TRUE(wait_for_file(path("a"), 30s)) << first->err_so_far();
    ASSERT_TRUE(wait_for_file(path("b"), 30s)) << second->err_so_far();
    write_text_file(go, "");
    auto r1 = first->wait();
    auto r2 = second->wait();
    ASSERT_EQ(r1.exit_code, 0) << r1.describe();
    ASSERT_EQ(r2.exit_code, 0) << r2.describe();
    auto port1 = env_by_rank(r1.out)[0]["MASTER_PORT"];
    auto port2 = env_by_rank(r2.out)[0]["MASTER_PORT"];
    EXPECT_FALSE(port1.empty());
    EXPECT_NE(port1, port2) << "two jobs on one machine must not share MASTER_PORT";
}

// --- devices ------------------------------------------------------------------

RunOptions with_devices(const std::string& devices) {
    RunOptions options;
    options.env = {{"CUDA_VISIBLE_DEVICES", devices}};
    return options;
}

TEST_F(SingleNodeDevices, EachWorkerSeesOnlyItsOwnDevice) {
    auto r = run(job({"--nproc_per_node=4"}, {"env"}), with_devices("4,5,6,7"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 4u) << r.describe();
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_EQ(env[rank]["CUDA_VISIBLE_DEVICES"], std::to_string(4 + rank));
        EXPECT_EQ(env[rank]["LOCAL_RANK"], std::to_string(rank));
    }
}

TEST_F(SingleNodeDevices, NprocGpuStartsOneWorkerPerDevice) {
    auto r = run(job({"--nproc_per_node=gpu"}, {"env"}), with_devices("4,5,6,7"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 4u) << r.describe();
    for (int rank = 0; rank < 4; ++rank) {
        EXPECT_EQ(env[rank]["WORLD_SIZE"], "4");
        EXPECT_EQ(env[rank]["CUDA_VISIBLE_DEVICES"], std::to_string(4 + rank));
    }
}

TEST_F(SingleNodeDevices, AllDevicesGivesEveryWorkerTheWholeList) {
    auto r = run(job({"--nproc_per_node=2", "--all-devices"}, {"env"}), with_devices("4,5,6,7"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    EXPECT_EQ(env[0]["CUDA_VISIBLE_DEVICES"], "4,5,6,7");
    EXPECT_EQ(env[1]["CUDA_VISIBLE_DEVICES"], "4,5,6,7");
}

TEST_F(SingleNodeDevices, UuidEntriesAreKeptVerbatim) {
    const std::string gpu = "GPU-8a3f2c1e-5b6d-4e7f-9a0b-1c2d3e4f5a6b";
    const std::string mig = "MIG-0e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7";
    auto r = run(job({"--nproc_per_node=2"}, {"env"}), with_devices(gpu + "," + mig));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    EXPECT_EQ(env[0]["CUDA_VISIBLE_DEVICES"], gpu);
    EXPECT_EQ(env[1]["CUDA_VISIBLE_DEVICES"], mig);
}

TEST_F(SingleNodeDevices, MoreWorkersThanDevicesIsAUsageError) {
    auto r = run(job({"--nproc_per_node=5"}, {"print", "1"}), with_devices("4,5,6,7"));
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    auto own = ddprun_own_lines(r.err);
    ASSERT_EQ(own.size(), 1u) << "expected one line naming both numbers\n" << r.describe();
    EXPECT_TRUE(contains(own[0], "5") && contains(own[0], "4")) << own[0];
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

TEST_F(SingleNodeDevices, VirtualLocalRankGivesLocalRankZeroAndOwnDevice) {
    auto r =
        run(job({"--nproc_per_node=3", "--virtual_local_rank"}, {"env"}), with_devices("4,5,6,7"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 3u) << r.describe();
    for (int rank = 0; rank < 3; ++rank) {
        EXPECT_EQ(env[rank]["LOCAL_RANK"], "0");
        EXPECT_EQ(env[rank]["RANK"], std::to_string(rank));
        EXPECT_EQ(env[rank]["CUDA_VISIBLE_DEVICES"], std::to_string(4 + rank));
    }
}

TEST_F(SingleNodeDevices, WithoutDevicesTheVariableIsLeftUnset) {
    if (machine_gpu_count() > 0) GTEST_SKIP() << "this machine has GPUs";
    auto r = run(job({"--nproc_per_node=2"}, {"env"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    EXPECT_EQ(env[0]["CUDA_VISIBLE_DEVICES"], "<unset>");
    EXPECT_EQ(env[1]["CUDA_VISIBLE_DEVICES"], "<unset>");
}

TEST_F(SingleNodeDevices, MachineGpusAreDiscovered) {
    int gpus = machine_gpu_count();
    if (gpus == 0) GTEST_SKIP() << "no NVIDIA GPU on this machine";
    RunOptions options;
    options.hide_machine_gpus = false;
    auto r = run(job({"--nproc_per_node=gpu"}, {"env"}), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), static_cast<std::size_t>(gpus)) << r.describe();
    for (int rank = 0; rank < gpus; ++rank) {
        EXPECT_EQ(env[rank]["CUDA_VISIBLE_DEVICES"], std::to_string(rank));
    }
}

// --- program arguments --------------------------------------------------------

TEST_F(SingleNodeProgram, ArgumentsAfterTheProgramAreUntouched) {
    const std::vector<std::string> program_args = {
        "--lr", "0.1", "-v", "--", "x", "--nproc_per_node=5", "--version", "a b", ""};
    std::vector<std::string> actions{"args"};
    actions.insert(actions.end(), program_args.begin(), program_args.end());
    auto r = run(job({"--nproc_per_node=1"}, actions));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::vector<std::string> expected{fmt::format("argc={}", program_args.size() + 2),
                                      "argv[1]=args"};
    for (std::size_t i = 0; i < program_args.size(); ++i) {
        expected.push_back(fmt::format("argv[{}]={}", i + 2, program_args[i]));
    }
    EXPECT_EQ(lines_of(lines_by_rank(r.out), 0), expected) << r.describe();
}

TEST_F(SingleNodeProgram, ShellScriptRunsDirectly) {
    std::string script = path("run.sh");
    write_text_file(script, "#!/bin/sh\necho \"hello from $RANK of $WORLD_SIZE: $*\"\n", 0755);
    auto r = run({"--nproc_per_node=2", script, "one", "two"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    EXPECT_EQ(lines_of(by_rank, 0), std::vector<std::string>{"hello from 0 of 2: one two"});
    EXPECT_EQ(lines_of(by_rank, 1), std::vector<std::string>{"hello from 1 of 2: one two"});
}

// A single-node job never needs the rendezvous store, so the agent (the
// worker's parent) must not have loaded libtorch: ~0.4 s and ~160 MB saved.
TEST_F(SingleNodeProgram, AgentDoesNotLoadLibtorch) {
    std::string script = path("maps.sh");
    write_text_file(script,
                    "#!/bin/sh\n"
                    "grep -q '' /proc/$PPID/maps || { echo UNREADABLE; exit 1; }\n"
                    "if grep -q libtorch /proc/$PPID/maps; then echo LOADED; else echo CLEAN; fi\n",
                    0755);
    auto r = run({"--nproc_per_node=1", script});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(lines_of(lines_by_rank(r.out), 0), std::vector<std::string>{"CLEAN"}) << r.describe();
}

// --cpu-binding pins each worker (in the child, before exec) to its share of
// the CPUs ddprun may use, and OMP_NUM_THREADS follows that share.
TEST_F(SingleNodeProgram, CpuBindingPinsEachWorkerToItsShare) {
    std::string script = path("affinity.sh");
    write_text_file(script,
                    "#!/bin/sh\n"
                    "echo \"$(grep Cpus_allowed_list /proc/self/status | cut -f2) "
                    "omp=$OMP_NUM_THREADS\"\n",
                    0755);
    auto plan = run({"--dry-run", "--cpu-binding", "--nproc_per_node=2", script});
    ASSERT_EQ(plan.exit_code, 0) << plan.describe();
    auto r = run({"--cpu-binding", "--nproc_per_node=2", script});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    std::set<std::string> seen;
    for (int rank = 0; rank < 2; ++rank) {
        auto lines = lines_of(by_rank, rank);
        ASSERT_EQ(lines.size(), 1u) << r.describe();
        // The dry-run table shows the same CPUs the worker was really given.
        std::string cpus = lines[0].substr(0, lines[0].find(' '));
        EXPECT_TRUE(contains(plan.out, "  " + cpus + " ")) << cpus << "\n" << plan.describe();
        seen.insert(cpus);
    }
    EXPECT_EQ(seen.size(), 2u) << "the workers must get different CPUs\n" << r.describe();
}

TEST_F(SingleNodeProgram, MissingProgramExits127) {
    for (std::string program : {path("no/such/program"), std::string("ddprun-no-such-program")}) {
        SCOPED_TRACE(program);
        auto r = run({"--nproc_per_node=2", program, "--flag"});
        EXPECT_EQ(r.exit_code, 127) << r.describe();
        auto own = ddprun_own_lines(r.err);
        ASSERT_EQ(own.size(), 1u) << "expected a one-line message\n" << r.describe();
        EXPECT_TRUE(contains(own[0], program)) << own[0];
    }
}

TEST_F(SingleNodeProgram, NotExecutableExits126) {
    std::string program = path("not_executable.sh");
    write_text_file(program, "#!/bin/sh\necho should not run\n", 0644);
    auto r = run({"--nproc_per_node=2", program});
    EXPECT_EQ(r.exit_code, 126) << r.describe();
    auto own = ddprun_own_lines(r.err);
    ASSERT_EQ(own.size(), 1u) << "expected a one-line message\n" << r.describe();
    EXPECT_TRUE(contains(own[0], program)) << own[0];
    EXPECT_FALSE(contains(r.out, "should not run"));
}

// --- output -------------------------------------------------------------------

TEST_F(SingleNodeOutput, StdoutAndStderrArePrefixedOnTheirOwnStreams) {
    auto r = run(job({"--nproc_per_node=2"}, {"print", "3", "stderr", "2"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    auto err = lines_by_rank(r.err);
    for (int rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(lines_of(out, rank), numbered("line", 3, rank)) << r.describe();
        EXPECT_EQ(lines_of(err, rank), numbered("err", 2, rank)) << r.describe();
    }
}

TEST_F(SingleNodeOutput, EmptyLogPrefixDisablesIt) {
    auto r = run(job({"--nproc_per_node=2", "--log-prefix="}, {"print", "2"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto lines = non_empty_lines(r.out);
    std::sort(lines.begin(), lines.end());
    std::vector<std::string> expected = numbered("line", 2, 0);
    for (auto& line : numbered("line", 2, 1)) expected.push_back(line);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(lines, expected) << r.describe();
}

TEST_F(SingleNodeOutput, LogPrefixTemplateIsExpanded) {
    auto r = run(job({"--nproc_per_node=2", "--role=trainer", "--log-prefix={role}{local_rank}> "},
                     {"print", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto lines = non_empty_lines(r.out);
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines,
              (std::vector<std::string>{"trainer0> line 0 rank 0", "trainer1> line 0 rank 1"}))
        << r.describe();
}

TEST_F(SingleNodeOutput, LocalRanksFilterShowsOnlyThoseRanks) {
    auto r =
        run(job({"--nproc_per_node=3", "--local_ranks_filter=1"}, {"print", "2", "stderr", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    auto err = lines_by_rank(r.err);
    EXPECT_EQ(out.size(), 1u) << r.describe();
    EXPECT_EQ(lines_of(out, 1), numbered("line", 2, 1)) << r.describe();
    EXPECT_EQ(err.size(), 1u) << r.describe();
    EXPECT_EQ(lines_of(err, 1), numbered("err", 1, 1)) << r.describe();
}

TEST_F(SingleNodeOutput, LogDirHoldsTheFullUnprefixedOutputOfEveryRank) {
    std::string log_dir = path("logs");
    auto r = run(job(
        {"--nproc_per_node=2", "--log_dir", log_dir, "--rdzv_id=job7", "--local_ranks_filter=1"},
        {"print", "2", "stderr", "1", "partial", "tail"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE(fmt::format("rank {}", rank));
        std::string dir = fmt::format("{}/job7/attempt_0/{}", log_dir, rank);
        ASSERT_TRUE(std::filesystem::exists(dir + "/stdout.log")) << r.describe();
        EXPECT_EQ(read_text_file(dir + "/stdout.log"),
                  fmt::format("line 0 rank {0}\nline 1 rank {0}\ntail", rank));
        EXPECT_EQ(read_text_file(dir + "/stderr.log"), fmt::format("err 0 rank {}\n", rank));
    }
    // The filter still applies to the console.
    EXPECT_EQ(lines_by_rank(r.out).count(0), 0u) << r.describe();
}

// torchrun's -r/--redirects: the chosen streams go to the log files only;
// per local rank with "LR:N,...".
TEST_F(SingleNodeOutput, RedirectsSendStreamsToFilesOnly) {
    std::string log_dir = path("logs");
    auto r = run(job({"--nproc_per_node=2", "--log_dir", log_dir, "--rdzv_id=r", "-r", "0:1,1:3"},
                     {"print", "1", "stderr", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    // Rank 0: stdout redirected, stderr still on the console. Rank 1: both redirected.
    EXPECT_EQ(lines_of(lines_by_rank(r.out), 0), std::vector<std::string>{}) << r.describe();
    EXPECT_EQ(lines_of(lines_by_rank(r.err), 0), std::vector<std::string>{"err 0 rank 0"})
        << r.describe();
    EXPECT_EQ(lines_by_rank(r.out).count(1) + lines_by_rank(r.err).count(1), 0u) << r.describe();
    for (int rank = 0; rank < 2; ++rank) {
        std::string dir = fmt::format("{}/r/attempt_0/{}", log_dir, rank);
        EXPECT_EQ(read_text_file(dir + "/stdout.log"), fmt::format("line 0 rank {}\n", rank));
        EXPECT_EQ(read_text_file(dir + "/stderr.log"), fmt::format("err 0 rank {}\n", rank));
    }
}

// torchrun's -t/--tee: the console and the files both get the streams.
TEST_F(SingleNodeOutput, TeeWritesConsoleAndFiles) {
    std::string log_dir = path("logs");
    auto r = run(job({"--nproc_per_node=1", "--log_dir", log_dir, "--rdzv_id=t", "-t", "3"},
                     {"print", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(lines_of(lines_by_rank(r.out), 0), std::vector<std::string>{"line 0 rank 0"});
    EXPECT_EQ(read_text_file(log_dir + "/t/attempt_0/0/stdout.log"), "line 0 rank 0\n");
}

// Without --log_dir, redirected output goes to a temporary directory that
// ddprun names (as torchrun does) and keeps.
TEST_F(SingleNodeOutput, RedirectsWithoutLogDirUseANamedTemporaryDirectory) {
    std::string tmp = path("tmp");
    std::filesystem::create_directories(tmp);
    RunOptions options;
    options.env = {{"TMPDIR", tmp}};
    auto r = run(job({"--nproc_per_node=1", "-r", "3"}, {"print", "1"}), options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(lines_by_rank(r.out).count(0), 0u) << r.describe();
    std::string named;
    for (const auto& entry : std::filesystem::directory_iterator(tmp))
        if (entry.path().filename().string().starts_with("ddprun_logs_")) named = entry.path();
    ASSERT_FALSE(named.empty()) << r.describe();
    EXPECT_TRUE(contains(r.err, named)) << "the directory must be named\n" << r.describe();
    EXPECT_EQ(read_text_file(named + "/none/attempt_0/0/stdout.log"), "line 0 rank 0\n");
}

TEST_F(SingleNodeOutput, PartialLineShowsUpWhileTheWorkerRuns) {
    std::string go = path("go");
    auto ddprun = start(job({"--nproc_per_node=1"}, {"partial", "progress 42%", "wait-file", go}));
    // Generous: a partial line is due after ~100 ms; only a hang fails this.
    bool shown = ddprun->wait_for_output("[0]: progress 42%", 10s);
    write_text_file(go, "");
    auto r = ddprun->wait();
    EXPECT_TRUE(shown) << "a partial line must not wait for its newline\n" << r.describe();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(count_occurrences(r.out, "progress 42%"), 1u) << r.describe();
}

TEST_F(SingleNodeOutput, LastPartialLineOfACrashedWorkerIsPrinted) {
    auto r = run(
        job({"--nproc_per_node=1"}, {"print", "1", "partial", "last words", "raise", "SIGSEGV"}));
    EXPECT_EQ(r.exit_code, 139) << r.describe();
    EXPECT_EQ(lines_of(lines_by_rank(r.out), 0),
              (std::vector<std::string>{"line 0 rank 0", "last words"}))
        << r.describe();
}

TEST_F(SingleNodeOutput, FloodOfLinesArrivesWholePrefixedAndInOrder) {
    constexpr int k_workers = 8;
    constexpr int k_lines = 20000;
    auto r = run(
        job({fmt::format("--nproc_per_node={}", k_workers)}, {"flood", std::to_string(k_lines)}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::size_t unprefixed = 0;
    for (const auto& line : split_lines(r.out)) {
        if (!split_prefix(line)) ++unprefixed;
    }
    EXPECT_EQ(unprefixed, 0u) << "lines cut or merged across workers";
    auto by_rank = lines_by_rank(r.out);
    ASSERT_EQ(by_rank.size(), static_cast<std::size_t>(k_workers));
    for (int rank = 0; rank < k_workers; ++rank) {
        const auto& lines = by_rank[rank];
        ASSERT_EQ(lines.size(), static_cast<std::size_t>(k_lines)) << "rank " << rank;
        for (int i = 0; i < k_lines; ++i) {
            std::string expected = fmt::format("flood {} {} ", rank, i);
            expected.resize(99, 'x');
            ASSERT_EQ(lines[static_cast<std::size_t>(i)], expected) << "rank " << rank;
        }
    }
}

TEST_F(SingleNodeOutput, WorkerClosingStdoutIsFine) {
    auto r = run(job({"--nproc_per_node=2"}, {"print", "1", "stdout-close", "stderr", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto err = lines_by_rank(r.err);
    EXPECT_EQ(lines_of(err, 0), numbered("err", 1, 0)) << r.describe();
    EXPECT_EQ(lines_of(err, 1), numbered("err", 1, 1)) << r.describe();
}

// --- failures -----------------------------------------------------------------

// Every worker reports ready, then rank `failing` waits for the others and
// runs `failure`; the others sleep far longer than the hang guard.
std::vector<std::string> fail_while_others_sleep(const std::string& dir, int workers, int failing,
                                                 const std::vector<std::string>& failure) {
    std::vector<std::string> actions{"ready", dir + "/ready.{rank}"};
    std::string who = std::to_string(failing);
    for (int rank = 0; rank < workers; ++rank) {
        if (rank == failing) continue;
        for (const auto& a : {std::string("if-rank"), who, std::string("wait-file"),
                              fmt::format("{}/ready.{}", dir, rank)}) {
            actions.push_back(a);
        }
    }
    // `failure` holds actions of one argument each; every one is guarded.
    for (std::size_t i = 0; i + 1 < failure.size(); i += 2) {
        actions.insert(actions.end(), {"if-rank", who, failure[i], failure[i + 1]});
    }
    actions.insert(actions.end(), {"sleep", "300"});
    return actions;
}

TEST_F(SingleNodeFailures, FailingWorkerStopsTheOthersAndSetsTheExitCode) {
    auto r = run(job({"--nproc_per_node=3"}, fail_while_others_sleep(m_dir, 3, 1, {"exit", "3"})));
    ASSERT_FALSE(r.timed_out) << "the sleeping workers were not stopped\n" << r.describe();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
    auto own = ddprun_own_lines(r.err);
    std::string box = ddprun_messages(r.err);
    EXPECT_TRUE(contains(box, "root cause: rank 1 ")) << r.describe();
    EXPECT_TRUE(contains(box, "exit code: 3")) << r.describe();
    for (int rank : {0, 2}) {
        bool marked = std::any_of(own.begin(), own.end(), [&](const std::string& line) {
            return contains(line, fmt::format("rank {} ", rank)) && contains(line, "stopped");
        });
        EXPECT_TRUE(marked) << "rank " << rank << " should be listed as stopped\n" << r.describe();
    }
}

TEST_F(SingleNodeFailures, SegfaultExits139AndIsNamed) {
    auto r = run(
        job({"--nproc_per_node=2"}, fail_while_others_sleep(m_dir, 2, 0, {"raise", "SIGSEGV"})));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 139) << r.describe();
    std::string box = ddprun_messages(r.err);
    EXPECT_TRUE(contains(box, "root cause: rank 0 ")) << r.describe();
    EXPECT_TRUE(contains(box, "SIGSEGV")) << r.describe();
}

TEST_F(SingleNodeFailures, ErrorFileMessageIsInTheSummary) {
    const std::string message = "RuntimeError: CUDA out of memory (fake, from the error file)";
    auto r =
        run(job({"--nproc_per_node=2"},
                fail_while_others_sleep(m_dir, 2, 1, {"write-error-file", message, "exit", "1"})));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    std::string box = ddprun_messages(r.err);
    EXPECT_TRUE(contains(box, message)) << r.describe();
}

TEST_F(SingleNodeFailures, LastStderrLinesOfTheRootCauseAreInTheSummary) {
    auto r = run(job({"--nproc_per_node=2"},
                     fail_while_others_sleep(m_dir, 2, 0, {"stderr", "3", "exit", "4"})));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 4) << r.describe();
    // The worker's own (prefixed) lines do not count: the summary must quote them.
    std::string box = ddprun_messages(r.err);
    for (const auto& line : numbered("err", 3, 0)) {
        EXPECT_TRUE(contains(box, line)) << line << "\n" << r.describe();
    }
}

TEST_F(SingleNodeFailures, GrandchildOfAFailedWorkerIsStoppedToo) {
    auto r = run(job({"--nproc_per_node=2"}, {"if-rank", "0", "spawn-grandchild", "if-rank", "0",
                                              "exit", "6", "sleep", "300"}));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 6) << r.describe();
}

// --- restarts -----------------------------------------------------------------

TEST_F(SingleNodeRestarts, FailureInTheFirstRoundIsRetried) {
    auto r = run(job({"--nproc_per_node=2", "--max_restarts=2"},
                     {"env", "if-restart", "0", "if-rank", "1", "exit", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto by_rank = lines_by_rank(r.out);
    for (int rank = 0; rank < 2; ++rank) {
        const auto& lines = by_rank[rank];
        EXPECT_NE(std::find(lines.begin(), lines.end(), "TORCHELASTIC_RESTART_COUNT=1"),
                  lines.end())
            << "rank " << rank << " did not run in round 1\n"
            << r.describe();
        EXPECT_NE(std::find(lines.begin(), lines.end(), "TORCHELASTIC_MAX_RESTARTS=2"),
                  lines.end());
    }
    EXPECT_EQ(count_occurrences(r.out, "[1]: TORCHELASTIC_RESTART_COUNT=2"), 0u)
        << "no third round was needed\n"
        << r.describe();
}

TEST_F(SingleNodeRestarts, ExhaustedRestartsReportTheLastFailure) {
    auto r = run(job({"--nproc_per_node=1", "--max_restarts=1"}, {"env", "exit", "5"}));
    EXPECT_EQ(r.exit_code, 5) << r.describe();
    EXPECT_EQ(count_occurrences(r.out, "[0]: TORCHELASTIC_RESTART_COUNT="), 2u)
        << "expected the first run and one restart\n"
        << r.describe();
}

// --- signals ------------------------------------------------------------------

// Workers that say which signal reached them, report ready and then sleep
// far beyond the hang guard.
std::vector<std::string> sleepers(const std::string& dir, std::vector<std::string> setup) {
    setup.insert(setup.end(), {"ready", dir + "/ready.{rank}", "sleep", "300"});
    return setup;
}

void wait_ready(const std::string& dir, int workers, const DdprunProcess& ddprun) {
    for (int rank = 0; rank < workers; ++rank) {
        ASSERT_TRUE(wait_for_file(fmt::format("{}/ready.{}", dir, rank), 30s))
            << "worker " << rank << " never started\n"
            << ddprun.err_so_far();
    }
}

TEST_F(SingleNodeSignals, SigtermIsForwardedAndExits143) {
    auto ddprun = start(job({"--nproc_per_node=2"}, sleepers(m_dir, {"trap-exit", "SIGTERM"})));
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGTERM);
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 143) << r.describe();
    auto out = lines_by_rank(r.out);
    EXPECT_EQ(lines_of(out, 0), std::vector<std::string>{"got SIGTERM"}) << r.describe();
    EXPECT_EQ(lines_of(out, 1), std::vector<std::string>{"got SIGTERM"}) << r.describe();
}

// A signal sent to every process of the job (Slurm's proctrack/linuxproc,
// systemd's KillMode=control-group, `kill` of every pid) reaches ddprun's top
// process and its agent; each delivery is one event for the workers: SIGUSR1
// once, and SIGTERM one stop with its grace, never "twice, so kill".
class SingleNodeSignalToEveryProcess : public IntegrationTest,
                                       public ::testing::WithParamInterface<int> {};

TEST_P(SingleNodeSignalToEveryProcess, EachDeliveryIsOneEventForTheWorkers) {
    const auto delay = std::chrono::milliseconds(GetParam());
    auto ddprun =
        start(job({"--nproc_per_node=2"},
                  {"trap", "SIGUSR1", "ready", m_dir + "/ready.{rank}", "save-on-term", "2"}));
    wait_ready(m_dir, 2, *ddprun);
    if (HasFatalFailure()) return;
    auto agents = children_of(ddprun->pid());
    ASSERT_EQ(agents.size(), 1u) << "no agent process under ddprun " << ddprun->pid();
    // The delay under test between the two copies of each delivery, not a wait for an event.
    for (int signal : {SIGUSR1, SIGTERM}) {
        ::kill(ddprun->pid(), signal);
        std::this_thread::sleep_for(delay);
        ::kill(agents[0], signal);
    }
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank : {0, 1})
        EXPECT_EQ(lines_of(out, rank),
                  (std::vector<std::string>{"got SIGUSR1", fmt::format("saved rank {}", rank)}))
            << r.describe();
}

INSTANTIATE_TEST_SUITE_P(SingleNode, SingleNodeSignalToEveryProcess,
                         ::testing::Values(0, 2, 10, 30, 100),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                             return fmt::format("DelayMs{}", param_info.param);
                         });

TEST_F(SingleNodeSignals, WorkerIgnoringSigtermIsKilledAfterTheShutdownTimeout) {
    auto ddprun = start(
        job({"--nproc_per_node=2", "--shutdown_timeout=1"}, sleepers(m_dir, {"ignore-term"})));
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGTERM);
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 143) << r.describe();
}

TEST_F(SingleNodeSignals, SigintExits130) {
    auto ddprun = start(job({"--nproc_per_node=2"},
                            sleepers(m_dir, {"trap-exit", "SIGINT", "trap-exit", "SIGTERM"})));
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGINT);
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 130) << r.describe();
}

TEST_F(SingleNodeSignals, SecondSigintKillsAtOnce) {
    // The workers survive SIGINT and SIGTERM and the grace period outlasts
    // the hang guard, so only the second SIGINT can end the job in time.
    auto ddprun = start(job({"--nproc_per_node=2", "--shutdown_timeout=300"},
                            sleepers(m_dir, {"trap", "SIGINT", "trap", "SIGTERM"})));
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGINT);
    // The first SIGINT has been handled once a worker got the stop signal;
    // sending the second before that could merge the two.
    ASSERT_TRUE(ddprun->wait_for_output("[0]: got SIG", 30s)) << ddprun->err_so_far();
    ddprun->send_signal(SIGINT);
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << "the second SIGINT did not kill the workers\n" << r.describe();
    EXPECT_EQ(r.exit_code, 130) << r.describe();
}

TEST_F(SingleNodeSignals, SigusrIsForwardedAndTheJobContinues) {
    auto ddprun = start(
        job({"--nproc_per_node=2"}, {"ready", path("ready.{rank}"), "wait-signal", "print", "1"}));
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGUSR1);
    auto r = ddprun->wait();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(lines_of(out, rank),
                  (std::vector<std::string>{"got SIGUSR1", fmt::format("line 0 rank {}", rank)}))
            << r.describe();
    }
}

// nohup (SIGHUP ignored when ddprun starts) must survive the terminal's SIGHUP:
// a signal ignored at the start stays ignored, for ddprun and its workers, unless
// --signals_to_handle names it. Each test sends SIGHUP and then SIGUSR1, which the
// workers wait for: ddprun reads the two in that order (the lower number first, and
// the first sent first), so a SIGHUP it acted on would have stopped the job, exit
// 129, before the workers saw SIGUSR1.
class SingleNodeNohup : public IntegrationTest {
  protected:
    std::unique_ptr<DdprunProcess> start_ignoring_hup(std::vector<std::string> flags,
                                                      bool through_trap) {
        std::vector<std::string> args =
            job(std::move(flags), {"ready", path("ready.{rank}"), "wait-signal", "print", "1"});
        RunOptions options;
        if (through_trap) {
            // A parent shell's `trap '' HUP`, then exec: what a wrapper script does.
            std::string command = "trap '' HUP; exec '" + k_ddprun + "'";
            for (const std::string& arg : args) command += " '" + arg + "'";
            options.program = "/bin/sh";
            args = {"-c", command};
        } else {
            options.program = "/usr/bin/nohup";
            args.insert(args.begin(), k_ddprun);
        }
        return start(args, options);
    }

    void expect_job_survives(DdprunProcess& ddprun) {
        wait_ready(m_dir, 2, ddprun);
        if (HasFatalFailure()) return;
        ddprun.send_signal(SIGHUP);
        ddprun.send_signal(SIGUSR1);
        auto r = ddprun.wait();
        ASSERT_FALSE(r.timed_out) << r.describe();
        EXPECT_EQ(r.exit_code, 0) << r.describe();
        EXPECT_EQ(r.err.find("SIGHUP;"), std::string::npos) << r.describe();
        auto out = lines_by_rank(r.out);
        for (int rank = 0; rank < 2; ++rank)
            EXPECT_EQ(lines_of(out, rank), (std::vector<std::string>{
                                               "got SIGUSR1", fmt::format("line 0 rank {}", rank)}))
                << r.describe();
    }
};

TEST_F(SingleNodeNohup, UnderNohupSighupLeavesTheJobRunning) {
    auto ddprun = start_ignoring_hup({"--nproc_per_node=2"}, false);
    expect_job_survives(*ddprun);
}

TEST_F(SingleNodeNohup, UnderAShellsTrapSighupLeavesTheJobRunning) {
    auto ddprun = start_ignoring_hup({"--nproc_per_node=2"}, true);
    expect_job_survives(*ddprun);
}

// The workers still ignore SIGHUP (they inherit that, as under torchrun): the stop
// reaches them as SIGHUP and then SIGKILL after the grace.
TEST_F(SingleNodeNohup, NamedInSignalsToHandleSighupStopsTheJob) {
    auto ddprun = start_ignoring_hup(
        {"--nproc_per_node=2", "--signals_to_handle=SIGTERM,SIGHUP", "--shutdown_timeout=1"},
        false);
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGHUP);
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.describe();
    EXPECT_NE(r.err.find("received SIGHUP"), std::string::npos) << r.describe();
}

TEST_F(SingleNodeNohup, DryRunSaysTheSignalStaysIgnored) {
    RunOptions options;
    options.program = "/usr/bin/nohup";
    auto r = start({k_ddprun, "--dry-run", "--nproc_per_node=1", "true"}, options)->wait();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("; SIGHUP ignored when ddprun started (nohup?): left ignored, for "
                         "ddprun and its workers (--signals_to_handle naming it stops the job on "
                         "it)"),
              std::string::npos)
        << r.describe();
    // Without nohup, nothing of the kind.
    auto plain = start({"--dry-run", "--nproc_per_node=1", "true"})->wait();
    EXPECT_EQ(plain.out.find("ignored when ddprun started"), std::string::npos) << plain.describe();
}

// --- cleanup ------------------------------------------------------------------

TEST_F(SingleNodeCleanup, SigkillOfDdprunLeavesNoWorkerOrGrandchild) {
    auto ddprun = start(job({"--nproc_per_node=2"},
                            sleepers(m_dir, {"spawn-grandchild", "spawn-grandchild", "setsid"})));
    wait_ready(m_dir, 2, *ddprun);
    ASSERT_EQ(recorded_pids().size(), 6u) << "2 workers and 4 grandchildren";
    ddprun->send_signal(SIGKILL);
    auto r = ddprun->wait();
    EXPECT_EQ(r.exit_code, 137) << r.describe();
    // ddprun cannot clean up synchronously when SIGKILLed; its orphans get a
    // bounded grace (checked in TearDown).
    expect_orphans_to_clean_up();
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << "survivors of the job:\n" << describe(live);
}

TEST_F(SingleNodeCleanup, GrandchildrenOfSuccessfulWorkersDoNotOutliveTheJob) {
    // Grandchildren keep the workers' output pipes open: ddprun must neither
    // wait for them forever nor leave them running.
    auto r = run(job({"--nproc_per_node=2"},
                     {"spawn-grandchild", "spawn-grandchild", "setsid", "print", "1"}));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(recorded_pids().size(), 6u);
}

std::vector<std::string> directory_entries(const std::string& dir) {
    std::vector<std::string> names;
    std::error_code error;
    for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
        names.push_back(it->path().filename().string());
    }
    return names;
}

TEST_F(SingleNodeCleanup, TemporaryFilesAreRemoved) {
    // Error files live in ddprun's scratch directory under $TMPDIR.
    std::string tmp = path("tmp");
    std::filesystem::create_directories(tmp);
    RunOptions options;
    options.env = {{"TMPDIR", tmp}};
    auto ok = run(job({"--nproc_per_node=2"}, {"print", "1"}), options);
    EXPECT_EQ(ok.exit_code, 0) << ok.describe();
    auto failed =
        run(job({"--nproc_per_node=2"},
                fail_while_others_sleep(m_dir, 2, 0, {"write-error-file", "boom", "exit", "1"})),
            options);
    EXPECT_EQ(failed.exit_code, 1) << failed.describe();
    EXPECT_EQ(directory_entries(tmp), std::vector<std::string>{});
}

TEST_F(SingleNodeCleanup, SigkillOfDdprunLeavesNoTemporaryFiles) {
    std::string tmp = path("tmp");
    std::filesystem::create_directories(tmp);
    RunOptions options;
    options.env = {{"TMPDIR", tmp}};
    auto ddprun = start(job({"--nproc_per_node=2"}, sleepers(m_dir, {})), options);
    wait_ready(m_dir, 2, *ddprun);
    ddprun->send_signal(SIGKILL);
    auto r = ddprun->wait();
    EXPECT_EQ(r.exit_code, 137) << r.describe();
    expect_orphans_to_clean_up();
    // Whatever cleans up after the killed process has the same bounded grace.
    bool empty = wait_until([&] { return directory_entries(tmp).empty(); }, k_orphan_grace);
    EXPECT_TRUE(empty) << "left in $TMPDIR: "
                       << fmt::format("{}", fmt::join(directory_entries(tmp), ", ")) << "\n"
                       << r.describe();
}

// scancel JOB.STEP, KillWait under proctrack/cgroup or the OOM killer SIGKILL
// both ddprun processes at once: neither can remove its scratch directory, so
// the next ddprun on the machine does; a live job's directory is never touched.
TEST_F(SingleNodeCleanup, AWholeJobKilledAtOnceLeavesNothingAfterTheNextRun) {
    std::string tmp = path("tmp");
    std::filesystem::create_directories(tmp);
    RunOptions options;
    options.env = {{"TMPDIR", tmp}};
    auto killed = start(job({"--nproc_per_node=2"}, sleepers(m_dir, {})), options);
    wait_ready(m_dir, 2, *killed);
    // The supervisor and the agent (its child, in a process group of its own), at once.
    auto agent = children_of(killed->pid());
    ASSERT_EQ(agent.size(), 1u);
    ::kill(agent.front(), SIGKILL);
    ::kill(killed->pid(), SIGKILL);
    auto r = killed->wait();
    EXPECT_EQ(r.exit_code, 137) << r.describe();
    expect_orphans_to_clean_up();
    EXPECT_TRUE(wait_job_gone(k_orphan_grace).empty());
    auto left = directory_entries(tmp);
    ASSERT_EQ(left.size(), 1u) << "the killed job's scratch directory is the reproduction";
    EXPECT_TRUE(left.front().starts_with("ddprun-")) << left.front();

    auto alive = start(
        job({"--nproc_per_node=1"}, {"ready", m_dir + "/alive.{rank}", "sleep", "300"}), options);
    ASSERT_TRUE(wait_for_file(path("alive.0"), 30s)) << alive->err_so_far();
    auto next = run(job({"--nproc_per_node=1"}, {"print", "1"}), options);
    EXPECT_EQ(next.exit_code, 0) << next.describe();
    auto now = directory_entries(tmp);
    EXPECT_EQ(now.size(), 1u) << "the killed job's directory is gone, the live job's stays: "
                              << fmt::format("{}", fmt::join(now, ", "));
    EXPECT_NE(now, left);
    alive->send_signal(SIGTERM);
    auto stopped = alive->wait();
    EXPECT_EQ(stopped.exit_code, 128 + SIGTERM) << stopped.describe();
    EXPECT_EQ(directory_entries(tmp), std::vector<std::string>{});
}

// --- usage errors -------------------------------------------------------------

struct UsageCase {
    std::string name;
    std::vector<std::string> args;  // "{fw}" stands for fake_worker
    std::vector<std::string> message_mentions;
};

// Names the case in test output instead of dumping its bytes.
void PrintTo(const UsageCase& c, std::ostream* os) {
    *os << c.name;
}

class SingleNodeUsage : public IntegrationTest, public ::testing::WithParamInterface<UsageCase> {};

TEST_P(SingleNodeUsage, ExitsTwoWithOneLine) {
    const UsageCase& c = GetParam();
    std::vector<std::string> args;
    for (const auto& arg : c.args) args.push_back(arg == "{fw}" ? k_fake_worker : arg);
    RunOptions options;
    options.timeout = 20s;
    auto r = run(args, options);
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    auto lines = non_empty_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << "a usage error is one line, not a help dump\n" << r.describe();
    for (const auto& mention : c.message_mentions) {
        EXPECT_TRUE(contains(lines[0], mention))
            << "should mention '" << mention << "': " << lines[0];
    }
    EXPECT_TRUE(r.out.empty()) << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

INSTANTIATE_TEST_SUITE_P(
    BadFlags, SingleNodeUsage,
    ::testing::Values(
        UsageCase{"NnodesZero", {"--nnodes=0", "{fw}"}, {"nnodes", "0"}},
        UsageCase{"NprocZero", {"--nproc_per_node=0", "{fw}"}, {"nproc_per_node", "0"}},
        UsageCase{"NprocWord", {"--nproc_per_node=lots", "{fw}"}, {"nproc_per_node", "lots"}},
        UsageCase{"NodeRankOutOfRange", {"--node_rank=1", "{fw}"}, {"node_rank", "1"}},
        UsageCase{"MasterPortTooLarge", {"--master_port=70000", "{fw}"}, {"70000"}},
        UsageCase{"MisspelledFlag",
                  {"--nprocs_per_node=2", "{fw}"},
                  {"--nprocs_per_node", "--nproc_per_node"}},
        UsageCase{"NoProgram", {"--nproc_per_node=2"}, {}},
        UsageCase{"ModuleWithNoPython", {"-m", "--no_python", "pkg.mod"}, {"no_python"}},
        UsageCase{"LocalRanksFilterNotANumber",
                  {"--local_ranks_filter=x", "{fw}"},
                  {"local_ranks_filter"}},
        UsageCase{"RedirectsOutOfRange", {"--redirects=9", "{fw}"}, {"redirects", "9"}}),
    [](const ::testing::TestParamInfo<UsageCase>& param_info) { return param_info.param.name; });

// --- dry run ------------------------------------------------------------------

// A plan row: node_rank, local_rank, rank, world_size, CUDA_VISIBLE_DEVICES,
// then the command.
std::vector<std::string> plan_rows(const std::string& out) {
    std::vector<std::string> rows;
    for (const auto& line : split_lines(out)) {
        if (contains(line, k_fake_worker)) rows.push_back(line);
    }
    return rows;
}

std::vector<std::string> first_columns(const std::string& row, std::size_t count) {
    std::vector<std::string> columns;
    std::istringstream words(row);
    std::string word;
    while (columns.size() < count && words >> word) columns.push_back(word);
    return columns;
}

TEST_F(SingleNodeDryRun, PrintsThePlanAndStartsNothing) {
    auto r = run(job({"--dry-run", "--nproc_per_node=2"}, {"print", "1"}), with_devices("4,5"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto rows = plan_rows(r.out);
    ASSERT_EQ(rows.size(), 2u) << "one row per worker\n" << r.describe();
    EXPECT_EQ(first_columns(rows[0], 5), (std::vector<std::string>{"0", "0", "0", "2", "4"}));
    EXPECT_EQ(first_columns(rows[1], 5), (std::vector<std::string>{"0", "1", "1", "2", "5"}));
    EXPECT_TRUE(contains(r.out, "127.0.0.1")) << "the master address is part of the plan\n"
                                              << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "--dry-run must start nothing";
}

TEST_F(SingleNodeDryRun, PrintsEveryNodeOfAMultiNodeJob) {
    auto r = run(job({"--dry-run", "--nnodes=2", "--nproc_per_node=2"}, {"print", "1"}),
                 with_devices("4,5"));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto rows = plan_rows(r.out);
    ASSERT_EQ(rows.size(), 4u) << "one row per worker of the job\n" << r.describe();
    const std::vector<std::vector<std::string>> expected = {{"0", "0", "0", "4", "4"},
                                                            {"0", "1", "1", "4", "5"},
                                                            {"1", "0", "2", "4", "4"},
                                                            {"1", "1", "3", "4", "5"}};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(first_columns(rows[i], 5), expected[i]) << rows[i];
    }
    EXPECT_TRUE(recorded_pids().empty()) << "--dry-run must start nothing";
}

TEST_F(SingleNodeDryRun, JobFileWrittenByWriteConfigRunsTheSameJob) {
    const std::string file = path("job.toml");
    auto w = run({"--nproc_per_node=2", "--role=trainer", "--max_restarts=3", "--dry-run",
                  "--write-config", file, k_fake_worker, "env"});
    ASSERT_EQ(w.exit_code, 0) << w.describe();
    EXPECT_TRUE(contains(w.err, "ddprun: wrote " + file)) << w.describe();
    EXPECT_EQ(plan_rows(w.out).size(), 2u) << "--dry-run still prints the plan\n" << w.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "--write-config must start nothing";

    // The file runs the job; a flag wins over it, the file over DDPRUN_.
    RunOptions variables;
    variables.env = {{"DDPRUN_MAX_RESTARTS", "7"}};
    auto r = run({"--config", file, "--role=tester", k_fake_worker, "env"}, variables);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto env = env_by_rank(r.out);
    ASSERT_EQ(env.size(), 2u) << r.describe();
    EXPECT_EQ(env[1]["WORLD_SIZE"], "2");
    EXPECT_EQ(env[1]["ROLE_NAME"], "tester");
    EXPECT_EQ(env[1]["TORCHELASTIC_MAX_RESTARTS"], "3");

    const std::size_t started = recorded_pids().size();
    auto bad = run({"--config", path("missing.toml"), k_fake_worker, "env"});
    EXPECT_EQ(bad.exit_code, 2) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "ddprun: error: --config=" + path("missing.toml") +
                                      ": cannot read it: No such file or directory"))
        << bad.describe();
    EXPECT_EQ(recorded_pids().size(), started) << "a bad job file starts nothing";
}

// --- Python -------------------------------------------------------------------

RunOptions with_python(std::vector<std::pair<std::string, std::string>> env = {}) {
    RunOptions options;
    options.env = std::move(env);
    options.env.emplace_back("PYTHON_EXEC", k_python);
    return options;
}

TEST_F(SingleNodePython, ScriptRunsUnderPythonExecUnbuffered) {
    std::string script = path("show.py");
    write_text_file(script,
                    "import os, sys\n"
                    "print(f\"rank={os.environ['RANK']} python={sys.orig_argv[0]} "
                    "u={'-u' in sys.orig_argv[:2]} args={sys.argv[1:]}\")\n");
    auto r = run({"--nproc_per_node=2", script, "--lr", "0.1"}, with_python());
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(lines_of(out, rank),
                  std::vector<std::string>{
                      fmt::format("rank={} python={} u=True args=['--lr', '0.1']", rank, k_python)})
            << r.describe();
    }
}

TEST_F(SingleNodePython, ModuleRunsWithDashM) {
    std::filesystem::create_directories(path("mypkg"));
    write_text_file(path("mypkg/__init__.py"), "");
    write_text_file(
        path("mypkg/hello.py"),
        "import os, sys\n"
        "print(f\"module {__name__} rank={os.environ['RANK']} args={sys.argv[1:]}\")\n");
    auto r = run({"--nproc_per_node=2", "-m", "mypkg.hello", "a", "-b"},
                 with_python({{"PYTHONPATH", m_dir}}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank = 0; rank < 2; ++rank) {
        EXPECT_EQ(lines_of(out, rank), std::vector<std::string>{fmt::format(
                                           "module __main__ rank={} args=['a', '-b']", rank)})
            << r.describe();
    }
}

TEST_F(SingleNodePython, DdpTrainExampleSucceeds) {
    std::string example = k_examples_dir + "/ddp_train.py";
    if (!std::filesystem::exists(example)) GTEST_SKIP() << example << " does not exist yet";
    RunOptions options = with_python();
    options.timeout = 100s;  // three torch imports on a shared 2-core machine
    auto r = run({"--nproc_per_node=3", example}, options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
}

}  // namespace
}  // namespace ddprun_it
