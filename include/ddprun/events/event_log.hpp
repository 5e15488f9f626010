// EventLog: --event-log PATH, this node's part of the job as one JSON object per
// line, for an operator's monitoring (torchrun's events API is the model). Each
// line is appended with one write(2) as the event happens, starts with its time
// (UTC, nanoseconds) and names the node, so that every node's file merges with
// `sort`. docs/events.md is the schema; k_event_schema its version.
//
// The builders (*_event) are pure: what the agent knows in, the event's own
// fields out. EventLog is the one writer. A log that cannot be opened or
// written (a full disk) costs one warning and is off from then on: the job
// never fails for its log.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/base/fd.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/records/node_status.hpp"
#include "ddprun/records/records.hpp"
#include "ddprun/report/report.hpp"
#include "ddprun/workers/worker_group.hpp"

namespace ddprun {

// Bumped when a field changes meaning or goes away; new fields and events do not bump it.
inline constexpr int k_event_schema = 1;

// Fields in the order they are written ("time" first, so `sort` orders lines).
using EventFields = nlohmann::ordered_json;
using EventTime = std::chrono::system_clock::time_point;

// "2026-12-01T23:20:02.123456789Z": RFC 3339, UTC, always nine fractional digits,
// so that the text sorts as the time does.
std::string format_event_time(EventTime time);

// Where a line comes from: on every line.
struct EventNode {
    int node_rank = -1;  // -1 until the first round assigns it
    std::string host;
};

// One line: {"time", "schema", "event", "node_rank", "host", then `fields`}, with '\n'.
std::string format_event_line(EventTime time, const EventNode& node, std::string_view event,
                              const EventFields& fields);

// The builders, one per event of docs/events.md.
EventFields job_start_event(const LaunchContext& context, std::int64_t agent_pid);
EventFields round_event(const RoundInfo& info);
EventFields worker_start_event(int round, const WorkerGroup::Running& worker);
EventFields worker_end_event(int round, const WorkerOutcome& outcome,
                             std::chrono::nanoseconds duration);
// This node's first failure of a round, as it tells the others.
EventFields failure_event(int round, const FailureRecord& record);
// How the round ended job-wide, as it reached this node (`node_rank`: this one):
// a stop from another node's failure is the failure's propagation.
EventFields round_stop_event(int round, const StopEvent& stop, int node_rank);
EventFields restart_event(int round, int restart, int max_restarts, std::string_view reason);
EventFields membership_change_event(int round, std::string_view change);
// --max-no-progress-restarts: whether the failed `round` made progress job-wide, the
// restarts in a row without it so far, and whether the job stops for it.
EventFields progress_event(int round, bool made_progress, int restarts_without_progress,
                           int max_no_progress_restarts);
EventFields hang_event(int round, const FailureRecord& cause);
// Node 0 named a straggler, or one recovered (straggler.hpp): "straggler" and
// "straggler_recovered" carry the same fields.
EventFields straggler_event(int round, const Straggler& straggler);
// --health-check before joining `round`: its verdict, how it ended ("passed", "exited
// with 1", ...), its exit code (none when killed or never started), and its last lines.
EventFields health_check_event(int round, bool healthy, std::string_view outcome,
                               std::optional<int> exit_code, std::chrono::milliseconds took,
                               const std::vector<std::string>& lines);
// `waited`: set when the barrier was left (the time since it was entered).
EventFields exit_barrier_event(int round, std::optional<std::chrono::nanoseconds> waited);
// `stop`: how the last round ended (its root cause), if it did.
EventFields job_end_event(int exit_code, int rounds, int restarts,
                          const std::optional<StopEvent>& stop);

// The root cause of a failure, as every event that names one writes it.
EventFields failure_fields(const FailureRecord& record);

class EventLog {
  public:
    EventLog() = default;  // off

    // Opens `path` for appending (created 0644 if missing). On failure: one
    // warning, and the log stays off.
    void open(const std::string& path, std::string host);
    bool enabled() const { return static_cast<bool>(m_fd); }
    void set_node_rank(int node_rank) { m_node.node_rank = node_rank; }

    // Writes `event` with the fields make_fields() returns, now; make_fields is
    // not called when the log is off, so an agent without --event-log pays nothing.
    template <class MakeFields>
    void write(std::string_view event, MakeFields&& make_fields) {
        if (enabled()) write_line(event, std::forward<MakeFields>(make_fields)());
    }

  private:
    void write_line(std::string_view event, const EventFields& fields);

    UniqueFd m_fd;
    std::string m_path;
    EventNode m_node;
};

}  // namespace ddprun
