// `ddprun status` (docs/status.md): a running job as its agents publish it in the
// rendezvous store (node_status.hpp), read from any machine that reaches the store.
// It only reads: it never joins, is never counted as a node and writes nothing; a job
// with a secret is read only with that secret. read_job() gathers the records, the
// screen and the JSON are pure functions of what it gathered (tested without a
// job), and run_status() is the command: once, or --watch.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/node_status.hpp"
#include "ddprun/records/records.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

// What one look at the store found.
struct JobView {
    std::string run_id;
    std::string where;        // the store, for the heading
    std::int64_t now_ms = 0;  // the reader's wall clock at the look
    // Node 0's record, and every node's by node rank (node 0's included).
    std::optional<NodeStatus> zero;
    std::vector<std::optional<NodeStatus>> nodes;
    // No record yet (round 0 is being joined): the nodes whose join records are
    // there, and how many the job waits for (0: an elastic job forming its first round).
    std::vector<NodeInfo> joined;
    int joining_nnodes = 0;
};

// One look through `store` (behind the job secret's guard; `with_secret`: this reader
// was given one). Errors: a job that is not there (exit 1: it ended and was cleaned
// up, or never started), records this reader's secret does not open (2), a store that
// stops answering (1).
std::expected<JobView, Error> read_job(Store& store, const std::string& run_id,
                                       const std::string& where, bool with_secret);

// The screen, lines ending in '\n'; `fraction` marks ranks slower than that share of
// the median (the job's --straggler-fraction names them; this only marks).
std::string render_status(const JobView& view, double fraction = 0.5);
// One JSON object, without a newline.
std::string status_json(const JobView& view, double fraction = 0.5);

// The command: reads the job `config` names (its rendezvous options, as its agents
// were given them) and prints it; with `watch` every k_watch_interval until the job
// ends. Under Slurm with no rendezvous option (`rendezvous_given` false) the job is
// the allocation's first step, of k_slurm_steps, whose store answers at the first host
// of SLURM_JOB_NODELIST (the ports and run id its agents derived: schedulers.md).
// Returns the exit code: 0, 1 (no such job) or 2 (bad options, a secret that does
// not open the job's records).
inline constexpr std::chrono::seconds k_watch_interval{2};
inline constexpr int k_slurm_steps = 64;
struct StatusRequest {
    bool watch = false;
    bool json = false;
    bool rendezvous_given = true;
};
int run_status(LaunchConfig config, const Environment& env, const StatusRequest& request);

// Slurm's job steps whose ddprun store may be found: for each step, the run id and
// store endpoint its agents derived (slurm-JOB.STEP, first host:port). Empty when
// `env` is not inside a Slurm allocation; an error for a malformed variable.
struct SlurmStep {
    std::string run_id;
    std::string host;
    int port = 0;
};
std::expected<std::vector<SlurmStep>, Error> slurm_steps(const Environment& env);

}  // namespace ddprun
