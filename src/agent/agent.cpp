// The agent's state machine (see agent.hpp). Phases, in order:
//   Connecting  the cluster opens (a signal gives up)
//   Checking    --health-check runs before a join (a signal gives up, or leaves an elastic job)
//   Joining     the round's membership is agreed (a signal aborts it job-wide)
//   Running     workers run; a failure, a signal or the cluster's stop ends the round
//   Stopping    workers got the stop signal and their grace (a second signal kills)
//   Killing     workers got SIGKILL; the round ends as soon as they are gone
//   Done        between rounds
// How the agent answers signals in each phase is in agent_signals.cpp.
#include "ddprun/agent/agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "agent_impl.hpp"
#include "ddprun/base/clock.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/scratch_dir.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/report/round_report.hpp"

namespace ddprun {

std::optional<int> Agent::Impl::open() {
    cluster = make_cluster(io, ctx);
    std::optional<Status> opened;
    phase = Phase::Connecting;
    cluster->open([&opened](Status status) { opened = std::move(status); });
    run_until([&] { return opened || stop_signal; });
    phase = Phase::Done;
    // Stopped while the cluster is still connecting (maybe blocked in a store call for a
    // long while): no worker exists yet, so the agent just leaves.
    if (stop_signal) return exit_code::kSignalBase + stop_signal;
    if (!*opened) {
        spdlog::error("{}", opened->error().message);
        return opened->error().exit_code;
    }
    return std::nullopt;
}

std::expected<RoundInfo, int> Agent::Impl::join() {
    int master_port = ctx.config.master_port.value_or(0);
    port.reset();
    if (master_port == 0) {
        // Every node reserves one, since node ranks may be assigned at the join; node 0's is
        // used. Held until the round ends, so no other job is handed it meanwhile.
        auto reserved = PortReservation::reserve();
        if (!reserved) {
            spdlog::error("cannot pick a free MASTER_PORT: {}; pass --master_port",
                          reserved.error().message);
            return std::unexpected(exit_code::kInternal);
        }
        master_port = reserved->port();
        port = std::move(*reserved);
    }
    RoundHandlers handlers;
    handlers.on_stop = [this](StopEvent event) { on_round_stop(std::move(event)); };
    handlers.on_kill = [this] {
        // The kill may arrive before this node has read the stop it follows: kept for then.
        kill_requested = true;
        if (phase != Phase::Stopping) return;
        spdlog::info("another node killed its workers at once; killing workers");
        kill_now();
    };
    handlers.on_signal = [this](int signal) {
        spdlog::info("{} from another node", signal_name(signal));
        workers.forward(signal);
    };
    handlers.on_straggler = [this](Straggler straggler) { on_straggler(straggler); };
    std::optional<std::expected<RoundInfo, Error>> joined;
    // The round's stop may come as soon as the join is done, before the workers start.
    failure_published = false;
    kill_requested = false;
    stop_event.reset();
    phase = Phase::Joining;
    const auto join_started = std::chrono::steady_clock::now();
    cluster->join(round, master_port, std::move(handlers),
                  [&joined](auto result) { joined = std::move(result); });
    // Signals are handled while the join is in flight: a Ctrl-C aborts it on every node, and
    // a killed agent does not wait for its answer at all.
    run_until([&] { return joined || stop_signal == SIGKILL || left; });
    if (joined && !*joined && !stop_signal) {
        // When every node is stopped at once, the store's node may go first and this join
        // fail on the lost store: the stop signal that came with it is why this node stops.
        join_failed = true;
        io.poll();
        join_failed = false;
    }
    phase = Phase::Done;
    if (!joined || left) return std::unexpected(exit_code::kSignalBase + stop_signal);
    if (!*joined) {
        if (stop_signal) return std::unexpected(exit_code::kSignalBase + stop_signal);
        // Exit code 0: an elastic job that finished before this node could take part.
        if (joined->error().exit_code == exit_code::kSuccess)
            spdlog::info("{}", joined->error().message);
        else
            spdlog::error("{}", joined->error().message);
        return std::unexpected(joined->error().exit_code);
    }
    node_rank = (*joined)->node_rank;
    last_join_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - join_started).count();
    return **joined;
}

Status Agent::Impl::host_worker_store(const RoundInfo& info) {
    // The last round's goes first: its workers are gone on every node (the join waited
    // for them), and a fixed --master_port is the same port.
    worker_store.reset();
    if (!info.agent_store || node_rank != 0) return {};
    // On the loop, as the workers' start: local, milliseconds (cluster.hpp).
    auto hosted = ddprun::host_worker_store(info.master_port, ctx.config.rendezvous.read_timeout);
    if (!hosted) return std::unexpected(hosted.error());
    worker_store = std::move(*hosted);
    spdlog::debug("round {}: the workers' store listens on MASTER_PORT={}", round,
                  info.master_port);
    return {};
}

