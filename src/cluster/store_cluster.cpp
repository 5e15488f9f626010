// A multi-node job's cluster over the c10d TCPStore (see cluster.hpp): opens
// the Coordinator off the loop, bounds the join, watches the round's stop,
// the heartbeats and a store that stopped answering, and ends each round so
// that the store's host never leaves before the others have read the end.
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <mutex>
#include <optional>
#include <thread>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/ports.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/cluster/cluster.hpp"
#include "ddprun/cluster/coordinator.hpp"
#include "ddprun/plan/worker_store.hpp"
#include "ddprun/store/store.hpp"
#include "ddprun/workers/worker_group.hpp"
#include "store_options.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace ddprun {
namespace {

// How long the store's host waits for the others to read a failed join's reason, and
// beyond the others' own shutdown, for them to confirm the end of a round.
constexpr std::chrono::milliseconds k_linger_bound{5000};
constexpr std::chrono::milliseconds k_join_linger_bound{2000};
// c10d 1.13 leaves some store calls without a bound (a listener that never
// answers): this long past join_timeout the join gives up on the store.
constexpr std::chrono::milliseconds k_join_guard_slack{5000};

// What an opener thread hands back. The agent may give up on it (a signal) and
// destroy the cluster while the thread is still blocked in a store call: the
// thread then leaves its result unread, and the process exits soon after.
struct OpenAttempt {
    std::mutex mutex;
    bool abandoned = false;
};

class StoreCluster final : public Cluster {
  public:
    StoreCluster(asio::io_context& io, const LaunchContext& context)
        : m_io(io), m_ctx(context), m_stall_timer(io), m_barrier_timer(io), m_join_guard(io) {}

    ~StoreCluster() override {
        if (m_open_attempt) {
            std::lock_guard lock(m_open_attempt->mutex);
            m_open_attempt->abandoned = true;
        }
        if (m_opener.joinable()) m_opener.detach();
        if (m_coordinator && m_joining) drop_join();
        Coordinator::retire(std::move(m_coordinator));
    }

    // A join whose answer no longer matters. An elastic join ends at its next wait slice
    // once cancelled, so its thread is joined as usual; a fixed-size one may block in a
    // store call as long as its timeout (c10d cannot cancel it), so it is abandoned, with
    // the Coordinator's threads, to the process's exit. (An abandoned elastic join would
    // read the Coordinator after it was freed: a crash on a stop signal while joining.)
    void drop_join() {
        if (m_ctx.config.elastic() && !m_coordinator->store_stalled())
            m_coordinator->cancel_join();
        else
            m_coordinator->abandon();
    }

    void open(Opened done) override;
    void join(int round, int master_port, RoundHandlers handlers, Joined done) override;

    void publish_failure(FailureRecord record) override {
        m_coordinator->publish_failure(m_round, std::move(record));
    }

    void share_outcomes(std::vector<FailureRecord> workers) override {
        if (m_coordinator) m_coordinator->set_outcomes(std::move(workers));
    }
    void share_progress(std::vector<RankProgress> mine, std::chrono::milliseconds bound,
                        Progressed done) override {
        if (!m_coordinator) return done(std::move(mine));
        m_coordinator->share_progress(m_round, m_node_rank, std::move(mine), bound,
                                      std::move(done));
    }
    void publish_made_progress(bool made) override {
        if (m_coordinator) m_coordinator->publish_made_progress(m_round, m_node_rank, made);
    }
    bool made_progress_anywhere(bool mine) override {
        if (!m_coordinator) return mine;
        // Every node says so at the stop; the slowest is done within its grace.
        return m_coordinator->made_progress_anywhere(m_round, m_node_rank, mine,
                                                     m_ctx.config.shutdown_timeout + k_kill_bound);
    }
    std::vector<FailureRecord> others_outcomes() const override {
        return m_coordinator ? m_coordinator->others_outcomes() : std::vector<FailureRecord>{};
    }

    void publish_finished() override {
        m_coordinator->publish_finished(m_round, m_node_rank);
        // The exit barrier: the others get barrier_timeout to finish too.
        m_barrier_timer.expires_after(m_coordinator->options().barrier_timeout);
        m_barrier_timer.async_wait([this](boost::system::error_code ec) {
            if (ec) return;
            m_coordinator->abort(
                m_round,
                fmt::format("the other nodes did not finish within {} "
                            "(--rdzv_conf exit_barrier_timeout)",
                            duration_text(m_coordinator->options().barrier_timeout)),
                exit_code::kRendezvous);
        });
    }

    void publish_kill() override { m_coordinator->publish_kill(m_round); }

