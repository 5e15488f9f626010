// The agent's side of --metrics-port (metrics_server.hpp, docs/metrics.md): the
// server started with the agent, and the snapshot it answers from, taken on the
// agent's loop from the state the agent keeps anyway.
#include <fmt/format.h>

#include "agent_impl.hpp"
#include "ddprun/base/logging.hpp"

namespace ddprun {
namespace {

double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

// ddprun_worker_exits_total's cause (metrics.hpp's k_exit_causes).
std::string exit_cause(const WorkerOutcome& outcome) {
    if (outcome.stopped_by_ddprun) return "stopped";
    if (!outcome.oom.empty()) return "oom";
    if (outcome.signal != 0) return "signal";
    if (outcome.exit_code != 0) return "failure";
    return "success";
}

}  // namespace

std::optional<int> Agent::Impl::serve_metrics() {
    if (!ctx.config.metrics_port) return std::nullopt;
    // Where the others reach this node, when given; every address otherwise.
    const std::string address =
        ctx.config.local_addr.empty() ? std::string("0.0.0.0") : ctx.config.local_addr;
    auto started =
        MetricsServer::start(io, address, *ctx.config.metrics_port, [this] { return snapshot(); });
    if (!started) {
        spdlog::error("{}", started.error().message);
        return started.error().exit_code;
    }
    metrics = std::move(*started);
    spdlog::info("metrics at http://{}:{}/metrics, health at /healthz", address, metrics->port());
    return std::nullopt;
}

void Agent::Impl::count_exit(const WorkerOutcome& outcome) {
    ++exits_by_cause[exit_cause(outcome)];
}

AgentSnapshot Agent::Impl::snapshot() {
    AgentSnapshot s;
    s.run_id = ctx.config.rdzv_id;
    s.host = ctx.host;
    s.node_rank = node_rank;
    switch (phase) {
        case Phase::Connecting:
            s.state = JobState::Connecting;
            break;
        case Phase::Checking:
            s.state = JobState::Checking;
            break;
        case Phase::Joining:
            s.state = JobState::Joining;
            break;
        case Phase::Running:
            s.state = JobState::Running;
            break;
        case Phase::Stopping:
        case Phase::Killing:
            s.state = JobState::Stopping;
            break;
        case Phase::Done:
            s.state = JobState::Between;
            break;
    }
    if (stop_event && (stop_event->kind == StopEvent::Kind::Failure ||
                       stop_event->kind == StopEvent::Kind::Abort ||
                       stop_event->kind == StopEvent::Kind::StoreLost)) {
        s.healthy = false;
        s.unhealthy_why =
            stop_event->kind == StopEvent::Kind::Failure
                ? fmt::format("rank {} failed; the round stops", stop_event->failure.rank)
                : stop_event->message;
    }
    s.round = round;
    s.restarts = restart_count();
    s.workers = ctx.nproc;
    s.workers_alive = static_cast<int>(workers.running());
    s.worker_exits = exits_by_cause;
    if (phase == Phase::Running && ctx.config.hang_timeout.count() > 0) {
        const auto now = HangMonitor::Clock::now();
        for (auto& beat : workers.read_beats())
            hang_monitor.beat(beat.rank, now, beat.label, beat.lines);
        for (const auto& rate : hang_monitor.rates(now)) {
            if (rate.beats == 0) continue;
            s.ranks.push_back(
                {rate.rank, rate.beats, seconds(rate.since_beat), rate.beats_per_second});
        }
    }
    s.rendezvous_seconds = last_join_seconds;
    s.exit_barrier_seconds = last_barrier_seconds;
    if (auto calls = cluster ? cluster->store_calls() : std::nullopt) {
        s.store_requests = calls->requests;
        s.store_errors = calls->errors;
    }
    return s;
}

}  // namespace ddprun
