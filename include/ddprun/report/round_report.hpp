// RoundReport: what a failed round tells the user, from what the agent saw.
// This node's workers are known from their exits; a root cause on another node
// is known only from its FailureRecord in the store. These functions put the
// two together, so that every node prints the same root cause and exits with
// the same code. Pure: no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ddprun/records/records.hpp"
#include "ddprun/report/report.hpp"

namespace ddprun {

// A worker's failure as the other nodes read it (time: when it was seen).
FailureRecord failure_record(const WorkerOutcome& worker);

// A failure record from the store, as the summary box shows workers.
WorkerOutcome outcome_from(const FailureRecord& record);

struct FailureSummary {
    std::string box;  // format_summary()'s box
    int exit_code = 0;
};

// The summary of a failed round on node `node_rank`: the round's root cause
// (from `stop` when it names a failure, else the earliest of `local`), then
// this node's other failed workers and those of `others` (the other nodes'
// failed workers, where one box speaks for the whole job). nullopt when
// nothing failed. `exit_code`: the job's, when ddprun chose it (format_summary).
std::optional<FailureSummary> summarize_failure(const std::string& title,
                                                const std::optional<StopEvent>& stop,
                                                const std::vector<WorkerOutcome>& local,
                                                int node_rank,
                                                const std::vector<FailureRecord>& others = {},
                                                std::optional<int> exit_code = std::nullopt);

// One line for the log when a round fails and restarts: "rank 3 on host failed (exit code 1)".
std::string describe_failure(const std::optional<StopEvent>& stop,
                             const std::vector<WorkerOutcome>& local);

}  // namespace ddprun
