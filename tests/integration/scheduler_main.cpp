// main of ddprun_scheduler_tests, the tests of ddprun under real schedulers
// (test_slurm.cpp, test_mpi.cpp).
//
// Starting a Slurm cluster takes seconds, so one starts per run, not per test:
// `--proctrack=linuxproc|pgid|cgroup` starts it (with that ProctrackType)
// before the first test and stops it after the last. Without the flag the
// Slurm tests skip and the Open MPI tests run alone. CTest runs the binary
// once per ProctrackType (tests/CMakeLists.txt).
//
// `--proctrack=NAME --hold` runs no test: it starts the cluster, prints the
// SLURM_CONF to export for trying srun, sbatch and scancel by hand, and stops
// it again when its standard input ends (Enter, Ctrl-D or Ctrl-C).

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "slurm_cluster.hpp"

namespace ddprun_it {
namespace {

class SlurmEnvironment : public ::testing::Environment {
  public:
    explicit SlurmEnvironment(std::string proctrack)
        : m_cluster(SlurmClusterOptions{.proctrack = std::move(proctrack)}) {}

    void SetUp() override {
        auto started = std::chrono::steady_clock::now();
        m_why_not = m_cluster.start();
        if (m_why_not.empty()) {
            std::printf(
                "slurm cluster with proctrack/%s up in %lld ms (%s)\n",
                m_cluster.options().proctrack.c_str(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started)
                                           .count()),
                m_cluster.dir().c_str());
        } else {
            std::fprintf(stderr, "the Slurm tests skip: no cluster with proctrack/%s: %s\n",
                         m_cluster.options().proctrack.c_str(), m_why_not.c_str());
        }
    }
    void TearDown() override { m_cluster.stop(); }

    SlurmCluster* cluster(std::string& why_not) {
        why_not = m_why_not;
        return m_cluster.running() ? &m_cluster : nullptr;
    }
    void stop() { m_cluster.stop(); }

  private:
    SlurmCluster m_cluster;
    std::string m_why_not;
};

// Set once by main before any test runs; gtest owns the object. The only
// global: gtest's environments have no other way to reach the tests.
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
SlurmEnvironment* g_slurm = nullptr;

}  // namespace

SlurmCluster* shared_slurm_cluster(std::string& why_not) {
    if (!g_slurm) {
        why_not =
            "no Slurm cluster in this run (ddprun_scheduler_tests "
            "--proctrack=linuxproc|pgid|cgroup "
            "starts one)";
        return nullptr;
    }
    SlurmCluster* cluster = g_slurm->cluster(why_not);
    if (!cluster && why_not.empty()) why_not = "the Slurm cluster is not running";
    return cluster;
}

int hold_cluster(const std::string& proctrack) {
    SlurmCluster cluster(SlurmClusterOptions{.proctrack = proctrack});
    std::string why_not = cluster.start();
    if (!why_not.empty()) {
        std::fprintf(stderr, "no cluster: %s\n", why_not.c_str());
        return 1;
    }
    std::printf(
        "slurm cluster with proctrack/%s up (nodes n1 n2); in another shell:\n"
        "  export SLURM_CONF=%s\n"
        "press Enter (or end standard input) to stop it\n",
        proctrack.c_str(), cluster.conf_path().c_str());
    std::fflush(stdout);
    // A signal ends the wait like end of input: the destructor stops the cluster.
    struct sigaction action {};
    action.sa_handler = [](int) {};
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: the signal interrupts the read
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
    std::getchar();
    return 0;
}

}  // namespace ddprun_it

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    std::string proctrack;  // empty: no cluster
    bool hold = false;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        if (arg == "--hold") {
            hold = true;
        } else if (arg.starts_with("--proctrack=")) {
            proctrack = arg.substr(12);
            if (proctrack != "linuxproc" && proctrack != "pgid" && proctrack != "cgroup") {
                std::fprintf(stderr, "--proctrack=%s: expected linuxproc, pgid or cgroup\n",
                             proctrack.c_str());
                return 2;
            }
        } else {
            std::fprintf(stderr, "unknown argument %s (expected --proctrack=NAME or gtest flags)\n",
                         argv[i]);
            return 2;
        }
    }
    if (hold) return ddprun_it::hold_cluster(proctrack.empty() ? "linuxproc" : proctrack);
    if (!proctrack.empty()) {
        ddprun_it::g_slurm = new ddprun_it::SlurmEnvironment(proctrack);
        ::testing::AddGlobalTestEnvironment(ddprun_it::g_slurm);
        // A run that ends through exit() skips the environment's TearDown; a
        // crash or a SIGKILL skips this too, and the cluster's keeper process
        // cleans up then (slurm_cluster.hpp).
        std::atexit([] { ddprun_it::g_slurm->stop(); });
    }
    return RUN_ALL_TESTS();
}
