// What depends on the torch at hand, checked against it: the environment
// workers get, side by side with the same torch's torchrun, and the fix the
// failure summary adds for a known torch error. They run wherever /usr/bin/python3
// has torch, and skip, saying why, where that torch cannot show what they check
// (scripts/platform.sh runs them against Debian 13's and sid's torch 2.x).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

using Variables = std::map<std::string, std::string>;

// The torch /usr/bin/python3 imports, as (major, minor); nothing without one.
std::optional<std::pair<int, int>> torch_version() {
    RunOptions options;
    options.timeout = 60s;
    auto r = run_command(
        {k_python, "-c", "import torch; v = torch.__version__.split('.'); print(v[0], v[1])"},
        options);
    int major = 0, minor = 0;
    if (r.exit_code != 0 || std::sscanf(r.out.c_str(), "%d %d", &major, &minor) != 2)
        return std::nullopt;
    return std::pair{major, minor};
}

Variables read_environment(const std::string& file) {
    Variables variables;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
        auto equals = line.find('=');
        if (equals != std::string::npos)
            variables[line.substr(0, equals)] = line.substr(equals + 1);
    }
    return variables;
}

std::string names(const std::set<std::string>& set) {
    std::string text;
    for (const auto& name : set) text += (text.empty() ? "" : ", ") + name;
    return text.empty() ? "none" : text;
}

// Set by ddprun only, and why (docs/environment.md says the same).
const std::map<std::string, std::string> k_ddprun_only = {
    {"NODE_RANK", "DESIGN's contract (GROUP_RANK's other name)"},
    {"NNODES", "DESIGN's contract (GROUP_WORLD_SIZE's other name)"},
    {"DDPRUN_ROUND", "the job-wide round"},
    {"PYTHONUNBUFFERED", "workers write to pipes"},
};
// Set by ddprun as the newest torchrun does; an older torchrun (Debian 13's 2.6)
// predates them and its workers never read them.
const std::map<std::string, std::pair<int, int>> k_since_torchrun = {
    {"TORCHELASTIC_SIGNALS_TO_HANDLE", {2, 14}},
};

// Every variable torchrun gave rank `rank` ddprun gives with the same value, except
// those of `value_differs` (set by both); and ddprun adds only k_ddprun_only's.
void expect_same_environment(const std::string& dir, int rank, std::pair<int, int> version,
                             const std::map<std::string, std::string>& value_differs) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Variables ours = read_environment(dir + "/ddprun." + std::to_string(rank));
    ours.erase("FAKE_WORKER_PIDFILE");  // the harness's own (IntegrationTest::start)
    Variables theirs = read_environment(dir + "/torchrun." + std::to_string(rank));
    theirs.erase("FAKE_WORKER_PIDFILE");  // where the harness started torchrun too
    ASSERT_FALSE(ours.empty());
    ASSERT_FALSE(theirs.empty());
    // torchrun_compat.py's, not torchrun's: the fix for torch 2.6's store clients
    // (bench/torchrun_site/sitecustomize.py, which a Python worker never sees).
    if (auto site = theirs.find("PYTHONPATH");
        site != theirs.end() &&
        site->second == std::string(ddprun_test::build_paths::bench_dir) + "/torchrun_site")
        theirs.erase(site);
    std::set<std::string> missing, unexpected, different;
    for (const auto& [name, value] : theirs) {
        auto found = ours.find(name);
        if (found == ours.end())
            missing.insert(name);
        else if (found->second != value && !value_differs.contains(name))
            different.insert(name + " (" + found->second + " vs " + value + ")");
    }
    for (const auto& [name, value] : ours) {
        auto since = k_since_torchrun.find(name);
        const bool older_torchrun_lacks =
            since != k_since_torchrun.end() && version < since->second;
        if (!theirs.contains(name) && !k_ddprun_only.contains(name) && !older_torchrun_lacks)
            unexpected.insert(name);
    }
    EXPECT_TRUE(missing.empty()) << "torchrun sets, ddprun does not: " << names(missing);
    EXPECT_TRUE(different.empty()) << "values differ (ddprun vs torchrun): " << names(different);
    EXPECT_TRUE(unexpected.empty()) << "ddprun sets, torchrun does not: " << names(unexpected);
    for (const auto& [name, why] : value_differs) {
        EXPECT_TRUE(ours.contains(name)) << name;
        EXPECT_TRUE(theirs.contains(name)) << name;
    }
}

class TorchEnvironment : public IntegrationTest {
  protected:
    // The worker both launchers run: it writes its environment to <dir>/<launcher>.<RANK>.
    std::vector<std::string> env_writer(const std::string& launcher) {
        return {"--no-python", "/bin/sh", "-c", "env > " + path(launcher) + ".$RANK"};
    }
    std::vector<std::string> torchrun(const std::vector<std::string>& flags) const {
        std::vector<std::string> argv = {
            k_python, std::string(ddprun_test::build_paths::bench_dir) + "/torchrun_compat.py"};
        argv.insert(argv.end(), flags.begin(), flags.end());
        return argv;
    }
    void SetUp() override {
        IntegrationTest::SetUp();
        auto found = torch_version();
        if (!found) GTEST_SKIP() << k_python << " cannot import torch";
        if (found->first < 2)
            GTEST_SKIP() << "torch " << found->first << "." << found->second
                         << ": ddprun follows torchrun 2.x's environment (TORCH_NCCL_*, "
                            "TORCHELASTIC_SIGNALS_TO_HANDLE), which this torchrun predates";
        version = *found;
        // torch without libuv needs it (torchrun_compat.py); LANG keeps Python from
        // setting LC_CTYPE in the environment torchrun's workers inherit.
        options.env = {{"USE_LIBUV", "0"}, {"LANG", "C.UTF-8"}};
        options.timeout = 120s;  // torchrun's own start-up on a busy 2-core machine
    }
    std::pair<int, int> version;
    RunOptions options;
};
class KnownTorchError : public IntegrationTest {};

