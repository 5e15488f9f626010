// The agent's status record (see agent_impl.hpp, node_status.hpp): what this node
// shows `ddprun status` and node 0's straggler watch, and what it prints when node 0
// names a straggler.
#include <unistd.h>

#include "agent_impl.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/rendezvous/straggler.hpp"

namespace ddprun {
namespace {

// How the round stops, in a few words for the status screen.
std::string describe_stop(const StopEvent& stop) {
    switch (stop.kind) {
        case StopEvent::Kind::Done:
            return "every node finished";
        case StopEvent::Kind::Failure: {
            const FailureRecord& f = stop.failure;
            if (f.kind == FailureKind::Worker && f.rank >= 0)
                return fmt::format("rank {} (node {}) failed", f.rank, f.node_rank);
            if (f.kind == FailureKind::Hang && f.rank >= 0)
                return fmt::format("rank {} (node {}) hung", f.rank, f.node_rank);
            return f.message;
        }
        default:
            return stop.message;
    }
}

}  // namespace

HangMonitor::Clock::duration Agent::Impl::rate_window() const {
    // Half the straggler window: a rank's rate follows it within the window.
    return std::clamp<HangMonitor::Clock::duration>(
        ctx.config.straggler_window / 2, std::chrono::seconds(1), HangMonitor::k_rate_window);
}

void Agent::Impl::watch_status() {
    if (ctx.config.nnodes <= 1) return;  // nobody else to show it to
    if (!status_timer) status_timer = std::make_unique<asio::steady_timer>(io);
    cluster->publish_status(node_status());
    status_timer->expires_after(k_status_tick);
    status_timer->async_wait([this](boost::system::error_code ec) {
        if (!ec) watch_status();
    });
}

NodeStatus Agent::Impl::node_status() {
    const AgentSnapshot snap = snapshot();
    NodeStatus status;
    status.node_rank = node_rank;
    status.round = round;
    status.state = std::string(state_name(snap.state));
    status.host = ctx.host;
    status.addr = ctx.config.local_addr;
    status.pid = ::getpid();
    status.nproc = ctx.nproc;
    status.workers_alive = snap.workers_alive;
    for (const RankBeats& rank : snap.ranks)
        status.ranks.push_back({rank.rank, rank.beats, std::llround(rank.seconds_since_beat * 1000),
                                rank.beats_per_second.value_or(-1)});
    if (!last_round || node_rank < 0) return status;
    const std::vector<int>& nproc = last_round->nproc_per_node;
    const int nnodes = static_cast<int>(nproc.size());
    status.restarts = restart_count();
    if (node_rank < nnodes) {
        status.first_rank = rank_offset(nproc, node_rank);
        status.nproc = nproc[static_cast<std::size_t>(node_rank)];
    }
    if (node_rank != 0) return status;
    status.nnodes = nnodes;
    status.world_size = rank_offset(nproc, nnodes);
    status.max_restarts = ctx.config.max_restarts;
    if (stop_event) {
        status.exit_code = stop_event->exit_code;
        status.stop = describe_stop(*stop_event);
    }
    return status;
}

void Agent::Impl::on_straggler(const Straggler& straggler) {
    const std::string line = describe_straggler(straggler, ctx.config.straggler_window);
    if (straggler.recovered)
        spdlog::info("{}", line);
    else
        spdlog::warn("{}", line);
    events.write(straggler.recovered ? "straggler_recovered" : "straggler",
                 [&] { return straggler_event(round, straggler); });
}

}  // namespace ddprun
