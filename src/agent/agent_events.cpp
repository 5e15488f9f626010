// The agent's side of --event-log: what each of its seams writes (event_log.hpp
// formats, docs/events.md documents). Kept out of the state machine's files so
// that agent.cpp reads as the decisions it makes, with one call where each is logged.
#include <unistd.h>

#include "agent_event_log.hpp"
#include "agent_impl.hpp"

namespace ddprun {

void AgentEventLog::job_start(const LaunchContext& ctx, int node_rank) {
    if (ctx.config.event_log.empty()) return;
    m_log.open(ctx.config.event_log, ctx.host);
    m_log.set_node_rank(node_rank);
    m_log.write("job_start", [&] { return job_start_event(ctx, ::getpid()); });
}

void AgentEventLog::round(const RoundInfo& info, int node_rank) {
    ++m_rounds_run;
    m_log.set_node_rank(node_rank);
    m_log.write("round", [&] { return round_event(info); });
}

void AgentEventLog::round_begins() {
    m_started_at.clear();
    m_barrier_entered.reset();
}

void AgentEventLog::workers_started(int round, const std::vector<WorkerGroup::Running>& workers) {
    if (!enabled()) return;
    const auto now = Clock::now();
    for (const auto& worker : workers) {
        m_started_at[worker.pid] = now;
        m_log.write("worker_start", [&] { return worker_start_event(round, worker); });
    }
}

void AgentEventLog::worker_ended(int round, const WorkerOutcome& outcome) {
    m_log.write("worker_end", [&] {
        auto started = m_started_at.find(static_cast<pid_t>(outcome.pid));
        const auto ran = started == m_started_at.end() ? std::chrono::nanoseconds(0)
                                                       : Clock::now() - started->second;
        return worker_end_event(round, outcome, ran);
    });
}

void AgentEventLog::barrier_entered(int round) {
    m_barrier_entered = Clock::now();
    m_log.write("exit_barrier", [&] { return exit_barrier_event(round, std::nullopt); });
}

std::optional<std::chrono::duration<double>> AgentEventLog::round_stopped(int round,
                                                                          const StopEvent& stop,
                                                                          int node_rank) {
    std::optional<std::chrono::duration<double>> in_barrier;
    if (m_barrier_entered) in_barrier = Clock::now() - *m_barrier_entered;
    m_log.write("stop", [&] { return round_stop_event(round, stop, node_rank); });
    if (m_barrier_entered)
        m_log.write("exit_barrier",
                    [&] { return exit_barrier_event(round, Clock::now() - *m_barrier_entered); });
    return in_barrier;
}

int AgentEventLog::job_end(int exit_code, int restarts, const std::optional<StopEvent>& stop) {
    m_log.write("job_end", [&] { return job_end_event(exit_code, m_rounds_run, restarts, stop); });
    return exit_code;
}

void Agent::Impl::log_round_stop() {
    if (auto in_barrier = events.round_stopped(round, *stop_event, node_rank))
        last_barrier_seconds = in_barrier->count();
}

int Agent::Impl::job_end(int exit_code) {
    return events.job_end(exit_code, restart_count(), stop_event);
}

}  // namespace ddprun
