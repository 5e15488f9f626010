// The three liveness strategies (see liveness.hpp).
#include "liveness.hpp"

#include <vector>

#include <fmt/format.h>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/store/signed_store.hpp"

using namespace std::chrono_literals;

namespace ddprun {
namespace {

// Why an elastic job, which survives any other node, ends with node 0.
constexpr const char* k_store_host_is_vital =
    "; an elastic job survives the loss of any node but node 0, whose agent hosts the "
    "rendezvous store with --rdzv_backend=c10d (over --rdzv_backend=etcd any node may be lost)";

// An etcd that did not answer for a moment (a member killed, the link down for a
// second): this agent's lease holds until heartbeat_timeout after its last renewal,
// so the renewal is tried again rather than the store given up for lost. The stall
// timer (StoreCluster) ends the agent once the store was silent for longer.
bool transient(const StoreError& e) {
    return e.kind() == StoreError::Kind::Timeout || e.kind() == StoreError::Kind::Connection;
}

// The c10d strategies' beat: a counter under the round's keys, or an elastic agent's
// key of its own (it beats from its arrival on, spares too).
class Counters : public Liveness {
  public:
    explicit Counters(const LivenessSetup& setup) : m_setup(setup) {}

    void start_round(int round, int nnodes, Clock::time_point now) override {
        m_round = round;
        m_nnodes = nnodes;
        m_monitor = std::make_unique<HeartbeatMonitor>(watched(), m_setup.timeout, now);
    }

    void beat(Clock::time_point) override {
        if (m_setup.member)
            m_setup.store.set(m_setup.member->heartbeat_key(host()), std::to_string(++m_seq));
        else
            m_setup.rendezvous.beat(m_round, m_setup.node_rank, ++m_seq);
    }

    AfterError after(const StoreError&, bool, bool, bool) const override {
        return AfterError::GiveUp;
    }

    std::string lost_store(const StoreError& error) const override {
        return Liveness::lost_store(error) + (m_setup.member ? k_store_host_is_vital : "");
    }

  protected:
    virtual bool host() const = 0;
    virtual std::vector<int> watched() const = 0;

    const LivenessSetup m_setup;
    int m_round = -1;
    int m_nnodes = 1;
    std::int64_t m_seq = 0;
    std::unique_ptr<HeartbeatMonitor> m_monitor;
};

// The store's host watches every other node's counter; an elastic job's leader
// watches its members on its own thread (elastic_leader.cpp).
class C10dHost final : public Counters {
  public:
    using Counters::Counters;

    std::optional<Loss> observe(Clock::time_point now) override {
        if (m_setup.member) return std::nullopt;
        auto beats = m_setup.rendezvous.read_heartbeats(m_round, m_nnodes);
        for (int node = 0; node < m_nnodes; ++node)
            if (node != m_setup.node_rank)
                m_monitor->observe(node, beats.at(static_cast<std::size_t>(node)), now);
        auto stale = m_monitor->stale(Clock::now());
        if (stale.empty()) return std::nullopt;
        return Loss{node_lost(stale.front(),
                              fmt::format("no heartbeat for {}", duration_text(m_setup.timeout))),
                    {}};
    }

  private:
    bool host() const override { return true; }
    std::vector<int> watched() const override {
        std::vector<int> nodes;
        if (m_setup.member) return nodes;
        for (int node = 0; node < m_nnodes; ++node)
            if (node != m_setup.node_rank) nodes.push_back(node);
        return nodes;
    }
};

// Every other node watches the store's host, node 0: the store goes with it.
class C10dMember final : public Counters {
  public:
    using Counters::Counters;

    std::optional<Loss> observe(Clock::time_point now) override {
        m_monitor->observe(
            0, m_setup.member ? leader_beat() : m_setup.rendezvous.read_heartbeat(m_round, 0), now);
        if (m_monitor->stale(Clock::now()).empty()) return std::nullopt;
        return Loss{
            std::nullopt,
            fmt::format("the store's host (node 0) stopped answering (no heartbeat for {}){}",
                        duration_text(m_setup.timeout),
                        m_setup.member ? k_store_host_is_vital : "")};
    }

  private:
    bool host() const override { return false; }
    std::vector<int> watched() const override { return {0}; }

    // Missing or rejected (warned by the store): no beat; the leader's next replaces it.
    std::optional<std::int64_t> leader_beat() {
        auto beat = read_record(m_setup.store, m_setup.member->heartbeat_key(true));
        return beat ? to_integer(*beat) : std::nullopt;
    }
};

// On etcd, liveness is a lease: the agent renews it, etcd deletes a dead agent's key,
// and the watchers see the deletion (etcd_liveness.hpp). Node 0 is a node like any
// other there: its loss is a node's loss, published by whoever sees it.
class Etcd final : public Liveness {
  public:
    Etcd(const LivenessSetup& setup, bool host) : m_setup(setup), m_host(host) {
        // An elastic agent holds its lease from its arrival on (Coordinator::arrive).
        if (m_setup.member) m_setup.leases->follow(-1, m_setup.entered->lease.load(), 0);
    }