RoundResult Agent::Impl::run_round(const RoundInfo& info) {
    phase = Phase::Running;
    stop_signal = 0;
    events.round_begins();
    if (hang_stop && hang_stop->capture.joinable()) hang_stop->capture.join();
    hang_stop.reset();
    watch_progress();
    Status started = host_worker_store(info);
    if (started) started = workers.start(round, info);
    if (!started) {
        spdlog::error("{}", started.error().message);
        cluster->abort(fmt::format("node {} ({}) could not start its workers: {}", node_rank,
                                   ctx.host, started.error().message),
                       started.error().exit_code);
        // This node knows the outcome already: it does not wait for the abort to come back.
        stop_event = StopEvent{
            StopEvent::Kind::Abort, {}, started.error().message, started.error().exit_code};
        log_round_stop();
        kill_now();
    } else if (stop_event && stop_event->kind != StopEvent::Kind::Done) {
        events.workers_started(round, workers.running_workers());
        begin_stop(SIGTERM);  // another node failed while this one was still starting
    } else {
        events.workers_started(round, workers.running_workers());
        watch_hangs();
        watch_uninterruptible();
    }
    spdlog::debug("round {}: {} worker(s) started, MASTER_ADDR={} MASTER_PORT={}", round,
                  workers.running(), info.master_addr, info.master_port);
    run_until([this] { return phase == Phase::Done; });
    for (const auto& problem : workers.finish()) spdlog::error("{}", problem);
    keep_hang_stacks();
    if (!started) return {RoundResult::Kind::Aborted, started.error().exit_code};
    return round_result();
}

RoundResult Agent::Impl::round_result() {
    if (stop_signal) return {RoundResult::Kind::Stopped, exit_code::kSignalBase + stop_signal};
    if (!stop_event) return {RoundResult::Kind::Aborted, exit_code::kInternal};
    switch (stop_event->kind) {
        case StopEvent::Kind::Done:
            return {RoundResult::Kind::Succeeded, exit_code::kSuccess};
        case StopEvent::Kind::Reform:
            return {RoundResult::Kind::Reformed, exit_code::kSuccess};
        case StopEvent::Kind::Failure:
            // A hang is a failure like a worker's: --max_restarts applies.
            if (stop_event->failure.kind == FailureKind::Worker ||
                stop_event->failure.kind == FailureKind::Hang)
                return {RoundResult::Kind::Failed, stop_event->exit_code};
            spdlog::error("{}", stop_event->failure.message);
            return {RoundResult::Kind::Aborted, stop_event->exit_code};
        default:
            spdlog::error("{}", stop_event->message);
            return {RoundResult::Kind::Aborted,
                    stop_event->exit_code ? stop_event->exit_code : exit_code::kRendezvous};
    }
}

int Agent::Impl::report_failure(const std::string& title, std::optional<int> job_exit_code) {
    if (stop_event && stop_event->kind == StopEvent::Kind::Failure &&
        stop_event->failure.kind == FailureKind::Hang) {
        std::fflush(stdout);
        // The root cause is the rank that stopped first job-wide, whichever node saw a
        // hang first (each looks on its own clock).
        std::optional<RankProgress> first;
        if (hang_stop) first = first_to_stop(hang_stop->progress);
        std::fputs(format_hang_summary(
                       title, job_exit_code.value_or(stop_event->exit_code),
                       first ? describe_first_stop(*first, limits()) : stop_event->failure.message,
                       hang_stop ? describe_progress(hang_stop->progress) : std::string(),
                       hang_stop ? hang_stop->rank_lines : std::vector<std::string>{})
                       .c_str(),
                   stderr);
        std::fflush(stderr);
        return job_exit_code.value_or(stop_event->exit_code);
    }
    const bool speaks_for_all = shared_console() && node_rank == 0;
    auto summary = summarize_failure(
        title, stop_event, workers.outcomes(), node_rank,
        speaks_for_all ? cluster->others_outcomes() : std::vector<FailureRecord>{}, job_exit_code);
    if (!summary) return job_exit_code.value_or(exit_code::kInternal);
    if (shared_console() && !speaks_for_all) {
        spdlog::debug("job failed (exit code {}); node 0 prints the summary", summary->exit_code);
        return summary->exit_code;
    }
    std::fflush(stdout);
    std::fputs(summary->box.c_str(), stderr);
    std::fflush(stderr);
    return summary->exit_code;
}