    void publish_status(NodeStatus status) override {
        if (m_coordinator) m_coordinator->set_status(std::move(status));
    }
    std::optional<StoreCalls> store_calls() const override {
        if (!m_coordinator) return std::nullopt;
        const StoreCounts& counts = m_coordinator->store_counts();
        return StoreCalls{counts.requests, counts.errors};
    }

    void broadcast_signal(int signal) override {
        if (m_ctx.config.broadcast_signals)
            m_coordinator->broadcast_signal(m_round, m_node_rank, signal);
    }

    void abort(const std::string& message, int exit_code) override {
        m_coordinator->abort(m_round, message, exit_code);
    }

    bool stay_out(int round, const std::string& message, const std::string& reason,
                  int exit_code) override {
        // Like a join that failed: end_round then lingers (the store's host) until the
        // others have read why, or leaves at once (an elastic job's node).
        m_join_failed = true;
        if (m_ctx.config.elastic() && !m_coordinator->options().store.is_server) {
            m_coordinator->leave(reason);
            return true;
        }
        m_round = round;
        m_coordinator->abort(round, message, exit_code);
        return false;
    }

    void end_round(bool killed) override;

    bool leave(int signal) override {
        if (!m_ctx.config.elastic() || !m_coordinator || m_coordinator->options().store.is_server)
            return false;
        m_coordinator->leave(signal_name(signal));
        return true;
    }

    void end_job(int exit_code) override {
        // A node that lost the store (frozen, cut off, given up by the others) ends only
        // itself: the others may go on without it, and a leader deposed meanwhile (etcd)
        // must not publish the job's end to them and to every agent that arrives later.
        if (m_coordinator && !m_lost_store)
            m_coordinator->close_job(exit_code,
                                     fmt::format("the job ended (exit code {})", exit_code));
    }

  private:
    void joined(std::expected<RoundMembership, Error> result);
    void stop(StopEvent event);
    void watch_store();
    void start_heartbeats();

