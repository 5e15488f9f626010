// A failed round's report (see round_report.hpp).
#include "ddprun/report/round_report.hpp"

#include <fmt/format.h>

namespace ddprun {

FailureRecord failure_record(const WorkerOutcome& worker) {
    FailureRecord record;
    record.kind = FailureKind::Worker;
    record.node_rank = worker.node_rank;
    record.host = worker.host;
    record.rank = worker.rank;
    record.local_rank = worker.local_rank;
    record.pid = worker.pid;
    record.exit_code = exit_code_of(worker);
    record.signal = worker.signal;
    record.time_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(worker.time.time_since_epoch())
            .count();
    record.message = worker.error_message;
    record.stderr_tail = worker.stderr_tail;
    record.stopped_by_ddprun = worker.stopped_by_ddprun;
    record.oom = worker.oom;
    record.report_lines = worker.report_lines;
    record.report_lines_total = static_cast<std::int64_t>(worker.report_lines_total);
    return record;
}

WorkerOutcome outcome_from(const FailureRecord& record) {
    WorkerOutcome o;
    o.rank = record.rank;
    o.local_rank = record.local_rank;
    o.node_rank = record.node_rank;
    o.host = record.host;
    o.pid = static_cast<int>(record.pid);
    o.signal = record.signal;
    o.exit_code = record.signal ? 0 : record.exit_code;
    o.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(record.time_ms));
    o.error_message = record.message;
    o.stderr_tail = record.stderr_tail;
    o.stopped_by_ddprun = record.stopped_by_ddprun;
    o.oom = record.oom;
    o.report_lines = record.report_lines;
    o.report_lines_total = static_cast<std::size_t>(record.report_lines_total);
    return o;
}

namespace {

const FailureRecord* failure_of(const std::optional<StopEvent>& stop) {
    return stop && stop->kind == StopEvent::Kind::Failure ? &stop->failure : nullptr;
}

}  // namespace

std::optional<FailureSummary> summarize_failure(const std::string& title,
                                                const std::optional<StopEvent>& stop,
                                                const std::vector<WorkerOutcome>& local,
                                                int node_rank,
                                                const std::vector<FailureRecord>& others,
                                                std::optional<int> exit_code) {
    std::vector<WorkerOutcome> outcomes;
    std::optional<std::size_t> root;
    const FailureRecord* cause = failure_of(stop);
    if (cause && cause->node_rank != node_rank) {
        // The root cause happened on another node: its record came through the store.
        outcomes.push_back(outcome_from(*cause));
        root = 0;
    }
    for (const auto& w : local) {
        if (!w.failed()) continue;
        if (cause && cause->node_rank == node_rank && cause->rank == w.rank) root = outcomes.size();
        outcomes.push_back(w);
    }
    for (const auto& record : others) {
        // The root cause is listed already, from the round's stop (with its stderr).
        if (cause && cause->node_rank == record.node_rank && cause->rank == record.rank) continue;
        outcomes.push_back(outcome_from(record));
    }
    if (!root) root = root_cause(outcomes);
    if (!root) return std::nullopt;
    return FailureSummary{format_summary(title, outcomes, *root, exit_code),
                          exit_code.value_or(exit_code_of(outcomes[*root]))};
}

std::string describe_failure(const std::optional<StopEvent>& stop,
                             const std::vector<WorkerOutcome>& local) {
    auto describe = [](const WorkerOutcome& o) {
        return fmt::format(
            "rank {} on {} failed ({}{})", o.rank, o.host,
            o.signal ? signal_name(o.signal) : fmt::format("exit code {}", o.exit_code),
            o.oom.empty() ? "" : ", killed by the kernel's OOM killer");
    };
    if (const FailureRecord* cause = failure_of(stop)) return describe(outcome_from(*cause));
    auto root = root_cause(local);
    return root ? describe(local[*root]) : std::string("a worker failed");
}

}  // namespace ddprun