void Agent::Impl::on_child_exit(pid_t pid, int status) {
    auto outcome = workers.on_exit(pid, status);
    if (!outcome) return;  // an orphan reparented to the agent; swept at the end of the round
    events.worker_ended(round, *outcome);
    count_exit(*outcome);
    hang_monitor.exited(outcome->rank);
    dump_exited(pid);
    if (outcome->failed() && phase == Phase::Running) {
        // The first failure: everyone else stops, on this node and on every other one.
        begin_stop(SIGTERM);
        publish_failure(failure_record(*outcome));
    }
    // Stopped by a signal, the job ends with this round: once its workers are reaped
    // (their error files read), the scratch directory goes, before the round's end waits
    // on the store (see run_rounds).
    if (workers.running() == 0 && stop_signal != 0) remove_scratch_dir(ctx.scratch_dir);
    // This node is done; the cluster decides when the round is (the exit barrier).
    if (workers.running() == 0 && phase == Phase::Running) {
        events.barrier_entered(round);  // first: a single node's cluster answers at once
        cluster->publish_finished();
    }
    finish_round_if_done();
}

void Agent::Impl::on_round_stop(StopEvent event) {
    if (!stop_event) {
        stop_event = std::move(event);
        log_round_stop();
        if (stop_event->kind == StopEvent::Kind::Failure) note_progress();
    }
    if (stop_event->kind == StopEvent::Kind::Failure &&
        stop_event->failure.kind == FailureKind::Hang && phase == Phase::Running)
        return begin_hang_stop();  // the stacks first, then the stop
    if (stop_event->kind != StopEvent::Kind::Done && phase == Phase::Running) begin_stop(SIGTERM);
    finish_round_if_done();
}

void Agent::Impl::begin_stop(int signal, bool workers_have_it) {
    if (kill_requested) {
        spdlog::info("another node killed its workers at once; killing workers");
        return kill_now();
    }
    phase = Phase::Stopping;
    workers.stop(signal, ctx.config.shutdown_timeout, !workers_have_it);
    finish_round_if_done();
}

void Agent::Impl::kill_now() {
    if (phase == Phase::Killing || phase == Phase::Done) return;
    phase = Phase::Killing;
    workers.kill();
    finish_round_if_done();
}

void Agent::Impl::finish_round_if_done() {
    if (workers.running() > 0) return;
    if (phase != Phase::Running && phase != Phase::Stopping && phase != Phase::Killing) return;
    // The round ends when its job-wide outcome is known, or this agent was signalled to kill
    // (twice, or its supervisor died): it must not wait for anyone then. A kill asked by
    // another node still waits for the stop it follows, which names the round's outcome.
    // A node leaving an elastic job does not wait for the others' re-forming either.
    if (!stop_event && !(phase == Phase::Killing && stop_signal) && !left) return;
    // A hang's summary needs every node's progress: shared within a bound.
    if (hang_stop && !hang_stop->shared && !(phase == Phase::Killing && stop_signal)) return;
    phase = Phase::Done;
}

// The other nodes stop with this agent's signal as the job's exit code (128+N).
void Agent::Impl::publish_signal(int signal, std::string message) {
    FailureRecord record;
    record.kind = FailureKind::Signal;
    record.node_rank = node_rank;
    record.host = ctx.host;
    record.pid = ::getpid();
    record.exit_code = exit_code::kSignalBase + signal;
    record.time_ms = wall_ms();
    record.message = std::move(message);
    publish_failure(std::move(record));
}

void Agent::Impl::publish_failure(FailureRecord record) {
    if (failure_published) return;
    failure_published = true;
    events.write("failure", [&] { return failure_event(round, record); });
    cluster->publish_failure(std::move(record));
}

Agent::Agent(LaunchContext context, ClusterFactory make_cluster,
             WorkerGroup::Options worker_options)
    : m_impl(std::make_unique<Impl>(std::move(context), std::move(make_cluster), worker_options)) {}

Agent::~Agent() = default;

int Agent::run() {
    auto& impl = *m_impl;
    try {
        std::vector<int> sigs = impl.ctx.config.stop_signals;
        sigs.insert(sigs.end(), impl.ctx.config.forward_signals.begin(),
                    impl.ctx.config.forward_signals.end());
        sigs.push_back(SIGCHLD);
        sigs.push_back(parent_death_signal());
        impl.signals.emplace(impl.io, sigs, [&impl](const ReceivedSignal& received) {
            // A signal to every process of the job comes directly and through the supervisor.
            if (received.number != SIGCHLD &&
                impl.signal_copies.is_copy(received, SignalCopies::Clock::now())) {
                // Slurm's direct copy after the relayed one: the workers got theirs.
                if (!received.relayed) impl.held_forwards.erase(received.number);
                return;
            }
            impl.on_signal(received);
        });
        // A closed stdout must give EPIPE on write, not kill the agent.
        if (::signal(SIGPIPE, SIG_IGN) == SIG_ERR) throw std::runtime_error("signal(SIGPIPE)");
        // Read from the first phase on: a launcher may be gone before the nodes ever meet.
        impl.watch_lifeline();
        impl.events.job_start(impl.ctx, impl.node_rank);

        if (auto failed = impl.serve_metrics()) return impl.job_end(*failed);
        if (auto failed = impl.open()) return impl.job_end(*failed);
        impl.watch_status();
        const int code = impl.run_rounds();
        // Whoever still waits to join (an elastic job's spares) learns that the job is over.
        impl.cluster->end_job(code);
        return impl.job_end(code);
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return impl.job_end(exit_code::kInternal);
    }
}

