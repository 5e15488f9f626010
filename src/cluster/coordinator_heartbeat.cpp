// The Coordinator's heartbeat thread (see coordinator.hpp): it beats for this
// agent, notices a kill or a broadcast signal another node published, and
// watches for a lost node (the store's host watches the others) or a lost
// store (the others watch the store's host). Kept apart from the rest of the
// Coordinator because it is one loop with a concern of its own: liveness.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <cstdio>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/cluster/coordinator.hpp"
#include "ddprun/rendezvous/etcd_liveness.hpp"
#include "ddprun/store/signed_store.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace ddprun {
namespace {

// Why an elastic job, which survives any other node, ends with node 0.
constexpr const char* k_store_host_is_vital =
    "; an elastic job survives the loss of any node but node 0, whose agent hosts the "
    "rendezvous store with --rdzv_backend=c10d (over --rdzv_backend=etcd any node may be lost)";

// The round's stop when `node` stopped answering: `why` is how that was seen.
FailureRecord node_lost(int node, const std::string& why) {
    FailureRecord record;
    record.kind = FailureKind::NodeLost;
    record.node_rank = node;
    record.exit_code = exit_code::kRendezvous;
    record.time_ms = wall_ms();
    record.message =
        fmt::format("node {} stopped answering ({}: killed, frozen or cut off)", node, why);
    return record;
}

// Whether the round's "kill" (which exists) is a record of this job: one that is not
// signed with its secret is ignored (the store warns once), so that nobody without
// the secret stops a healthy job. A genuine kill overwrites it (a set, not a
// compare_set), and is seen at a later beat.
bool genuine_kill(Store& store, const std::string& kill_key) {
    try {
        store.get(kill_key);
        return true;
    } catch (const RecordRejected&) {
        return false;
    }
}

// Why the heartbeat thread gives up after a store error: given up by the others, or
// a record the job secret refuses (e.g. the leader key), says it all; anything else
// is the store's loss.
std::string store_failure(const StoreError& e) {
    if (e.kind() == StoreError::Kind::GivenUp || dynamic_cast<const RecordRejected*>(&e))
        return e.what();
    return std::string("lost the rendezvous store: ") + e.what();
}

// An etcd that did not answer for a moment (a member killed, the link down for a
// second): this agent's lease holds until heartbeat_timeout after its last renewal,
// so the renewal is tried again rather than the store given up for lost. The stall
// timer (StoreCluster) ends the agent once the store was silent for longer.
bool transient(const StoreError& e) {
    return e.kind() == StoreError::Kind::Timeout || e.kind() == StoreError::Kind::Connection;
}

}  // namespace

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

