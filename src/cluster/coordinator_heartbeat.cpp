// The Coordinator's heartbeat thread (see coordinator.hpp): it beats for this
// agent and watches for a lost node or a lost store through the liveness strategy
// of the job's backend (liveness.hpp), hears the round's signals (round_signals.hpp)
// and publishes this node's status (status_publisher.hpp) at the beat's pace.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/cluster/coordinator.hpp"
#include "ddprun/rendezvous/etcd_liveness.hpp"
#include "ddprun/rendezvous/round_signals.hpp"
#include "liveness.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace ddprun {

void Coordinator::start_heartbeats(int node_rank, LostHandler on_lost) {
    if (m_heartbeat.joinable()) return;
    m_on_lost = on_lost;
    std::promise<void> done;
    m_heartbeat_done = done.get_future();
    m_heartbeat = std::thread(
        [this, node_rank, on_lost = std::move(on_lost), done = std::move(done)]() mutable {
            heartbeat_loop(node_rank, on_lost);
            done.set_value();
        });
}

// The heartbeat thread's own connection to the store, and what runs over it at each
// beat: the liveness strategy of the job's backend and the conversations that ride
// on the beat.
struct Coordinator::Beat {
    Beat(Coordinator& coordinator, int node_rank, std::unique_ptr<Store> connection)
        : self(coordinator),
          store(std::move(connection)),
          rendezvous(*store, self.m_options.run_id),
          signals(JobKeys(self.m_options.run_id), self.m_options.elastic ? self.m_agent : node_rank,
                  self.m_options.heartbeat_timeout),
          status{{}, StatusPublisher(self.m_options.run_id, self.m_options.stragglers)} {
        const Options& options = self.m_options;
        // An elastic agent beats under its id from its arrival on (spares too).
        if (options.elastic) member.emplace(*store, options.run_id, self.m_agent);
        if (options.etcd)
            leases = std::make_unique<EtcdLiveness>(*options.etcd, options.run_id,
                                                    options.heartbeat_timeout, options.secret);
        // Who watches the others: the store's host; on etcd, which no agent hosts, node 0.
        const bool host = options.etcd ? node_rank == 0 : options.store.is_server;
        liveness =
            make_liveness(LivenessSetup{
                              .store = *store,
                              .rendezvous = rendezvous,
                              .member = member ? &*member : nullptr,
                              .node_rank = node_rank,
                              .timeout = options.heartbeat_timeout,
                              .leases = leases.get(),
                              .entered = &self.m_entered,
                              .watch_leadership =
                                  [this](EtcdLiveness& held, Liveness::Clock::time_point deadline) {
                                      self.watch_leadership(held, *store, deadline);
                                  },
                              .progressed = [this] { self.m_beat_done_ms = steady_ms(); },
                          },
                          host);
        // settle() ends a watch in progress through this pointer.
        std::lock_guard lock(self.m_mutex);
        self.m_liveness = leases.get();
        if (self.m_closing && leases) leases->cancel();
    }
    // The pointer goes before the object does.
    ~Beat() {
        std::lock_guard lock(self.m_mutex);
        self.m_liveness = nullptr;
    }
    Beat(const Beat&) = delete;
    Beat& operator=(const Beat&) = delete;

    Coordinator& self;
    std::unique_ptr<Store> store;
    Rendezvous rendezvous;
    std::optional<ElasticMember> member;
    std::unique_ptr<EtcdLiveness> leases;
    std::unique_ptr<Liveness> liveness;
    RoundSignals signals;
    StatusPublication status;
};