// The same flags and worker under ddprun and under this torch's torchrun
// (bench/torchrun_compat.py: torchrun as it is, made to start where torch lacks
// libuv), on one node.
TEST_F(TorchEnvironment, WorkersGetWhatTorchrunOfTheSameTorchGives) {
    const std::vector<std::string> flags = {"--nproc_per_node=2",
                                            "--master_port=" + std::to_string(free_port())};
    auto with = [&](std::vector<std::string> worker) {
        worker.insert(worker.begin(), flags.begin(), flags.end());
        return worker;
    };
    auto ddprun = run(with(env_writer("ddprun")), options);
    ASSERT_EQ(ddprun.exit_code, 0) << ddprun.describe();
    auto theirs = run_command(torchrun(with(env_writer("torchrun"))), options);
    ASSERT_EQ(theirs.exit_code, 0) << theirs.describe();
    const std::map<std::string, std::string> value_differs = {
        {"TORCHELASTIC_ERROR_FILE", "a per-worker path in each launcher's own directory"},
        {"TORCHELASTIC_USE_AGENT_STORE",
         "one node: False, rank 0 hosts its own store at MASTER_ADDR:MASTER_PORT (ddprun "
         "loads no libtorch for a single node)"},
    };
    for (int rank = 0; rank < 2; ++rank)
        expect_same_environment(m_dir, rank, version, value_differs);
}

// Two nodes of two over the c10d rendezvous, node 0 on 127.0.0.1 and node 1 on
// 127.0.0.2 (torchrun orders its nodes by address): every rank's environment key by
// key. Both launchers pick MASTER_PORT afresh; where torch's clients of a shared store
// cannot start (no libuv) ddprun keeps rank 0's store (worker_store.hpp).
TEST_F(TorchEnvironment, TwoNodesOfTwoGetWhatTorchrunOfTheSameTorchGives) {
    auto run_job = [&](const std::string& launcher) {
        const std::string endpoint = "--rdzv_endpoint=127.0.0.1:" + std::to_string(free_port());
        std::vector<std::unique_ptr<DdprunProcess>> nodes;
        for (int node : {0, 1}) {
            std::vector<std::string> argv = {"--nnodes=2",
                                             "--nproc_per_node=2",
                                             "--rdzv_backend=c10d",
                                             endpoint,
                                             "--rdzv_id=env2x2",
                                             "--local_addr=127.0.0." + std::to_string(node + 1),
                                             "--node_rank=" + std::to_string(node)};
            auto worker = env_writer(launcher);
            argv.insert(argv.end(), worker.begin(), worker.end());
            RunOptions with = options;
            if (launcher == "torchrun") {
                auto command = torchrun(argv);
                with.program = command.front();
                argv.assign(command.begin() + 1, command.end());
            }
            nodes.push_back(start(argv, with));
        }
        std::vector<DdprunProcess*> raw;
        for (auto& node : nodes) raw.push_back(node.get());
        return wait_all(raw);
    };
    for (const std::string launcher : {"ddprun", "torchrun"}) {
        auto results = run_job(launcher);
        for (const auto& result : results) ASSERT_EQ(result.exit_code, 0) << result.describe();
    }
    std::map<std::string, std::string> value_differs = {
        {"TORCHELASTIC_ERROR_FILE", "a per-worker path in each launcher's own directory"},
        {"MASTER_PORT", "a free port each launcher picks for the job"},
    };
    if (!torch_defaults_start())
        value_differs.emplace(
            "TORCHELASTIC_USE_AGENT_STORE",
            "torch without libuv: False, rank 0 hosts (torch's own client of a shared store "
            "asks for libuv there; TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0 shares)");
    for (int rank = 0; rank < 4; ++rank)
        expect_same_environment(m_dir, rank, version, value_differs);
}

// torch 2.4 and later default TCPStore to libuv; a torch built without it (Debian's)
// fails every init_process_group(env://) unless USE_LIBUV=0. The summary says so.
TEST_F(KnownTorchError, AStoreWithoutLibuvGetsItsFixInTheSummary) {
    auto version = torch_version();
    if (!version) GTEST_SKIP() << k_python << " cannot import torch";
    RunOptions options;
    options.timeout = 120s;
    options.env = {{"PYTHON_EXEC", k_python}};
    options.unset_env = {"USE_LIBUV"};
    const std::string script = path("init.py");
    std::ofstream(script) << "import torch.distributed as dist\n"
                             "dist.init_process_group('gloo')\n"
                             "dist.destroy_process_group()\n";
    auto r = run({"--nproc_per_node=1", "--master_port=" + std::to_string(free_port()), script},
                 options);
    if (r.exit_code == 0)
        GTEST_SKIP() << "torch " << version->first << "." << version->second
                     << " starts its store without USE_LIBUV=0 here (it has libuv, or predates "
                        "the libuv default)";
    ASSERT_TRUE(contains(r.err, "use_libuv was requested")) << r.describe();
    EXPECT_TRUE(contains(ddprun_messages(r.err),
                         "fix:       this torch has no libuv: export USE_LIBUV=0 before ddprun"))
        << r.describe();
    // And with the fix, the same worker runs.
    options.env.emplace_back("USE_LIBUV", "0");
    options.unset_env.clear();
    auto fixed = run({"--nproc_per_node=1", "--master_port=" + std::to_string(free_port()), script},
                     options);
    EXPECT_EQ(fixed.exit_code, 0) << fixed.describe();
}

}  // namespace
}  // namespace ddprun_it
