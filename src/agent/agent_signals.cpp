// How the agent answers the signals it gets, by phase (see agent.cpp): a stop
// signal gives up a connection, aborts a join, stops the workers (a second one
// kills them), or makes an elastic job's node leave; a forwarded-only signal
// reaches the workers once; the supervisor's death (and the end of a --lifeline,
// agent_lifeline.cpp) kills everything.
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "agent_impl.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/process_tree.hpp"

namespace ddprun {

void Agent::Impl::hold_forward(int signal) {
    auto& timer = held_forwards[signal];
    if (timer) return;  // one is held already: this is the same delivery
    timer = std::make_unique<asio::steady_timer>(io, k_step_copy_window);
    timer->async_wait([this, signal](boost::system::error_code ec) {
        if (ec) return;
        held_forwards.erase(signal);
        workers.forward(signal);
    });
}

void Agent::Impl::on_signal(const ReceivedSignal& received) {
    const int signal = received.number;
    if (signal == SIGCHLD) {
        reap_exited([this](pid_t pid, int status) { on_child_exit(pid, status); });
        health_check.reaped();
        return;
    }
    if (signal == parent_death_signal()) {
        // The supervisor was SIGKILLed: the user wants everything gone, now, on every node.
        return kill_everywhere(
            "ddprun's supervisor was killed",
            fmt::format("the ddprun of node {} ({}) was killed (SIGKILL)", node_rank, ctx.host));
    }
    const auto& stops = ctx.config.stop_signals;
    if (std::find(stops.begin(), stops.end(), signal) != stops.end())
        return on_stop_signal(signal, !received.relayed && sent_by_step_daemon(received.sender));
    // A forwarded-only signal (SIGUSR1/SIGUSR2 by default): pass it on, keep running;
    // unless Slurm's step daemon gave the workers their own copy (see sent_by_step_daemon).
    if (!sent_by_step_daemon(received.sender))
        workers.forward(signal);
    else if (received.relayed)
        hold_forward(signal);  // the supervisor's copy came first: forwarded unless ours follows
    if (phase == Phase::Running) cluster->broadcast_signal(signal);
}

void Agent::Impl::kill_everywhere(std::string_view cause, const std::string& why) {
    if (stop_signal == SIGKILL) return;  // on its way already (the supervisor and the link)
    spdlog::error("{}; killing {}", cause,
                  ctx.config.elastic() ? "this node's workers" : "every worker");
    const Phase was = phase;
    stop_signal = SIGKILL;
    // In an elastic job this node leaves; the others go on.
    if (was != Phase::Connecting && cluster->leave(SIGKILL)) {
        left = true;
    } else {
        if (was == Phase::Joining) cluster->abort(why, exit_code::kSignalBase + SIGKILL);
        if (was == Phase::Checking)
            cluster->stay_out(round, why, "SIGKILL", exit_code::kSignalBase + SIGKILL);
        if (was == Phase::Running || was == Phase::Stopping) {
            publish_signal(SIGKILL, why);
            // No grace anywhere: whoever would have waited for it is gone.
            cluster->publish_kill();
        }
    }
    kill_now();
}

void Agent::Impl::on_stop_signal(int signal, bool workers_have_it) {
    switch (phase) {
        case Phase::Connecting:
            spdlog::info("received {} while connecting to the rendezvous store; giving up",
                         signal_name(signal));
            stop_signal = signal;
            return;
        case Phase::Checking:
            // Like a signal while joining: the others learn at once that this node will not.
            stop_signal = signal;
            left = cluster->stay_out(round,
                                     fmt::format("{} received {} during its health check",
                                                 describe_node(), signal_name(signal)),
                                     signal_name(signal), exit_code::kSignalBase + signal);
            spdlog::info("received {} during the health check; {}", signal_name(signal),
                         left ? "leaving the job" : "giving up");
            return;
        case Phase::Joining:
            if (join_failed) {
                spdlog::info("received {} as the join failed; giving up", signal_name(signal));
                stop_signal = signal;
                return;
            }
            if (cluster->leave(signal)) {
                spdlog::info("received {} while waiting to join; leaving the job",
                             signal_name(signal));
                stop_signal = signal;
                left = true;
                return;
            }
            spdlog::info("received {} while the nodes were joining; giving up",
                         signal_name(signal));
            stop_signal = signal;
            cluster->abort(fmt::format("node {} ({}) received {} while joining", node_rank,
                                       ctx.host, signal_name(signal)),
                           exit_code::kSignalBase + signal);
            return;
        case Phase::Running:
            if (cluster->leave(signal)) {
                // An elastic job goes on without this node.
                spdlog::info(
                    "received {}; leaving the job: stopping workers (send it again to kill them "
                    "at once)",
                    signal_name(signal));
                stop_signal = signal;
                left = true;
                begin_stop(signal, workers_have_it);
                return;
            }
            spdlog::info("received {}; stopping workers (send it again to kill them at once)",
                         signal_name(signal));
            stop_signal = signal;
            begin_stop(signal, workers_have_it);
            publish_signal(signal, fmt::format("the ddprun agent of node {} ({}) received {}",
                                               node_rank, ctx.host, signal_name(signal)));
            return;
        case Phase::Stopping:
            if (!stop_signal) {
                // The workers are stopping already (another node's stop, or a failure here)
                // and this is the first signal this node got: a scheduler's stop reaches every
                // node, often after the one relayed through the store. One stop, one grace;
                // only a second signal to this node kills.
                spdlog::info(
                    "received {}; the workers are already stopping (send it again to kill them "
                    "at once)",
                    signal_name(signal));
                stop_signal = signal;
                if (cluster->leave(signal)) {
                    left = true;
                    finish_round_if_done();
                    return;
                }
                publish_signal(signal, fmt::format("the ddprun agent of node {} ({}) received {}",
                                                   node_rank, ctx.host, signal_name(signal)));
                return;
            }
            spdlog::info("received {} again; killing workers", signal_name(signal));
            if (!left) cluster->publish_kill();  // a node that left kills only its own
            kill_now();
            return;
        case Phase::Killing:
        case Phase::Done:
            return;
    }
}

}  // namespace ddprun