void Coordinator::heartbeat_loop(int node_rank, LostHandler on_lost) {
    const auto timeout = m_options.heartbeat_timeout;
    // Several beats per timeout, so that one late beat is not a lost node.
    const auto interval = std::max<std::chrono::milliseconds>(timeout / 5, 50ms);
    // Who watches the others: the store's host; on etcd, which no agent hosts, node 0.
    const bool host = m_options.etcd ? node_rank == 0 : m_options.store.is_server;
    std::unique_ptr<Store> store;
    try {
        StoreOptions client = m_options.store;
        store = m_store->clone();
    } catch (const StoreError& e) {
        reach_agent([on_lost, msg = std::string(e.what())] { on_lost(msg); });
        return;
    }
    Rendezvous rendezvous(*store, m_options.run_id);
    // An elastic agent beats under its id from its arrival on (spares too); the leader
    // watches the others, the others watch the leader.
    const bool elastic = m_options.elastic;
    std::optional<ElasticMember> member;
    if (elastic) member.emplace(*store, m_options.run_id, m_agent);
    int round = elastic ? -2 : -1;
    // On etcd, liveness is a lease: the agent renews it, etcd deletes a dead agent's key,
    // and the watchers see the deletion (etcd_liveness.hpp).
    std::unique_ptr<EtcdLiveness> liveness;
    if (m_options.etcd) {
        liveness = std::make_unique<EtcdLiveness>(*m_options.etcd, m_options.run_id, timeout,
                                                  m_options.secret);
        // An elastic agent holds its lease from its arrival on (arrive()).
        if (elastic) liveness->follow(-1, m_entered_lease, 0);
    }
    // The destructor cancels its watch; the pointer goes before the object does.
    struct Published {
        Coordinator& self;
        ~Published() {
            std::lock_guard lock(self.m_mutex);
            self.m_liveness = nullptr;
        }
    } published{*this};
    {
        std::lock_guard lock(m_mutex);
        m_liveness = liveness.get();
        if (m_closing && liveness) liveness->cancel();
    }
    std::vector<int> watched;
    int followed = -1;  // on etcd: the round whose lease keys are watched
    auto round_started = HeartbeatMonitor::Clock::now();
    bool presence_checked = false;
    std::unique_ptr<HeartbeatMonitor> monitor;
    bool reported = false;
    std::int64_t seq = 0;
    std::int64_t signals_seen = 0;
    bool kill_seen = false;
    // Since when the next counted signal's record is missing; the epoch: it is not.
    HeartbeatMonitor::Clock::time_point signal_gap_since{};
    StatusPublication status{{}, StatusPublisher(m_options.run_id, m_options.stragglers)};
    m_beat_done_ms = steady_ms();
    std::unique_lock lock(m_mutex);
    while (!m_closing) {
        lock.unlock();
        auto now = HeartbeatMonitor::Clock::now();
        try {
            if (elastic && round == -2) {
                round = -1;  // before the first round: beat and watch the leader only
                monitor = std::make_unique<HeartbeatMonitor>(
                    host || liveness ? std::vector<int>{} : std::vector<int>{0}, timeout, now);
            }
            if (m_round != round) {
                round = m_round;
                signals_seen = 0;
                signal_gap_since = {};
                kill_seen = false;
                watched.clear();
                round_started = now;
                presence_checked = false;
                if (elastic) {
                    if (!host) watched.push_back(0);
                } else if (host) {
                    for (int node = 0; node < nnodes(); ++node)
                        if (node != node_rank) watched.push_back(node);
                } else {
                    watched.push_back(0);
                }
                // With a lease, only a node whose key never came is judged by the monitor;
                // the others' deaths come from the watch below.
                monitor = std::make_unique<HeartbeatMonitor>(
                    liveness ? std::vector<int>{} : watched, timeout, now);
                reported = false;
            }
            if (liveness && m_entered_round != followed) {
                // The join put this round's key: watch from there on.
                followed = m_entered_round;
                liveness->follow(followed, m_entered_lease, m_entered_revision);
                // Every node joined by now: each has had the time to put its key from here.
                round_started = now;
                presence_checked = false;
            }
            if (liveness)
                liveness->keep_alive();
            else if (elastic)
                store->set(member->heartbeat_key(host), std::to_string(++seq));
            else
                rendezvous.beat(round, node_rank, ++seq);
            if (round < 0) {
                // Not in a round yet (an elastic agent waiting to join).
            } else if (m_on_kill && !kill_seen && store->check({rendezvous.key(round, "kill")}) &&
                       genuine_kill(*store, rendezvous.key(round, "kill"))) {
                kill_seen = true;
                reach_agent([this] { m_on_kill(); });
            }
            if (m_on_signal && round >= 0) {
                // Signals other agents broadcast since the last beat (--broadcast-signals).
                // The count only says that records may be there: each is read signed. A
                // number without its record (the sender is between its add and its set, or
                // someone without the secret added) is waited for until heartbeat_timeout,
                // then skipped, so that a forged count holds no later signal back.
                std::int64_t count = store->add(rendezvous.key(round, "signals"), 0);
                for (; signals_seen < count; ++signals_seen) {
                    const std::string signal_key =
                        rendezvous.key(round, fmt::format("signal/{}", signals_seen + 1));
                    if (!store->check({signal_key})) {
                        if (signal_gap_since == HeartbeatMonitor::Clock::time_point{})
                            signal_gap_since = now;
                        if (now - signal_gap_since < timeout) break;
                        spdlog::warn(
                            "signal {} of round {} was counted but never written; "
                            "skipping it",
                            signals_seen + 1, round);
                        signal_gap_since = {};
                        continue;
                    }
                    signal_gap_since = {};
                    std::string text;
                    try {
                        text = store->get(signal_key);
                    } catch (const RecordRejected&) {
                        continue;  // warned by the store: a forged signal is ignored
                    }
                    int signal = 0;
                    int origin = -1;
                    if (std::sscanf(text.c_str(), "%d %d", &signal, &origin) != 2 || signal <= 0 ||
                        signal >= 65)
                        continue;  // not ours to trust; never a reason to fail the job
                    if (origin == (elastic ? m_agent : node_rank))
                        continue;  // forwarded here already
                    reach_agent([this, signal] { m_on_signal(signal); });
                }
            }
            publish_status(*store, status);
            if (liveness) {
                // A node that never put its key (it died right after joining) is lost too,
                // once it has had heartbeat_timeout to do so.
                if (!presence_checked && followed == round && now - round_started >= timeout) {
                    presence_checked = true;
                    for (int node : liveness->missing(watched))
                        monitor->observe(node, std::nullopt, round_started);
                }
            } else if (elastic) {
                if (!host) {
                    const std::string leader_key = elastic_key(m_options.run_id, "hb/host");
                    std::optional<std::int64_t> beat;
                    try {
                        if (store->check({leader_key})) beat = to_integer(store->get(leader_key));
                    } catch (const RecordRejected&) {
                        // No beat (warned by the store): the leader's next one replaces it.
                    }
                    monitor->observe(0, beat, now);
                }
            } else if (host) {
                auto beats = rendezvous.read_heartbeats(round, nnodes());
                for (int node = 0; node < nnodes(); ++node)
                    if (node != node_rank)
                        monitor->observe(node, beats.at(static_cast<std::size_t>(node)), now);
            } else {
                monitor->observe(0, rendezvous.read_heartbeat(round, 0), now);
            }
            auto stale = monitor->stale(HeartbeatMonitor::Clock::now());
            if (!stale.empty() && !reported) {
                reported = true;
                if (elastic) {
                    std::string msg = fmt::format(
                        "the store's host (node 0) stopped answering (no heartbeat for {} ms){}",
                        timeout.count(), k_store_host_is_vital);
                    reach_agent([on_lost, msg] { on_lost(msg); });
                } else if (host || m_options.etcd) {
                    // On etcd node 0 is a node like any other: its loss is a node's loss.
                    rendezvous.publish_failure(
                        round,
                        node_lost(stale.front(),
                                  liveness
                                      ? fmt::format("no etcd lease key within {} ms of the "
                                                    "round's start",
                                                    timeout.count())
                                      : fmt::format("no heartbeat for {} ms", timeout.count())));
                } else {
                    std::string msg = fmt::format(
                        "the store's host (node 0) stopped answering (no heartbeat for {} ms)",
                        timeout.count());
                    reach_agent([on_lost, msg] { on_lost(msg); });
                }
            }
        } catch (const StoreError& e) {
            if (m_closing && liveness) return;  // its etcd calls were cancelled: closing
            if (liveness && transient(e) && steady_ms() - m_beat_done_ms < timeout.count()) {
                spdlog::debug("renewing this agent's etcd lease: {}; trying again", e.what());
                lock.lock();
                m_wake.wait_for(lock, interval, [this] { return m_closing.load(); });
                continue;
            }
            std::string msg = store_failure(e);
            if (elastic && !liveness) msg += k_store_host_is_vital;
            reach_agent([on_lost, msg] { on_lost(msg); });
            return;
        }
        m_beat_done_ms = steady_ms();
        if (liveness) {
            // Until the next renewal: watch the others' keys, in short slices so that
            // closing stays prompt.
            try {
                const auto next = HeartbeatMonitor::Clock::now() + interval;
                while (!m_closing && !m_status_urgent && HeartbeatMonitor::Clock::now() < next &&
                       m_entered_round == followed) {
                    const auto slice = std::min(next, HeartbeatMonitor::Clock::now() + 500ms);
                    if (elastic) {
                        watch_leadership(*liveness, *store, slice);
                        m_beat_done_ms = steady_ms();
                        continue;
                    }
                    auto lost = liveness->lost_until(watched, slice);
                    m_beat_done_ms = steady_ms();
                    if (lost.empty() || reported) continue;
                    reported = true;
                    rendezvous.publish_failure(
                        round,
                        node_lost(lost.front(),
                                  fmt::format("its etcd lease of {} ms expired", timeout.count())));
                }
            } catch (const StoreError& e) {
                if (m_closing) return;  // cancelled: the agent is closing
                if (transient(e) && steady_ms() - m_beat_done_ms < timeout.count()) {
                    // The watch could not reach etcd: renew the lease at once, which says
                    // whether this agent is still in the job.
                    spdlog::debug("watching the others' etcd keys: {}; renewing", e.what());
                    lock.lock();
                    continue;
                }
                std::string msg = store_failure(e);
                reach_agent([on_lost, msg] { on_lost(msg); });
                return;
            }
            lock.lock();
            continue;
        }
        lock.lock();
        m_wake.wait_for(lock, interval, [this] { return m_closing || m_status_urgent; });
    }
}

void Coordinator::watch_leadership(EtcdLiveness& liveness, Store& store,
                                   std::chrono::steady_clock::time_point deadline) {
    const int leader = m_followed_leader;
    const bool leading = leader == m_agent;
    // The leader's agent watches every agent's key; the others, the leader's.
    const std::string alive = "e/alive/";
    const std::string watched = leading ? alive : "e/leader";
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
    const auto held = liveness.campaign("e/leader", std::to_string(m_agent));
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
