// Under a scheduler, ddprun started the same way on every node must find its
// place by itself: a wrong node count, rank or master address strands every
// node in a rendezvous that never completes. Each variable each scheduler sets
// is checked here against what it must (and must not) fill, and every way of
// starting ddprun wrongly under a scheduler must be refused in one line.

#include "ddprun/scheduler/scheduler_env.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddprun {
namespace {

// The environment of `srun -N2 --ntasks-per-node=1 --gres=gpu:4 ddprun ./train`
// on the job's second node, as Slurm sets it.
Environment slurm_step() {
    return {
        {"SLURM_JOB_ID", "12345"},
        {"SLURM_JOBID", "12345"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_STEPID", "0"},
        {"SLURM_NODEID", "1"},
        {"SLURM_PROCID", "1"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NNODES", "2"},
        {"SLURM_JOB_NUM_NODES", "2"},
        {"SLURM_STEP_NUM_NODES", "2"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_STEP_NUM_TASKS", "2"},
        {"SLURM_TASKS_PER_NODE", "1(x2)"},
        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
        {"SLURM_JOB_NODELIST", "gpu[07-08]"},
        {"SLURM_NODELIST", "gpu[07-08]"},
        {"SLURM_STEP_NODELIST", "gpu[07-08]"},
        {"SLURM_GPUS_ON_NODE", "4"},
        {"SLURM_STEP_GPUS", "4,5,6,7"},
        {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
    };
}

// The environment of a batch script of a one-node job (no srun step).
Environment slurm_batch() {
    return {
        {"SLURM_JOB_ID", "777"},         {"SLURM_JOBID", "777"},      {"SLURM_NODEID", "0"},
        {"SLURM_PROCID", "0"},           {"SLURM_LOCALID", "0"},      {"SLURM_NNODES", "1"},
        {"SLURM_JOB_NUM_NODES", "1"},    {"SLURM_NTASKS", "8"},       {"SLURM_TASKS_PER_NODE", "8"},
        {"SLURM_JOB_NODELIST", "gpu01"}, {"SLURM_NODELIST", "gpu01"},
    };
}

// `mpirun -N 1 -x MASTER_ADDR=n0 -x MASTER_PORT=29501 ddprun ./train` on rank 2 of 4.
Environment open_mpi() {
    return {
        {"OMPI_COMM_WORLD_SIZE", "4"},
        {"OMPI_COMM_WORLD_RANK", "2"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
        {"MASTER_ADDR", "n0"},
        {"MASTER_PORT", "29501"},
    };
}

// A PyTorchJob pod (training-operator v1): worker 0, i.e. the second pod. The
// operator's PET_ variables reach detection as given values (cli.cpp reads them).
Environment kubeflow_pod() {
    return {
        {"PET_NNODES", "2"},
        {"PET_NPROC_PER_NODE", "4"},
        {"MASTER_ADDR", "job-master-0"},
        {"MASTER_PORT", "23456"},
        {"RANK", "1"},
        {"WORLD_SIZE", "8"},
    };
}

Environment with(Environment env, const Environment& set,
                 const std::vector<std::string>& unset = {}) {
    for (const auto& [name, value] : set) env[name] = value;
    for (const std::string& name : unset) env.erase(name);
    return env;
}

LaunchDefaults detect_ok(const Environment& env, const GivenValues& given = {}) {
    auto defaults = detect_launch_environment(env, given);
    EXPECT_TRUE(defaults.has_value()) << (defaults ? "" : defaults.error().message);
    return defaults ? *defaults : LaunchDefaults{};
}

using Value = std::optional<DetectedValue>;

std::string shown(const Value& value) {
    if (!value) return "(none)";
    return "{" + value->value + ", " + value->variable + ", " + value->source + "}";
}

// One detected value: the environment, what the user gave, and what must come out.
struct ValueCase {
    std::string what;
    Environment env;
    GivenValues given;
    Value expected;
};

void expect_values(const std::vector<ValueCase>& cases, Value LaunchDefaults::*field) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        LaunchDefaults defaults = detect_ok(c.env, c.given);
        EXPECT_EQ(defaults.*field, c.expected)
            << "got " << shown(defaults.*field) << ", want " << shown(c.expected);
    }
}

TEST(SchedulerSlurm, AStepGivesEveryValue) {
    LaunchDefaults d = detect_ok(slurm_step());
    EXPECT_EQ(d.scheduler, "slurm");
    EXPECT_EQ(d.nnodes, (DetectedValue{"2", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_NODES"}));
    EXPECT_EQ(d.node_rank, (DetectedValue{"1", "SLURM_NODEID", "SLURM_NODEID"}));
    EXPECT_EQ(d.nproc_per_node, (DetectedValue{"gpu", "CUDA_VISIBLE_DEVICES",
                                               "CUDA_VISIBLE_DEVICES of the Slurm step"}));
    EXPECT_EQ(d.master_addr,
              (DetectedValue{"gpu07", "SLURM_STEP_NODELIST", "first host of SLURM_STEP_NODELIST"}));
    const std::string derived = "derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0";
    EXPECT_EQ(d.master_port, (DetectedValue{"20390", "SLURM_JOB_ID", derived}));
    EXPECT_EQ(d.rdzv_endpoint, (DetectedValue{"gpu07:20391", "SLURM_JOB_ID", derived}));
    EXPECT_EQ(d.rdzv_id, (DetectedValue{"slurm-12345.0", "SLURM_JOB_ID", derived}));
}

TEST(SchedulerSlurm, NodeCount) {
    const Environment step = slurm_step();
    expect_values(
        {
            {"the step's count wins over the job's",
             with(step, {{"SLURM_STEP_NUM_NODES", "2"},
                         {"SLURM_NNODES", "3"},
                         {"SLURM_JOB_NUM_NODES", "4"}}),
             {},
             DetectedValue{"2", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_NODES"}},
            {"SLURM_NNODES next",
             with(step, {{"SLURM_NNODES", "3"}}, {"SLURM_STEP_NUM_NODES"}),
             {},
             DetectedValue{"3", "SLURM_NNODES", "SLURM_NNODES"}},
            {"SLURM_JOB_NUM_NODES last",
             with(step, {{"SLURM_JOB_NUM_NODES", "2"}}, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}),
             {},
             DetectedValue{"2", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NUM_NODES"}},
            {"an empty variable counts as unset",
             with(step, {{"SLURM_STEP_NUM_NODES", ""}, {"SLURM_NNODES", "2"}}),
             {},
             DetectedValue{"2", "SLURM_NNODES", "SLURM_NNODES"}},
            {"a batch script of a one-node job",
             slurm_batch(),
             {},
             DetectedValue{"1", "SLURM_NNODES", "SLURM_NNODES"}},
            {"a batch script with only SLURM_JOB_NUM_NODES",
             with(slurm_batch(), {}, {"SLURM_NNODES"}),
             {},
             DetectedValue{"1", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NUM_NODES"}},
            {"no count at all",
             with(step, {}, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}),
             {},
             std::nullopt},
            {"given by the user", step, {{"nnodes", "2"}}, std::nullopt},
            {"--standalone decides it", step, {{"standalone", "1"}}, std::nullopt},
        },
        &LaunchDefaults::nnodes);
}

TEST(SchedulerSlurm, NodeRank) {
    const Environment step = slurm_step();
    expect_values(
        {
            {"SLURM_NODEID", step, {}, DetectedValue{"1", "SLURM_NODEID", "SLURM_NODEID"}},
            {"SLURM_NODEID wins over SLURM_PROCID",
             with(step, {{"SLURM_PROCID", "5"}}),
             {},
             DetectedValue{"1", "SLURM_NODEID", "SLURM_NODEID"}},
            {"SLURM_PROCID without SLURM_NODEID",
             with(step, {}, {"SLURM_NODEID"}),
             {},
             DetectedValue{"1", "SLURM_PROCID", "SLURM_PROCID"}},
            {"the batch script runs on node 0",
             slurm_batch(),
             {},
             DetectedValue{"0", "SLURM_NODEID", "SLURM_NODEID"}},
            {"given by the user", step, {{"node_rank", "0"}}, std::nullopt},
            {"--standalone decides it", step, {{"standalone", "true"}}, std::nullopt},
        },
        &LaunchDefaults::node_rank);
}

TEST(SchedulerSlurm, WorkersPerNodeFromTheStepsGpus) {
    const Environment step = slurm_step();
    const Environment batch = slurm_batch();
    const DetectedValue gpu{"gpu", "CUDA_VISIBLE_DEVICES",
                            "CUDA_VISIBLE_DEVICES of the Slurm step"};
    expect_values(
        {
            {"the list Slurm set, indexed (never replaced by SLURM_STEP_GPUS' physical ids)",
             step,
             {},
             gpu},
            {"uuids in the list", with(step, {{"CUDA_VISIBLE_DEVICES", "GPU-aa,GPU-bb"}}), {}, gpu},
            {"the list without SLURM_GPUS_ON_NODE",
             with(step, {}, {"SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS"}),
             {},
             gpu},
            {"SLURM_GPUS_ON_NODE without a list",
             with(step, {}, {"CUDA_VISIBLE_DEVICES"}),
             {},
             DetectedValue{"4", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_ON_NODE"}},
            {"a list of -1 holds no GPU",
             with(step, {{"CUDA_VISIBLE_DEVICES", "-1"}}),
             {},
             DetectedValue{"4", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_ON_NODE"}},
            {"a step without GPUs", with(step, {{"SLURM_GPUS_ON_NODE", "0"}}), {}, std::nullopt},
            {"the count of SLURM_STEP_GPUS",
             with(step, {{"SLURM_STEP_GPUS", "4,5"}},
                  {"CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE"}),
             {},
             DetectedValue{"2", "SLURM_STEP_GPUS", "count of SLURM_STEP_GPUS"}},
            {"SLURM_JOB_GPUS describes the batch node, not a step's",
             with(step, {{"SLURM_JOB_GPUS", "0,1,2,3"}},
                  {"CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS"}),
             {},
             std::nullopt},
            {"the count of SLURM_JOB_GPUS in the batch script",
             with(batch, {{"SLURM_JOB_GPUS", "0-3,6"}}),
             {},
             DetectedValue{"5", "SLURM_JOB_GPUS", "count of SLURM_JOB_GPUS"}},
            {"no GPU anywhere", batch, {}, std::nullopt},
            {"given by the user", step, {{"nproc_per_node", "2"}}, std::nullopt},
            {"--standalone leaves it open", step, {{"standalone", "1"}}, gpu},
        },
        &LaunchDefaults::nproc_per_node);
}

TEST(SchedulerSlurm, MasterAddressIsTheFirstHostOfTheStep) {
    const Environment step = slurm_step();
    expect_values(
        {
            {"the step's list wins",
             with(step,
                  {{"SLURM_STEP_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_NODELIST", "gpu[01-08]"}}),
             {},
             DetectedValue{"gpu07", "SLURM_STEP_NODELIST", "first host of SLURM_STEP_NODELIST"}},
            {"the job's list next",
             with(step, {{"SLURM_JOB_NODELIST", "a-[003-004]"}}, {"SLURM_STEP_NODELIST"}),
             {},
             DetectedValue{"a-003", "SLURM_JOB_NODELIST", "first host of SLURM_JOB_NODELIST"}},
            {"SLURM_NODELIST last",
             with(step, {{"SLURM_NODELIST", "x,y"}}, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}),
             {},
             DetectedValue{"x", "SLURM_NODELIST", "first host of SLURM_NODELIST"}},
            {"several bracket groups",
             with(step, {{"SLURM_STEP_NODELIST", "rack[2-3]-n[09-10]"}}),
             {},
             DetectedValue{"rack2-n09", "SLURM_STEP_NODELIST",
                           "first host of SLURM_STEP_NODELIST"}},
            {"a one-node step keeps 127.0.0.1",
             with(step, {{"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_NODEID", "0"}}),
             {},
             std::nullopt},
            {"a one-node job named so by the user", step, {{"nnodes", "1"}}, std::nullopt},
            {"more nodes named by the user",
             slurm_batch(),
             {{"nnodes", "2"}},
             DetectedValue{"gpu01", "SLURM_JOB_NODELIST", "first host of SLURM_JOB_NODELIST"}},
            {"more nodes named by the user as N:N",
             slurm_batch(),
             {{"nnodes", "2:2"}},
             DetectedValue{"gpu01", "SLURM_JOB_NODELIST", "first host of SLURM_JOB_NODELIST"}},
            {"given by the user", step, {{"master_addr", "10.0.0.1"}}, std::nullopt},
            {"a malformed list the user overrode is not read",
             with(step, {{"SLURM_STEP_NODELIST", "gpu[07-"}}),
             {{"master_addr", "10.0.0.1"}},
             std::nullopt},
            {"--standalone decides it", step, {{"standalone", "1"}}, std::nullopt},
        },
        &LaunchDefaults::master_addr);
}

TEST(SchedulerSlurm, PortsAreDerivedFromTheJobAndStep) {
    const Environment step = slurm_step();
    auto port = [](std::string number, std::string id, std::string step_id = "0",
                   std::string variable = "SLURM_JOB_ID") {
        return DetectedValue{
            number, variable,
            fmt::format("derived from {}={}, SLURM_STEP_ID={}", variable, id, step_id)};
    };
    expect_values(
        {
            {"12345", step, {}, port("20390", "12345")},
            {"the next step of the job",
             with(step, {{"SLURM_STEP_ID", "1"}}),
             {},
             port("20392", "12345", "1")},
            {"the next job", with(step, {{"SLURM_JOB_ID", "12346"}}), {}, port("20452", "12346")},
            {"the lowest", with(step, {{"SLURM_JOB_ID", "9000"}}), {}, port("20000", "9000")},
            {"a large id",
             with(step, {{"SLURM_JOB_ID", "4294967295"}}),
             {},
             port("24290", "4294967295")},
            {"SLURM_JOBID when SLURM_JOB_ID is missing",
             with(step, {{"SLURM_JOBID", "42"}}, {"SLURM_JOB_ID"}),
             {},
             port("22604", "42", "0", "SLURM_JOBID")},
            {"a one-node job picks a free port",
             with(step, {{"SLURM_STEP_NUM_NODES", "1"}}),
             {},
             std::nullopt},
            {"given by the user", step, {{"master_port", "29500"}}, std::nullopt},
            {"--standalone decides it", step, {{"standalone", "1"}}, std::nullopt},
        },
        &LaunchDefaults::master_port);
}

// Two jobs, or two steps of one allocation, whose node 0 is the same host must
// not meet in one store: each job step gets its own run id and store port.
TEST(SchedulerSlurm, EveryJobStepHasItsOwnStoreAndRunId) {
    const Environment step = slurm_step();
    auto endpoint = [](std::string value) {
        return DetectedValue{std::move(value), "SLURM_JOB_ID",
                             "derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0"};
    };
    expect_values(
        {
            {"node 0 and the store port", step, {}, endpoint("gpu07:20391")},
            {"the user's master_addr",
             step,
             {{"master_addr", "10.0.0.1"}},
             endpoint("10.0.0.1:20391")},
            {"an IPv6 master_addr",
             step,
             {{"master_addr", "fd00::1"}},
             endpoint("[fd00::1]:20391")},
            {"given by the user", step, {{"rdzv_endpoint", "h:1"}}, std::nullopt},
            {"a one-node job has no store",
             with(step, {{"SLURM_STEP_NUM_NODES", "1"}}),
             {},
             std::nullopt},
        },
        &LaunchDefaults::rdzv_endpoint);
    EXPECT_EQ(detect_ok(with(step, {{"SLURM_STEP_ID", "3"}, {"SLURM_JOB_ID", "777"}})).rdzv_id,
              (DetectedValue{"slurm-777.3", "SLURM_JOB_ID",
                             "derived from SLURM_JOB_ID=777, SLURM_STEP_ID=3"}));
    EXPECT_FALSE(detect_ok(step, {{"rdzv_id", "mine"}}).rdzv_id);

    // Every slot's MASTER_PORT is even and its store port the odd one above it, all in
    // 20000-28999; 4500 consecutive jobs, and the first 31 steps of a job, never share one.
    std::set<int> ports;
    for (long long job = 100000; job < 100000 + k_job_slots; ++job) {
        JobPorts p = job_ports(job);
        EXPECT_EQ(p.master_port % 2, 0);
        EXPECT_EQ(p.store_port, p.master_port + 1);
        EXPECT_GE(p.master_port, 20000);
        EXPECT_LE(p.store_port, 28999);
        ports.insert(p.master_port);
    }
    EXPECT_EQ(ports.size(), static_cast<std::size_t>(k_job_slots));
    ports.clear();
    for (long long step_id = 0; step_id < 31; ++step_id)
        ports.insert(job_ports(12345, step_id).master_port);
    EXPECT_EQ(ports.size(), 31u);
}

TEST(SchedulerSlurm, NotAJobStepIsNotSlurm) {
    // An salloc shell on a login node has a job but no node id: nothing is detected.
    Environment salloc = with(slurm_step(), {}, {"SLURM_NODEID", "SLURM_PROCID"});
    LaunchDefaults d = detect_ok(salloc);
    EXPECT_EQ(d.scheduler, "");
    EXPECT_FALSE(d.nnodes || d.node_rank || d.nproc_per_node || d.master_addr || d.master_port);
    EXPECT_EQ(detect_ok(with(slurm_step(), {}, {"SLURM_JOB_ID", "SLURM_JOBID"})).scheduler, "");
}

// Must be refused in one line mentioning every `mentions`.
struct RejectCase {
    std::string what;
    Environment env;
    GivenValues given;
    std::vector<std::string> mentions;
};

void expect_rejected(const std::vector<RejectCase>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        auto defaults = detect_launch_environment(c.env, c.given);
        ASSERT_FALSE(defaults.has_value());
        const std::string& message = defaults.error().message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        for (const std::string& mention : c.mentions)
            EXPECT_NE(message.find(mention), std::string::npos)
                << "'" << message << "' does not mention '" << mention << "'";
    }
}

TEST(SchedulerSlurm, MoreThanOneDdprunPerNodeIsRefused) {
    const Environment step = slurm_step();
    expect_rejected({
        {"four tasks per node",
         with(step, {{"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}}),
         {},
         {"SLURM_STEP_TASKS_PER_NODE=4(x2)", "4 tasks", "one worker per GPU",
          "srun --ntasks-per-node=1"}},
        {"uneven tasks: every node refuses, not only the crowded one",
         with(step, {{"SLURM_STEP_TASKS_PER_NODE", "1,2"}}),
         {},
         {"SLURM_STEP_TASKS_PER_NODE=1,2", "2 tasks"}},
        {"SLURM_TASKS_PER_NODE without the step's",
         with(step, {{"SLURM_TASKS_PER_NODE", "8(x2)"}}, {"SLURM_STEP_TASKS_PER_NODE"}),
         {},
         {"SLURM_TASKS_PER_NODE=8(x2)", "--ntasks-per-node=1"}},
        {"a second task on the node",
         with(step, {{"SLURM_LOCALID", "1"}},
              {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}),
         {},
         {"SLURM_LOCALID=1", "--ntasks-per-node=1"}},
        {"the user gave only the node count",
         with(step, {{"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}}),
         {{"nnodes", "4"}},
         {"SLURM_STEP_TASKS_PER_NODE=2(x2)"}},
    });
    // Who places every copy by hand (--nnodes and --node_rank) may start several.
    detect_ok(with(step, {{"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_LOCALID", "3"}}),
              {{"nnodes", "8"}, {"node_rank", "7"}});
    // A batch script runs once whatever the tasks it asked for.
    EXPECT_EQ(detect_ok(slurm_batch()).nnodes->value, "1");
}

TEST(SchedulerSlurm, AMultiNodeBatchScriptIsRefused) {
    Environment batch = with(slurm_batch(), {{"SLURM_NNODES", "2"},
                                             {"SLURM_JOB_NUM_NODES", "2"},
                                             {"SLURM_JOB_NODELIST", "gpu[01-02]"}});
    expect_rejected({
        {"no srun step",
         batch,
         {},
         {"SLURM_NNODES=2", "batch script", "first node only", "srun --ntasks-per-node=1",
          "--nnodes=1"}},
        {"the batch step's own id is not an srun step",
         with(batch, {{"SLURM_STEP_ID", "4294967294"}}),
         {},
         {"SLURM_NNODES=2", "batch script"}},
        {"nor is an interactive step's",
         with(batch, {{"SLURM_STEPID", "4294967290"}}),
         {},
         {"batch script"}},
    });
    // The user who says how many nodes is believed.
    LaunchDefaults one = detect_ok(batch, {{"nnodes", "1"}});
    EXPECT_EQ(one.scheduler, "slurm");
    EXPECT_FALSE(one.nnodes);
    EXPECT_FALSE(one.master_addr);
    // An srun step, even a single one, is a step.
    EXPECT_EQ(detect_ok(with(batch, {{"SLURM_STEP_ID", "3"}}, {"SLURM_TASKS_PER_NODE"})).nnodes,
              (DetectedValue{"2", "SLURM_NNODES", "SLURM_NNODES"}));
}

TEST(SchedulerSlurm, MalformedVariablesAreNamed) {
    const Environment step = slurm_step();
    expect_rejected({
        {"node count",
         with(step, {{"SLURM_STEP_NUM_NODES", "two"}}),
         {},
         {"SLURM_STEP_NUM_NODES=two", "whole number", "--nnodes"}},
        {"zero nodes", with(step, {{"SLURM_STEP_NUM_NODES", "0"}}), {}, {"SLURM_STEP_NUM_NODES=0"}},
        {"node id", with(step, {{"SLURM_NODEID", "-1"}}), {}, {"SLURM_NODEID=-1", "--node_rank"}},
        {"node id", with(step, {{"SLURM_NODEID", "1a"}}), {}, {"SLURM_NODEID=1a"}},
        {"job id",
         with(step, {{"SLURM_JOB_ID", "12345_7"}}),
         {},
         {"SLURM_JOB_ID=12345_7", "--master_port", "--rdzv_endpoint", "--rdzv_id"}},
        {"GPUs on the node",
         with(step, {{"SLURM_GPUS_ON_NODE", "four"}}),
         {},
         {"SLURM_GPUS_ON_NODE=four", "--nproc_per_node"}},
        {"GPU ids",
         with(step, {{"SLURM_STEP_GPUS", "a,b"}}, {"CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE"}),
         {},
         {"SLURM_STEP_GPUS=a,b", "GPU ids"}},
        {"tasks per node",
         with(step, {{"SLURM_STEP_TASKS_PER_NODE", "1(x2"}}),
         {},
         {"SLURM_STEP_TASKS_PER_NODE=1(x2", "tasks per node"}},
        {"tasks per node",
         with(step, {{"SLURM_STEP_TASKS_PER_NODE", "0"}}),
         {},
         {"SLURM_STEP_TASKS_PER_NODE=0"}},
        {"local id", with(step, {{"SLURM_LOCALID", "x"}}), {}, {"SLURM_LOCALID=x"}},
        {"node list",
         with(step, {{"SLURM_STEP_NODELIST", "gpu[07-08"}}),
         {},
         {"SLURM_STEP_NODELIST=gpu[07-08", "unclosed '['", "--master_addr"}},
        {"node list",
         with(step, {{"SLURM_STEP_NODELIST", "gpu[08-07]"}}),
         {},
         {"SLURM_STEP_NODELIST=gpu[08-07]", "backwards"}},
        {"no node list",
         with(step, {}, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}),
         {},
         {"SLURM_STEP_NODELIST", "--master_addr"}},
    });
    // A malformed variable the user overrode does not matter.
    detect_ok(with(step, {{"SLURM_STEP_NUM_NODES", "two"}}), {{"nnodes", "2"}});
    detect_ok(with(step, {{"SLURM_GPUS_ON_NODE", "four"}}), {{"nproc_per_node", "4"}});
    detect_ok(with(step, {{"SLURM_JOB_ID", "x"}}),
              {{"master_port", "29500"}, {"rdzv_endpoint", "h:1"}, {"rdzv_id", "x"}});
}

TEST(SchedulerMpi, OneRankPerNodeGivesTheShape) {
    LaunchDefaults d = detect_ok(open_mpi());
    EXPECT_EQ(d.scheduler, "mpi");
    EXPECT_EQ(d.nnodes, (DetectedValue{"4", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}));
    EXPECT_EQ(d.node_rank, (DetectedValue{"2", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_RANK"}));
    EXPECT_EQ(d.master_addr, (DetectedValue{"n0", "MASTER_ADDR", "MASTER_ADDR"}));
    EXPECT_EQ(d.master_port, (DetectedValue{"29501", "MASTER_PORT", "MASTER_PORT"}));
    EXPECT_FALSE(d.nproc_per_node);

    Environment pmi = {{"PMI_SIZE", "2"}, {"PMI_RANK", "0"}, {"MASTER_ADDR", "h0"}};
    d = detect_ok(pmi);
    EXPECT_EQ(d.scheduler, "mpi");
    EXPECT_EQ(d.nnodes, (DetectedValue{"2", "PMI_SIZE", "PMI_SIZE"}));
    EXPECT_EQ(d.node_rank, (DetectedValue{"0", "PMI_RANK", "PMI_RANK"}));
    EXPECT_EQ(d.master_addr, (DetectedValue{"h0", "MASTER_ADDR", "MASTER_ADDR"}));
    EXPECT_FALSE(d.master_port);  // node 0 picks a free one

    // Open MPI's pair wins over PMI's; half a pair is not MPI.
    EXPECT_EQ(detect_ok(with(open_mpi(), {{"PMI_SIZE", "9"}, {"PMI_RANK", "8"}})).nnodes->value,
              "4");
    EXPECT_EQ(detect_ok(with(open_mpi(), {}, {"OMPI_COMM_WORLD_RANK"})).scheduler, "");
    // One rank: a single node, which needs no master address.
    d = detect_ok({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}});
    EXPECT_EQ(d.nnodes->value, "1");
    EXPECT_FALSE(d.master_addr);
    // What the user gives wins.
    d = detect_ok(open_mpi(), {{"nnodes", "4"}, {"node_rank", "2"}, {"master_addr", "x"}});
    EXPECT_FALSE(d.nnodes || d.node_rank || d.master_addr);
    EXPECT_TRUE(d.master_port);
}

// Open MPI's job id keeps concurrent mpiruns apart; MASTER_PORT stays the free
// port node 0 reserves.
TEST(SchedulerMpi, TheJobIdGivesTheRunIdAndTheStorePort) {
    Environment env = with(open_mpi(), {{"OMPI_MCA_ess_base_jobid", "2142896129"}});
    const std::string derived = "derived from OMPI_MCA_ess_base_jobid=2142896129";
    const int store = job_ports(2142896129LL).store_port;
    LaunchDefaults d = detect_ok(env);
    EXPECT_EQ(d.rdzv_id, (DetectedValue{"mpi-2142896129", "OMPI_MCA_ess_base_jobid", derived}));
    EXPECT_EQ(d.rdzv_endpoint,
              (DetectedValue{fmt::format("n0:{}", store), "OMPI_MCA_ess_base_jobid", derived}));
    // PMIx's namespace where Open MPI's id is missing; nothing without either.
    d = detect_ok(with(open_mpi(), {{"PMIX_NAMESPACE", "ns7"}}));
    EXPECT_EQ(d.rdzv_id->value, "mpi-ns7");
    EXPECT_EQ(d.rdzv_endpoint->value, fmt::format("n0:{}", job_ports("ns7").store_port));
    d = detect_ok(open_mpi());
    EXPECT_FALSE(d.rdzv_id || d.rdzv_endpoint);
    // One rank needs no store.
    d = detect_ok({{"OMPI_COMM_WORLD_SIZE", "1"},
                   {"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_MCA_ess_base_jobid", "5"}});
    EXPECT_FALSE(d.rdzv_id || d.rdzv_endpoint);
}

TEST(SchedulerMpi, Refusals) {
    expect_rejected({
        {"several copies per node (Open MPI)",
         with(open_mpi(), {{"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}),
         {},
         {"OMPI_COMM_WORLD_LOCAL_SIZE=8", "8 copies", "mpirun -N 1"}},
        {"several copies per node (MPICH)",
         {{"PMI_SIZE", "4"}, {"PMI_RANK", "1"}, {"MPI_LOCALNRANKS", "2"}, {"MASTER_ADDR", "h"}},
         {},
         {"MPI_LOCALNRANKS=2", "-ppn 1"}},
        {"mpirun inside a Slurm allocation, several per node",
         with(slurm_step(), {{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}),
         {},
         {"OMPI_COMM_WORLD_LOCAL_SIZE=4"}},
        {"no master address on several nodes",
         with(open_mpi(), {}, {"MASTER_ADDR"}),
         {},
         {"OMPI_COMM_WORLD_SIZE=4", "--master_addr", "mpirun -x MASTER_ADDR"}},
        {"malformed size",
         with(open_mpi(), {{"OMPI_COMM_WORLD_SIZE", "4.0"}}),
         {},
         {"OMPI_COMM_WORLD_SIZE=4.0", "--nnodes"}},
        {"malformed rank",
         with(open_mpi(), {{"OMPI_COMM_WORLD_RANK", "-2"}}),
         {},
         {"OMPI_COMM_WORLD_RANK=-2", "--node_rank"}},
        {"malformed local size",
         with(open_mpi(), {{"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}}),
         {},
         {"OMPI_COMM_WORLD_LOCAL_SIZE=0"}},
    });
    detect_ok(with(open_mpi(), {}, {"MASTER_ADDR"}), {{"master_addr", "n0"}});
    detect_ok(with(open_mpi(), {{"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}),
              {{"nnodes", "32"}, {"node_rank", "3"}});
}

TEST(SchedulerPrecedence, SlurmWinsOverMpiAndKubeflow) {
    Environment both = with(slurm_step(), {{"OMPI_COMM_WORLD_SIZE", "9"},
                                           {"OMPI_COMM_WORLD_RANK", "8"},
                                           {"PET_NNODES", "3"},
                                           {"MASTER_ADDR", "elsewhere"}});
    LaunchDefaults d = detect_ok(both);
    EXPECT_EQ(d.scheduler, "slurm");
    EXPECT_EQ(d.nnodes->value, "2");
    EXPECT_EQ(d.node_rank->value, "1");
    EXPECT_EQ(d.master_addr->value, "gpu07");
    d = detect_ok(with(open_mpi(), {{"PET_NNODES", "3"}, {"RANK", "7"}}));
    EXPECT_EQ(d.scheduler, "mpi");
    EXPECT_EQ(d.node_rank->variable, "OMPI_COMM_WORLD_RANK");
}

TEST(SchedulerKubeflow, ThePodsMasterAndRank) {
    // PET_NNODES reaches detection as the user's value: cli.cpp reads PET_ variables.
    const GivenValues pet = {{"nnodes", "2"}, {"nproc_per_node", "4"}};
    LaunchDefaults d = detect_ok(kubeflow_pod(), pet);
    EXPECT_EQ(d.scheduler, "kubeflow");
    EXPECT_EQ(d.master_addr,
              (DetectedValue{"job-master-0", "MASTER_ADDR", "MASTER_ADDR (Kubeflow)"}));
    EXPECT_EQ(d.master_port, (DetectedValue{"23456", "MASTER_PORT", "MASTER_PORT (Kubeflow)"}));
    EXPECT_EQ(d.node_rank, (DetectedValue{"1", "RANK", "RANK (Kubeflow: the pod's rank)"}));
    // WORLD_SIZE counts processes (8 here), never nodes.
    EXPECT_FALSE(d.nnodes);
    EXPECT_FALSE(d.nproc_per_node);

    // The operator's PET_NODE_RANK (and PET_MASTER_*) win over the plain ones.
    d = detect_ok(
        kubeflow_pod(),
        {{"nnodes", "2"}, {"node_rank", "1"}, {"master_addr", "m"}, {"master_port", "1"}});
    EXPECT_EQ(d.scheduler, "kubeflow");
    EXPECT_FALSE(d.node_rank || d.master_addr || d.master_port);
    // A single pod keeps 127.0.0.1 and a free port.
    d = detect_ok(with(kubeflow_pod(), {{"PET_NNODES", "1"}, {"RANK", "0"}}), {{"nnodes", "1"}});
    EXPECT_FALSE(d.master_addr || d.master_port);
    EXPECT_EQ(d.node_rank->value, "0");
    // Without MASTER_PORT, node 0 picks a free port.
    EXPECT_FALSE(detect_ok(with(kubeflow_pod(), {}, {"MASTER_PORT"}), pet).master_port);
}

// The job's name, from node 0's service name, keeps jobs apart on shared hosts.
TEST(SchedulerKubeflow, TheJobNameGivesTheRunIdAndTheStorePort) {
    const GivenValues pet = {{"nnodes", "2"}};
    LaunchDefaults d = detect_ok(kubeflow_pod(), pet);
    EXPECT_EQ(d.rdzv_id,
              (DetectedValue{"kubeflow-job", "MASTER_ADDR",
                             "derived from the Kubeflow job name in MASTER_ADDR=job-master-0"}));
    EXPECT_EQ(d.rdzv_endpoint->value, fmt::format("job-master-0:{}", job_ports("job").store_port));
    d = detect_ok(with(kubeflow_pod(), {{"MASTER_ADDR", "bert-master-0.team.svc"}}), pet);
    EXPECT_EQ(d.rdzv_id->value, "kubeflow-bert");
    d = detect_ok(with(kubeflow_pod(), {{"MASTER_ADDR", "10.1.2.3"}}), pet);
    EXPECT_EQ(d.rdzv_id->value, "kubeflow-10.1.2.3");
    // The operator's PET_RDZV_ID reaches detection as the user's value and wins.
    EXPECT_FALSE(detect_ok(kubeflow_pod(), {{"nnodes", "2"}, {"rdzv_id", "x"}}).rdzv_id);
}

TEST(SchedulerKubeflow, APlainMasterAddrAloneIsNotKubeflow) {
    // Left in a shell, or set for a worker by another launcher: never read.
    for (const Environment& env :
         {Environment{{"MASTER_ADDR", "x"}, {"MASTER_PORT", "1"}, {"RANK", "3"}},
          Environment{{"MASTER_ADDR", "x"},
                      {"RANK", "3"},
                      {"WORLD_SIZE", "8"},
                      {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "4"}},
          Environment{{"PET_NNODES", "2"}, {"RANK", "1"}}}) {
        SCOPED_TRACE(::testing::PrintToString(env));
        LaunchDefaults d = detect_ok(env, {{"nnodes", "2"}});
        EXPECT_EQ(d.scheduler, "");
        EXPECT_FALSE(d.nnodes || d.node_rank || d.nproc_per_node || d.master_addr || d.master_port);
    }
}

TEST(SchedulerNone, AnEmptyEnvironmentDetectsNothing) {
    LaunchDefaults d = detect_ok({});
    EXPECT_EQ(d.scheduler, "");
    EXPECT_FALSE(d.nnodes || d.node_rank || d.nproc_per_node || d.master_addr || d.master_port);
}

TEST(SchedulerDescribe, OneLineWithEverySource) {
    LaunchConfig config;
    config.scheduler = "slurm";
    config.value_sources = {{"nnodes", "2 (SLURM_NNODES)"}, {"node_rank", "1 (flag --node_rank)"}};
    EXPECT_EQ(describe_value_sources(config),
              "slurm detected: nnodes=2 (SLURM_NNODES), node_rank=1 (flag --node_rank)");
    config.scheduler.clear();
    config.value_sources = {{"nnodes", "1 (default)"}};
    EXPECT_EQ(describe_value_sources(config), "no scheduler detected: nnodes=1 (default)");
}

}  // namespace
}  // namespace ddprun