// A scheduler: at each beat, the liveness strategy (liveness.hpp) beats and observes,
// then the conversations that ride on the beat take their turn (the round's signals,
// this node's status), and the strategy waits or watches until the next beat.
void Coordinator::heartbeat_loop(int node_rank, LostHandler on_lost) {
    // Several beats per timeout, so that one late beat is not a lost node.
    const auto timeout = m_options.heartbeat_timeout;
    const auto interval = std::max<std::chrono::milliseconds>(timeout / 5, 50ms);
    std::unique_ptr<Beat> beat;
    try {
        beat = std::make_unique<Beat>(*this, node_rank, m_store->clone());
    } catch (const StoreError& e) {
        reach_agent([on_lost, msg = std::string(e.what())] { on_lost(msg); });
        return;
    }
    Liveness& liveness = *beat->liveness;
    int round = -2;         // none yet (an elastic agent is in round -1 until it joins one)
    bool reported = false;  // a round's first loss only
    const auto report = [&](Liveness::Loss loss) {
        if (reported) return;
        reported = true;
        if (loss.node)
            beat->rendezvous.publish_failure(round, *loss.node);
        else
            reach_agent([on_lost, msg = std::move(loss.message)] { on_lost(msg); });
    };
    const auto interrupted = [this] { return m_closing || m_status_urgent; };
    m_beat_done_ms = steady_ms();
    std::unique_lock lock(m_mutex);
    while (!m_closing) {
        lock.unlock();
        const auto now = Liveness::Clock::now();
        bool watching = false;
        try {
            if (m_round != round) {
                round = m_round;
                reported = false;
                liveness.start_round(round, nnodes(), now);
            }
            liveness.beat(now);
            if (round >= 0) {
                auto heard = beat->signals.tick(*beat->store, round, now, m_on_kill != nullptr,
                                                m_on_signal != nullptr);
                if (heard.kill) reach_agent([this] { m_on_kill(); });
                for (int signal : heard.signals)
                    reach_agent([this, signal] { m_on_signal(signal); });
            }
            publish_status(*beat->store, beat->status);
            if (auto loss = liveness.observe(now)) report(std::move(*loss));
            m_beat_done_ms = steady_ms();
            watching = liveness.watches();
            if (watching) liveness.watch(Liveness::Clock::now() + interval, interrupted, report);
        } catch (const StoreError& e) {
            const bool recent = steady_ms() - m_beat_done_ms < timeout.count();
            switch (liveness.after(e, m_closing, recent, watching)) {
                case Liveness::AfterError::Return:
                    return;
                case Liveness::AfterError::RetryNow:
                    spdlog::debug("watching the others' etcd keys: {}; renewing", e.what());
                    lock.lock();
                    continue;
                case Liveness::AfterError::RetryLater:
                    spdlog::debug("renewing this agent's etcd lease: {}; trying again", e.what());
                    lock.lock();
                    m_wake.wait_for(lock, interval, [this] { return m_closing.load(); });
                    continue;
                case Liveness::AfterError::GiveUp: {
                    std::string msg = liveness.lost_store(e);
                    reach_agent([on_lost, msg] { on_lost(msg); });
                    return;
                }
            }
        }
        lock.lock();
        if (!watching) m_wake.wait_for(lock, interval, interrupted);
    }
}

void Coordinator::watch_leadership(EtcdLiveness& liveness, Store& store,
                                   std::chrono::steady_clock::time_point deadline) {
    const int leader = m_followed_leader;
    const bool leading = leader == m_agent;
    // The leader's agent watches every agent's key; the others, the leader's.
    const std::string alive = JobKeys::in_elastic("alive/");
    const std::string watched = leading ? alive : JobKeys::in_elastic("leader");
    if (liveness.watched() != watched) liveness.watch(watched, m_leader_revision);
    auto deleted = liveness.deleted_until(deadline);
    if (deleted.empty()) return;
    if (leading) {
        ElasticMember reporter(store, m_options.run_id, m_agent);
        reporter.follow_leader(m_agent);
        for (const std::string& name : deleted) {
            auto agent = to_integer(std::string_view(name).substr(alive.size()));
            if (!agent || *agent == m_agent || *agent < 0 || *agent >= (1 << 30)) continue;
            reporter.report_lost(static_cast<int>(*agent),
                                 lease_expired(m_options.heartbeat_timeout));
        }
        return;
    }
    // An agent that left (a stop signal) is on its way out: it leads nothing.
    if (m_left) return;
    // The leader's key is gone (its lease expired or was revoked): elect a successor,
    // the first agent to create the key again.
    const auto held = liveness.campaign(JobKeys::in_elastic("leader"), std::to_string(m_agent));
    const int next = leader_of(held);
    m_leader_revision = held.revision;
    if (next == m_agent) {
        std::vector<int> agents;
        for (const std::string& name : liveness.present(alive))
            if (auto agent = to_integer(name)) agents.push_back(static_cast<int>(*agent));
        spdlog::info("the agent that led the job (agent {}) is gone; this agent leads it now",
                     leader);
        reach_agent([this, leader, agents] { lead(leader, agents); });
    }
    follow_leader(next);
}

}  // namespace ddprun