    void start_round(int round, int nnodes, Clock::time_point now) override {
        m_round = round;
        m_watched.clear();
        // An elastic job's leader and members watch each other through the election
        // (Coordinator::watch_leadership), not through the rounds' keys.
        if (!m_setup.member) {
            if (m_host) {
                for (int node = 0; node < nnodes; ++node)
                    if (node != m_setup.node_rank) m_watched.push_back(node);
            } else {
                m_watched.push_back(0);
            }
        }
        m_round_started = now;
        m_presence_checked = false;
        // Only a node whose key never came is judged by the monitor; the others'
        // deaths come from the watch.
        m_monitor = std::make_unique<HeartbeatMonitor>(std::vector<int>{}, m_setup.timeout, now);
    }

    void beat(Clock::time_point now) override {
        if (m_setup.entered->round.load() != m_followed) {
            // The join put this round's key: watch from there on.
            m_followed = m_setup.entered->round.load();
            m_setup.leases->follow(m_followed, m_setup.entered->lease.load(),
                                   m_setup.entered->revision.load());
            // Every node joined by now: each has had the time to put its key from here.
            m_round_started = now;
            m_presence_checked = false;
        }
        m_setup.leases->keep_alive();
    }

    std::optional<Loss> observe(Clock::time_point now) override {
        // A node that never put its key (it died right after joining) is lost too, once
        // it has had heartbeat_timeout to do so.
        if (!m_presence_checked && m_followed == m_round &&
            now - m_round_started >= m_setup.timeout) {
            m_presence_checked = true;
            for (int node : m_setup.leases->missing(m_watched))
                m_monitor->observe(node, std::nullopt, m_round_started);
        }
        auto stale = m_monitor->stale(Clock::now());
        if (stale.empty()) return std::nullopt;
        return Loss{
            node_lost(stale.front(), fmt::format("no etcd lease key within {} of the round's start",
                                                 duration_text(m_setup.timeout))),
            {}};
    }

    bool watches() const override { return true; }

    // Until the next renewal: the others' keys, in short slices so that closing stays
    // prompt.
    void watch(Clock::time_point next, const std::function<bool()>& interrupted,
               const std::function<void(Loss)>& report) override {
        while (!interrupted() && Clock::now() < next &&
               m_setup.entered->round.load() == m_followed) {
            const auto slice = std::min(next, Clock::now() + 500ms);
            if (m_setup.member) {
                m_setup.watch_leadership(*m_setup.leases, slice);
                m_setup.progressed();
                continue;
            }
            auto lost = m_setup.leases->lost_until(m_watched, slice);
            m_setup.progressed();
            if (!lost.empty())
                report(Loss{node_lost(lost.front(), fmt::format("its etcd lease of {} expired",
                                                                duration_text(m_setup.timeout))),
                            {}});
        }
    }

    AfterError after(const StoreError& error, bool closing, bool recent,
                     bool watching) const override {
        if (closing) return AfterError::Return;  // its etcd calls were cancelled: closing
        if (transient(error) && recent)
            // A watch that could not reach etcd renews the lease at once, which says
            // whether this agent is still in the job.
            return watching ? AfterError::RetryNow : AfterError::RetryLater;
        return AfterError::GiveUp;
    }

  private:
    const LivenessSetup m_setup;
    const bool m_host;
    int m_round = -1;
    int m_followed = -1;  // the round whose lease keys are watched
    std::vector<int> m_watched;
    Clock::time_point m_round_started{};
    bool m_presence_checked = false;
    std::unique_ptr<HeartbeatMonitor> m_monitor;
};

}  // namespace

// Given up by the others, or a record the job secret refuses (e.g. the leader key),
// says it all; anything else is the store's loss.
std::string Liveness::lost_store(const StoreError& error) const {
    if (error.kind() == StoreError::Kind::GivenUp || dynamic_cast<const RecordRejected*>(&error))
        return error.what();
    return std::string("lost the rendezvous store: ") + error.what();
}

std::unique_ptr<Liveness> make_liveness(LivenessSetup setup, bool host) {
    if (setup.leases) return std::make_unique<Etcd>(setup, host);
    if (host) return std::make_unique<C10dHost>(setup);
    return std::make_unique<C10dMember>(setup);
}

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

}  // namespace ddprun
