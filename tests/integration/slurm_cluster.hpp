// A real Slurm cluster for the scheduler tests: munged, slurmctld and two
// slurmd (nodes n1 and n2) on loopback, in a temp dir with its own free ports,
// so that ddprun is tested under srun, sbatch and scancel as users run it, not
// under an imitation of Slurm's environment. The daemons belong to a keeper
// process (slurm_keeper.hpp), so that none outlives the test binary.
//
// The node names must resolve (ddprun makes node 0's Slurm name MASTER_ADDR):
// the keeper adds them to /etc/hosts for as long as the cluster runs.
//
// Its files (configuration, state, spool, logs) live in one temp dir, removed
// when the cluster stops cleanly; a cluster that failed to start, or whose
// test binary died, leaves it for its logs (or DDPRUN_TEST_KEEP_SLURM_DIR=1).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "slurm_keeper.hpp"

namespace ddprun_it {

struct SlurmClusterOptions {
    // ProctrackType without "proctrack/": linuxproc, pgid or cgroup.
    std::string proctrack = "linuxproc";
    // Slurm's KillWait: the time between scancel's SIGTERM and its SIGKILL.
    int kill_wait_seconds = 10;
    // CPUs each node claims: enough for several jobs to share the two nodes.
    int cpus_per_node = 8;
};

// One daemon of the cluster as the keeper started it.
struct SlurmDaemon {
    std::string name;  // "munged", "slurmctld", "slurmd n1", ...
    pid_t pid = -1;
    std::string log;  // its log file (stdout and stderr go there too)
};

class SlurmCluster {
  public:
    explicit SlurmCluster(SlurmClusterOptions options);
    // Stops the cluster if it runs.
    ~SlurmCluster();
    SlurmCluster(const SlurmCluster&) = delete;
    SlurmCluster& operator=(const SlurmCluster&) = delete;

    // Starts the cluster and waits (bounded) until both nodes are idle and a
    // trivial two-node step runs. Empty when the cluster is up; otherwise why
    // it cannot run here (not root, a program missing, a daemon that did not
    // come up, with the lines of its log that say why). Whatever was started is
    // stopped again before it returns an error.
    std::string start();
    // Cancels every job, waits (bounded) until none is left, then has the keeper
    // stop the daemons. Idempotent.
    void stop();
    bool running() const { return m_keeper.running(); }

    const SlurmClusterOptions& options() const { return m_options; }
    const std::string& dir() const { return m_dir; }
    std::string conf_path() const { return m_dir + "/slurm.conf"; }
    // The node names in node order: n1 (SLURM_NODEID 0), n2.
    const std::vector<std::string>& nodes() const { return m_nodes; }
    const std::vector<SlurmDaemon>& daemons() const { return m_daemons; }

    // What every Slurm client (srun, sbatch, scancel, ...) needs in its
    // environment to talk to this cluster: SLURM_CONF.
    std::vector<std::pair<std::string, std::string>> client_env() const;
    // Runs a Slurm client to completion, bounded; argv[0] is found on PATH.
    RunResult client(const std::vector<std::string>& argv, Milliseconds timeout = 30s) const;

    // `scontrol show job ID`'s JobState, e.g. RUNNING or COMPLETED; nullopt
    // when slurmctld does not know the job.
    std::optional<std::string> job_state(const std::string& job_id) const;
    // `scontrol show job ID`'s ExitCode, e.g. "3:0"; nullopt when unknown.
    std::optional<std::string> job_exit_code(const std::string& job_id) const;
    // Waits (bounded) until the job has ended (not pending, running, completing
    // ...); its final JobState, or nullopt if it did not end in time.
    std::optional<std::string> wait_job_end(const std::string& job_id, Milliseconds timeout) const;
    // The ids of the jobs named `name` (squeue -n), in submission order.
    std::vector<std::string> job_ids_named(const std::string& name) const;

    // The last lines of every daemon's log, for a failure message.
    std::string describe_logs(std::size_t lines_each = 15) const;
    // For a failed test: which daemons are gone and the end of every log;
    // the cluster's files are kept for inspection.
    std::string failure_report();

  private:
    std::string check_prerequisites() const;
    std::string write_config();
    std::optional<SlurmDaemon> start_daemon(std::size_t index, std::string& error);
    std::string wait_ready();
    std::string daemon_died() const;

    SlurmClusterOptions m_options;
    std::vector<std::string> m_nodes = {"n1", "n2"};
    std::string m_dir;
    int m_controller_port = 0;
    int m_first_node_port = 0;
    std::vector<DaemonSpec> m_specs;  // what the keeper starts, in order
    std::vector<SlurmDaemon> m_daemons;
    Keeper m_keeper;
    bool m_keep_dir = false;  // a failed start or test keeps the logs for inspection
};

// The cluster this run of ddprun_scheduler_tests started (main's --proctrack),
// or nullptr with the reason in `why_not` (no --proctrack, or the cluster could
// not start here); tests skip with that reason.
SlurmCluster* shared_slurm_cluster(std::string& why_not);

// The full path of `program` on PATH (or /usr/sbin, /sbin, where the daemons
// live); empty when not found.
std::string find_program(const std::string& program);

}  // namespace ddprun_it