    asio::io_context& m_io;
    const LaunchContext& m_ctx;
    std::unique_ptr<Coordinator> m_coordinator;
    std::shared_ptr<OpenAttempt> m_open_attempt;
    std::thread m_opener;
    asio::steady_timer m_stall_timer;    // notices a store that stopped answering
    asio::steady_timer m_barrier_timer;  // the exit barrier's bound
    asio::steady_timer m_join_guard;
    int m_round = 0;
    int m_node_rank = -1;  // -1: assigned at the first join
    bool m_joining = false;
    bool m_heartbeats_started = false;
    bool m_join_failed = false;
    Joined m_join_done;
    RoundHandlers m_handlers;
    std::optional<StopEvent> m_stop;  // how the current round ended, once known
    bool m_lost_store = false;        // a round of this agent ended in StoreLost
};

void StoreCluster::open(Opened done) {
    auto configured = coordinator_options(m_ctx);
    if (!configured) {
        asio::post(m_io, [done, error = configured.error()] { done(std::unexpected(error)); });
        return;
    }
    Coordinator::Options opts = *configured;
    m_node_rank = opts.me.node_rank;
    const bool may_fall_back = opts.store.is_server && !m_ctx.config.rendezvous.is_host;
    m_open_attempt = std::make_shared<OpenAttempt>();
    // Connecting can take up to read_timeout (the store's host is not up yet, or the port is
    // another program's): on a thread of its own, so that a signal still stops the agent.
    // The thread reaches the cluster (`this`) only under the attempt's lock, after checking
    // that it was not abandoned: the cluster may be gone by the time a store call returns.
    m_opener = std::thread([this, &io = m_io, attempt = m_open_attempt, opts, may_fall_back,
                            config = m_ctx.config, env = m_ctx.env,
                            done = std::move(done)]() mutable {
        // Here, not on the loop: the answer loads the store's plugin (libtorch).
        WorkerStoreChoice worker_store = choose_worker_store(
            opts.etcd ? AgentsMeet::Etcd : AgentsMeet::TcpStore, env, tcp_store_defaults_start);
        opts.me.fingerprint.agent_store = worker_store.agent_hosts;
        if (opts.store.is_server && !worker_store.why_not.empty())
            spdlog::info("{}", worker_store.why_not);
        // An etcd cluster's members are reported by the store itself, each in its line.
        auto unresolved = opts.etcd ? std::nullopt : check_store_host(config, opts.store.host);
        auto opened = unresolved
                          ? decltype(Coordinator::open(io, opts))(std::unexpected(*unresolved))
                          : Coordinator::open(io, opts);
        if (!opened && may_fall_back && !unresolved) {
            // Another agent on this machine hosts it already (with ranks assigned at join),
            // or another agent claims node rank 0 too: as a client this agent meets it, and
            // the rendezvous names both hosts. If nothing answers there, the hosting error
            // stands.
            std::string host_error = opened.error().message;
            opts.store.is_server = false;
            opened = Coordinator::open(io, opts);
            if (!opened) opened = std::unexpected(rendezvous_error(host_error));
        }
        Status status;
        if (!opened) {
            status = std::unexpected(opened.error());
        } else if (auto mismatch = (*opened)->check_run_id()) {
            status = std::unexpected(*mismatch);
            Coordinator::retire(std::move(*opened));
        } else if (auto failed = (*opened)->arrive()) {
            status = std::unexpected(*failed);
            Coordinator::retire(std::move(*opened));
        }
        std::lock_guard lock(attempt->mutex);
        if (attempt->abandoned) {
            if (opened) (void)opened->release();  // its threads may be blocked: leave them be
            return;
        }
        Coordinator* coordinator = opened ? opened->release() : nullptr;
        asio::post(m_io, [this, coordinator, status, done] {
            if (m_opener.joinable()) m_opener.join();
            m_coordinator.reset(coordinator);
            if (m_coordinator) {
                spdlog::debug("rendezvous store {}:{} ({})", m_coordinator->options().store.host,
                              m_coordinator->options().store.port,
                              m_coordinator->options().store.is_server ? "hosted here" : "client");
                // An elastic agent beats from its arrival: the leader must know a spare or a
                // newcomer is alive, and they that the leader is.
                if (m_ctx.config.elastic()) start_heartbeats();
            }
            done(status);
        });
    });
}

void StoreCluster::join(int round, int master_port, RoundHandlers handlers, Joined done) {
    m_round = round;
    m_handlers = std::move(handlers);
    m_stop.reset();
    m_joining = true;
    m_join_failed = false;
    m_join_done = std::move(done);
    m_coordinator->join(round, m_node_rank, master_port,
                        [this](auto result) { joined(std::move(result)); });
    // An elastic join waits on the leader, for as long as the job runs if this agent is a
    // spare; the leader bounds it (join_timeout) and the heartbeats watch the leader.
    if (m_ctx.config.elastic()) {
        if (m_heartbeats_started) watch_store();
        return;
    }
    m_join_guard.expires_after(m_coordinator->options().join_timeout + k_join_guard_slack);
    m_join_guard.async_wait([this](boost::system::error_code ec) {
        if (ec || !m_joining) return;
        m_coordinator->abandon();
        joined(std::unexpected(rendezvous_error(fmt::format(
            "the rendezvous store at --rdzv_endpoint did not answer within the join timeout "
            "({}); is something else listening on that port?",
            duration_text(m_coordinator->options().join_timeout)))));
    });
}

void StoreCluster::joined(std::expected<RoundMembership, Error> result) {
    if (!m_joining) return;  // the guard answered already
    m_joining = false;
    m_join_guard.cancel();
    Joined done = std::move(m_join_done);
    if (!result) {
        m_join_failed = true;
        done(std::unexpected(result.error()));
        return;
    }
    const RoundMembership& membership = *result;
    m_node_rank = membership.node_rank;
    m_round = membership.round;
    RoundInfo info;
    info.node_rank = membership.node_rank;
    info.nproc_per_node = membership.nproc_per_node;
    info.master_addr = membership.master_addr;
    info.master_port = membership.master_port;
    info.agent_store = m_coordinator->options().me.fingerprint.agent_store;
    info.restart_count = membership.restart_count;
    info.round = membership.round;
    info.change = membership.change;

    start_heartbeats();
    m_coordinator->watch(m_round, [this](StopEvent event) { stop(std::move(event)); });
    watch_store();

    const bool elastic = m_ctx.config.elastic();
    if (m_round == 0 || elastic) {
        const int nnodes = static_cast<int>(info.nproc_per_node.size());
        const int first = rank_offset(info.nproc_per_node, m_node_rank);
        const int last = first + info.nproc_per_node.at(static_cast<std::size_t>(m_node_rank)) - 1;
        // An elastic job says on every node, in one line, how the membership changed.
        spdlog::info(
            "{}node {} of {}: {} of world_size {}; MASTER_ADDR={} MASTER_PORT={}",
            !elastic ? std::string()
            : info.change.empty()
                ? fmt::format("round {}: ", m_round)
                : fmt::format("round {}: {}; now {} nodes, world size {}; ", m_round, info.change,
                              nnodes, rank_offset(info.nproc_per_node, nnodes)),
            m_node_rank, nnodes,
            first == last ? fmt::format("rank {}", first) : fmt::format("ranks {}-{}", first, last),
            rank_offset(info.nproc_per_node, nnodes), info.master_addr, info.master_port);
    }
    done(info);
}

void StoreCluster::start_heartbeats() {
    if (m_heartbeats_started) return;
    m_heartbeats_started = true;
    // Set once, before the heartbeat thread reads them; they reach the handlers of
    // whichever round runs.
    m_coordinator->on_kill([this] {
        if (m_handlers.on_kill) m_handlers.on_kill();
    });
    if (m_ctx.config.broadcast_signals)
        m_coordinator->on_broadcast_signal([this](int signal) {
            if (m_handlers.on_signal) m_handlers.on_signal(signal);
        });
    m_coordinator->on_spare([](const std::string& line) { spdlog::info("{}", line); });
    m_coordinator->on_straggler([this](Straggler straggler) {
        if (m_handlers.on_straggler) m_handlers.on_straggler(std::move(straggler));
    });
    m_coordinator->start_heartbeats(m_node_rank,
                                    [this](std::string message) { stop(store_lost(message)); });
    if (m_ctx.config.elastic()) watch_store();
}

void StoreCluster::stop(StopEvent event) {
    if (event.kind == StopEvent::Kind::StoreLost) m_lost_store = true;
    if (m_joining) {
        // An elastic agent waiting to join lost the leader: the join fails with why.
        if (event.kind == StopEvent::Kind::StoreLost) {
            m_coordinator->abandon();
            joined(std::unexpected(rendezvous_error(event.message)));
        }
        return;
    }
    if (m_stop) return;  // the first stop of a round wins
    m_barrier_timer.cancel();
    m_stall_timer.cancel();
    m_stop = event;
    if (m_handlers.on_stop) m_handlers.on_stop(std::move(event));
}

// The heartbeat thread cannot report a store call that never returns; this timer can.
void StoreCluster::watch_store() {
    m_stall_timer.expires_after(m_coordinator->options().heartbeat_timeout / 5);
    m_stall_timer.async_wait([this](boost::system::error_code ec) {
        if (ec || m_stop) return;
        if (m_coordinator->store_stalled()) {
            stop(store_lost(fmt::format(
                "the rendezvous store stopped answering (no reply for over {}: its host is "
                "frozen or cut off)",
                duration_text(m_coordinator->options().heartbeat_timeout))));
            return;
        }
        watch_store();
    });
}

void StoreCluster::end_round(bool killed) {
    m_stall_timer.cancel();
    m_barrier_timer.cancel();
    m_join_guard.cancel();
    if (!m_coordinator) return;
    if (m_joining) {
        drop_join();  // killed mid-join
        return;
    }
    if (m_join_failed && m_ctx.config.elastic()) {
        // The leader told whoever waited; its own close tells whoever comes later.
        m_coordinator->end_round(m_round, m_node_rank, 0ms, {}, false);
        return;
    }
    if (m_join_failed) {
        // The others must read why before the store's host goes away.
        m_coordinator->end_round(m_round, m_node_rank, k_join_linger_bound, {},
                                 !m_coordinator->store_stalled(), false);
        return;
    }
    // Killed: leave at once, the others learn it from the failure record or the heartbeats.
    if (killed) {
        m_coordinator->leave_at_once();
        m_coordinator->end_round(m_round, m_node_rank, 0ms);
        return;
    }
    // The store is gone: nobody to tell, nothing to wait for. And after a membership
    // change the store stays: the next round follows at once.
    if (m_stop &&
        (m_stop->kind == StopEvent::Kind::StoreLost || m_stop->kind == StopEvent::Kind::Reform)) {
        m_coordinator->end_round(m_round, m_node_rank, 0ms, {}, false);
        return;
    }
    std::vector<int> lost;
    if (m_stop && m_stop->kind == StopEvent::Kind::Failure &&
        m_stop->failure.kind == FailureKind::NodeLost)
        lost.push_back(m_stop->failure.node_rank);
    m_coordinator->end_round(m_round, m_node_rank,
                             m_ctx.config.shutdown_timeout + k_kill_bound + k_linger_bound +
                                 m_coordinator->options().heartbeat_timeout,
                             lost);
}

}  // namespace

std::unique_ptr<Cluster> make_store_cluster(asio::io_context& io, const LaunchContext& context) {
    return std::make_unique<StoreCluster>(io, context);
}

}  // namespace ddprun
