// AgentEventLog: --event-log as the agent writes it (agent_events.cpp; event_log.hpp
// formats, docs/events.md documents): the log, and what only its events need, each
// of this round's workers' start, this node's entry into the exit barrier and the
// rounds run. Without --event-log nothing is written, and no event's fields are
// made.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/events/event_log.hpp"

namespace ddprun {

class AgentEventLog {
  public:
    using Clock = std::chrono::steady_clock;

    // Opens the log (--event-log) and writes the job's start.
    void job_start(const LaunchContext& ctx, int node_rank);
    bool enabled() const { return m_log.enabled(); }
    // Any other event, now: `make_fields` is not called when the log is off.
    template <class MakeFields>
    void write(std::string_view event, MakeFields&& make_fields) {
        m_log.write(event, std::forward<MakeFields>(make_fields));
    }

    // A round was joined (its number, this node's rank in it): counted and written.
    void round(const RoundInfo& info, int node_rank);
    // The round's clocks start anew.
    void round_begins();
    void workers_started(int round, const std::vector<WorkerGroup::Running>& workers);
    void worker_ended(int round, const WorkerOutcome& outcome);
    // Kept with the log off too: /metrics reports the barrier's length (round_stopped).
    void barrier_entered(int round);
    // The round's stop; and the barrier left, if entered: how long this node was in it.
    std::optional<std::chrono::duration<double>> round_stopped(int round, const StopEvent& stop,
                                                               int node_rank);
    // Returns `exit_code`.
    int job_end(int exit_code, int restarts, const std::optional<StopEvent>& stop);

  private:
    EventLog m_log;
    int m_rounds_run = 0;
    std::map<pid_t, Clock::time_point> m_started_at;  // this round's workers
    std::optional<Clock::time_point> m_barrier_entered;
};

}  // namespace ddprun
