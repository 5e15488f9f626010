// What depends on the torch at hand, checked against it: the environment
// workers get, side by side with the same torch's torchrun, and the fix the
// failure summary adds for a known torch error. They run wherever /usr/bin/python3
// has torch, and skip, saying why, where that torch cannot show what they check
// (scripts/platform.sh runs them against Debian 13's and sid's torch 2.x).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
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

class TorchEnvironment : public IntegrationTest {};
class KnownTorchError : public IntegrationTest {};

// The same flags and worker under ddprun and under this torch's torchrun
// (bench/torchrun_compat.py: torchrun as it is, made to start where torch lacks
// libuv). Every variable torchrun gives a worker, ddprun gives with the same value,
// except those listed here with the reason; what ddprun adds is listed too. The
// docs/environment.md says the same.
TEST_F(TorchEnvironment, WorkersGetWhatTorchrunOfTheSameTorchGives) {
    auto version = torch_version();
    if (!version) GTEST_SKIP() << k_python << " cannot import torch";
    if (version->first < 2)
        GTEST_SKIP() << "torch " << version->first << "." << version->second
                     << ": ddprun follows torchrun 2.x's environment (TORCH_NCCL_*, "
                        "TORCHELASTIC_SIGNALS_TO_HANDLE), which this torchrun predates";
    const std::string compat =
        std::string(ddprun_test::build_paths::bench_dir) + "/torchrun_compat.py";
    const std::string port = std::to_string(free_port());
    auto worker = [&](const std::string& launcher) {
        return std::vector<std::string>{"--nproc_per_node=2",
                                        "--master_port=" + port,
                                        "--no-python",
                                        "/bin/sh",
                                        "-c",
                                        "env > " + path(launcher) + ".$RANK"};
    };
    RunOptions options;
    options.timeout = 120s;  // torchrun's own start-up on a busy 2-core machine
    // torch without libuv needs it (torchrun_compat.py); LANG keeps Python from
    // setting LC_CTYPE in the environment torchrun's workers inherit.
    options.env = {{"USE_LIBUV", "0"}, {"LANG", "C.UTF-8"}};

    auto ddprun = run(worker("ddprun"), options);
    ASSERT_EQ(ddprun.exit_code, 0) << ddprun.describe();
    std::vector<std::string> torchrun_argv = {k_python, compat};
    for (auto& word : worker("torchrun")) torchrun_argv.push_back(word);
    auto torchrun = run_command(torchrun_argv, options);
    ASSERT_EQ(torchrun.exit_code, 0) << torchrun.describe();

    // Set by torchrun and by ddprun, to values that differ by design.
    const std::map<std::string, std::string> k_value_differs = {
        {"TORCHELASTIC_ERROR_FILE", "a per-worker path in each launcher's own directory"},
        {"TORCHELASTIC_USE_AGENT_STORE",
         "False: rank 0 hosts its own store at MASTER_ADDR:MASTER_PORT (ddprun's agents "
         "meet in a store of their own)"},
    };
    // Set by ddprun only.
    const std::map<std::string, std::string> k_ddprun_only = {
        {"NODE_RANK", "DESIGN's contract (GROUP_RANK's other name)"},
        {"NNODES", "DESIGN's contract (GROUP_WORLD_SIZE's other name)"},
        {"DDPRUN_ROUND", "the job-wide round"},
        {"PYTHONUNBUFFERED", "workers write to pipes"},
    };
    const std::set<std::string> k_torchrun_only = {};
    // Set by ddprun as the newest torchrun does; an older torchrun (Debian 13's 2.6)
    // predates them and its workers never read them.
    const std::map<std::string, std::pair<int, int>> k_since_torchrun = {
        {"TORCHELASTIC_SIGNALS_TO_HANDLE", {2, 14}},
    };
    auto older_torchrun_lacks = [&](const std::string& name) {
        auto since = k_since_torchrun.find(name);
        return since != k_since_torchrun.end() && *version < since->second;
    };

    for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE("rank " + std::to_string(rank));
        Variables ours = read_environment(path("ddprun." + std::to_string(rank)));
        ours.erase("FAKE_WORKER_PIDFILE");  // the harness's own (IntegrationTest::start)
        Variables theirs = read_environment(path("torchrun." + std::to_string(rank)));
        ASSERT_FALSE(ours.empty()) << ddprun.describe();
        ASSERT_FALSE(theirs.empty()) << torchrun.describe();
        std::set<std::string> missing, unexpected, different;
        // torchrun_compat.py's, not torchrun's: the fix for torch 2.6's store clients
        // (bench/torchrun_site/sitecustomize.py, which a Python worker never sees).
        if (auto site = theirs.find("PYTHONPATH");
            site != theirs.end() &&
            site->second == std::string(ddprun_test::build_paths::bench_dir) + "/torchrun_site")
            theirs.erase(site);
        for (const auto& [name, value] : theirs) {
            auto found = ours.find(name);
            if (found == ours.end()) {
                if (!k_torchrun_only.contains(name)) missing.insert(name);
            } else if (found->second != value && !k_value_differs.contains(name)) {
                different.insert(name + " (" + found->second + " vs " + value + ")");
            }
        }
        for (const auto& [name, value] : ours)
            if (!theirs.contains(name) && !k_ddprun_only.contains(name) &&
                !older_torchrun_lacks(name))
                unexpected.insert(name);
        EXPECT_TRUE(missing.empty()) << "torchrun sets, ddprun does not: " << names(missing);
        EXPECT_TRUE(different.empty())
            << "values differ (ddprun vs torchrun): " << names(different);
        EXPECT_TRUE(unexpected.empty()) << "ddprun sets, torchrun does not: " << names(unexpected);
        for (const auto& [name, why] : k_value_differs) {
            EXPECT_TRUE(ours.contains(name)) << name;
            EXPECT_TRUE(theirs.contains(name)) << name;
        }
    }
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
