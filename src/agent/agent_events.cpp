// The agent's side of --event-log: what each of its seams writes (event_log.hpp
// formats, docs/events.md documents). Kept out of the state machine's files so
// that agent.cpp reads as the decisions it makes, with one call where each is logged.
#include <unistd.h>

#include "agent_impl.hpp"

namespace ddprun {

void Agent::Impl::log_job_start() {
    if (ctx.config.event_log.empty()) return;
    events.open(ctx.config.event_log, ctx.host);
    events.set_node_rank(node_rank);
    events.write("job_start", [&] { return job_start_event(ctx, ::getpid()); });
}

void Agent::Impl::log_workers_started() {
    if (!events.enabled()) return;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& worker : workers.running_workers()) {
        started_at[worker.pid] = now;
        events.write("worker_start", [&] { return worker_start_event(round, worker); });
    }
}

void Agent::Impl::log_worker_end(const WorkerOutcome& outcome) {
    events.write("worker_end", [&] {
        auto started = started_at.find(static_cast<pid_t>(outcome.pid));
        const auto ran = started == started_at.end()
                             ? std::chrono::nanoseconds(0)
                             : std::chrono::steady_clock::now() - started->second;
        return worker_end_event(round, outcome, ran);
    });
}

void Agent::Impl::log_barrier_entered() {
    barrier_entered = std::chrono::steady_clock::now();  // --metrics-port's too
    if (!events.enabled()) return;
    events.write("exit_barrier", [&] { return exit_barrier_event(round, std::nullopt); });
}

void Agent::Impl::log_round_stop() {
    if (barrier_entered)
        last_barrier_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - *barrier_entered)
                .count();
    events.write("stop", [&] { return round_stop_event(round, *stop_event, node_rank); });
    if (barrier_entered)
        events.write("exit_barrier", [&] {
            return exit_barrier_event(round, std::chrono::steady_clock::now() - *barrier_entered);
        });
}

int Agent::Impl::job_end(int exit_code) {
    events.write("job_end",
                 [&] { return job_end_event(exit_code, rounds_run, restart_count(), stop_event); });
    return exit_code;
}

}  // namespace ddprun