int Agent::Impl::restart_count() const {
    return (last_round ? last_round->restart_count : 0) + (restart_decided ? 1 : 0);
}

int Agent::Impl::run_rounds() {
    const int max_restarts = ctx.config.max_restarts;
    for (round = 0;; ++round) {
        const std::optional<int> unhealthy = check_health();
        std::expected<RoundInfo, int> info = unhealthy ? std::unexpected(*unhealthy) : join();
        if (!info) {
            remove_scratch_dir(ctx.scratch_dir);  // no worker runs: see below
            cluster->end_round(stop_signal == SIGKILL);
            return info.error();
        }
        // An elastic job's leader numbers the rounds.
        round = info->round;
        last_round = *info;
        restart_decided = false;
        events.round(*info, node_rank);
        const bool restarts_left = info->restart_count < max_restarts;
        RoundResult result = run_round(*info);
        // Decided before end_round: the store's host may leave after it.
        const bool restarting =
            result.kind == RoundResult::Kind::Failed && restarts_left && !stops_for_no_progress();
        // The job's last round: its workers are reaped and their error files read, so
        // the scratch directory goes now. What follows talks to the store, and with a
        // peer's store gone or frozen it can outlast a scheduler's grace (Slurm's KillWait,
        // then SIGKILL to the agent and the supervisor alike), which would leave it behind.
        if (result.kind != RoundResult::Kind::Reformed && !restarting)
            remove_scratch_dir(ctx.scratch_dir);
        if (result.kind == RoundResult::Kind::Failed && !restarting && shared_console()) {
            std::vector<FailureRecord> failed;
            for (const auto& worker : workers.outcomes())
                if (worker.failed()) failed.push_back(failure_record(worker));
            cluster->share_outcomes(std::move(failed));
        }
        cluster->end_round(stop_signal == SIGKILL);
        switch (result.kind) {
            case RoundResult::Kind::Succeeded:
            case RoundResult::Kind::Aborted:
                return result.exit_code;
            case RoundResult::Kind::Stopped:
                // A kill (the supervisor or the --hosts launcher's link gone) said why already.
                if (stop_signal != SIGKILL)
                    spdlog::info("{} {}", left ? "left the job on" : "stopped by",
                                 signal_name(stop_signal));
                return result.exit_code;
            case RoundResult::Kind::Reformed:
                events.write("membership_change", [&] {
                    return membership_change_event(round, stop_event ? stop_event->message : "");
                });
                continue;  // the membership changed: the next round, no restart used
            case RoundResult::Kind::Failed:
                if (restarting) {
                    const bool hang = stop_event && stop_event->failure.kind == FailureKind::Hang;
                    const std::string reason =
                        hang ? "hang: " + stop_event->failure.message
                             : describe_failure(stop_event, workers.outcomes());
                    spdlog::warn("{}; restarting the workers ({} of {}{})", reason,
                                 info->restart_count + 1, max_restarts,
                                 restarts_without_progress > 0
                                     ? fmt::format("; {} in a row without progress, at most {}",
                                                   restarts_without_progress,
                                                   ctx.config.max_no_progress_restarts)
                                     : std::string());
                    restart_decided = true;
                    events.write("restart", [&] {
                        return restart_event(round, info->restart_count + 1, max_restarts, reason);
                    });
                    continue;
                }
                if (restarts_left)  // it would have restarted, but made no progress
                    return report_failure(
                        fmt::format("ddprun: job made no progress in {} restart(s) in a row",
                                    restarts_without_progress - 1),
                        exit_code::kNoProgress);
                if (stop_event && stop_event->failure.kind == FailureKind::Hang)
                    return report_failure(
                        max_restarts > 0
                            ? fmt::format("ddprun: job hung after {} restart(s)", max_restarts)
                            : std::string("ddprun: job hung"));
                return report_failure(
                    max_restarts > 0
                        ? fmt::format("ddprun: job failed after {} restart(s)", max_restarts)
                        : std::string("ddprun: job failed"));
        }
    }
}

}  // namespace ddprun
