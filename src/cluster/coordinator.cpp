// The agent's link to the other nodes (see coordinator.hpp).
#include "ddprun/cluster/coordinator.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/rendezvous/etcd_liveness.hpp"
#include "ddprun/rendezvous/round_signals.hpp"
#include "ddprun/store/signed_store.hpp"

#include <cstdio>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace ddprun {
namespace {

// Blocking waits are cut in slices this long so that closing is prompt.
constexpr std::chrono::milliseconds k_wait_slice{500};

}  // namespace

std::expected<std::unique_ptr<Coordinator>, Error> Coordinator::open(asio::io_context& io,
                                                                     Options options) {
    try {
        auto counts = std::make_shared<StoreCounts>();
        auto store = sign_store(count_store(options.etcd ? open_etcd_store(*options.etcd)
                                                         : open_tcp_store(options.store),
                                            counts),
                                options.secret);
        return std::unique_ptr<Coordinator>(
            new Coordinator(io, std::move(options), std::move(store), std::move(counts)));
    } catch (const StoreError& e) {
        return std::unexpected(Error{e.what(), exit_code::kRendezvous});
    }
}

Coordinator::Coordinator(asio::io_context& io, Options options, std::unique_ptr<Store> store,
                         std::shared_ptr<StoreCounts> counts)
    : m_io(io),
      m_options(std::move(options)),
      m_counts(std::move(counts)),
      m_store(std::move(store)) {
    m_rendezvous = std::make_unique<Rendezvous>(*m_store, m_options.run_id);
    m_ops_store = m_store->clone();
    m_ops_rendezvous = std::make_unique<Rendezvous>(*m_ops_store, m_options.run_id);
    m_rendezvous->set_authenticated(!m_options.secret.empty());
    m_ops_rendezvous->set_authenticated(!m_options.secret.empty());
    m_ops = std::make_unique<asio::thread_pool>(1);
    m_round_nnodes = m_options.me.fingerprint.nnodes;
    if (m_options.etcd)
        m_entry = std::make_unique<EtcdLiveness>(*m_options.etcd, m_options.run_id,
                                                 m_options.heartbeat_timeout, m_options.secret);
}

std::optional<Error> Coordinator::arrive() {
    if (!m_options.elastic) return std::nullopt;
    try {
        if (m_entry) {
            // etcd: counted in before anything is read, so that the last agent out of
            // a job that is ending keeps its keys for this one (end_elastic_run_if_last).
            m_entry->hold(JobKeys::in_elastic(
                fmt::format("arriving/{}-{}", m_options.me.host, m_options.me.pid)));
            m_entered.lease = m_entry->lease();
        }
        if (auto ended = ElasticMember::ended(*m_store, m_options.run_id)) return ended;
        m_round = -1;  // no round joined yet: heartbeats only
        m_agent = ElasticMember::arrive(*m_store, m_options.run_id);
        m_member = std::make_unique<ElasticMember>(*m_store, m_options.run_id, m_agent);
        m_ops_member = std::make_unique<ElasticMember>(*m_ops_store, m_options.run_id, m_agent);
        if (m_entry) {
            // etcd: alive under this agent's lease from now on, and the leader is whoever
            // holds "e/leader" (this agent, if nobody does yet).
            m_entry->hold(JobKeys::in_elastic(fmt::format("alive/{}", m_agent)));
            m_entered.lease = m_entry->lease();
            auto leader = m_entry->campaign(JobKeys::in_elastic("leader"), std::to_string(m_agent));
            m_leader_revision = leader.revision;
            follow_leader(leader_of(leader));
            if (m_followed_leader == m_agent) lead(-1, {});
        } else if (m_options.store.is_server) {
            lead(-1, {});
        }
        return std::nullopt;
    } catch (const StoreError& e) {
        return Error{e.what(), exit_code::kRendezvous};
    }
}

int Coordinator::leader_of(const EtcdLiveness::Held& held) const {
    auto agent = to_integer(held.value);
    if (!agent || *agent < 0 || *agent >= (1 << 30))
        throw StoreError(
            StoreError::Kind::Other,
            fmt::format("malformed record under '{}': '{}' is not an agent id (another program "
                        "writes under this job's keys?)",
                        JobKeys(m_options.run_id).elastic("leader"), held.value));
    return static_cast<int>(*agent);
}

void Coordinator::follow_leader(int leader) {
    m_followed_leader = leader;
    m_member->follow_leader(leader);
    m_ops_member->follow_leader(leader);
}

void Coordinator::lead(int lost_leader, std::vector<int> alive) {
    ElasticLeader::Options leader;
    leader.run_id = m_options.run_id;
    leader.agent = m_agent;
    leader.me = m_options.me;
    leader.limits = m_options.limits;
    leader.heartbeat_timeout = m_options.heartbeat_timeout;
    leader.leases = m_options.etcd.has_value();
    leader.lost_leader = lost_leader;
    leader.alive = std::move(alive);
    leader.on_untrusted = [this](std::string why) {
        reach_agent([this, why = std::move(why)] {
            if (m_on_lost) m_on_lost("the elastic job's leader stopped: " + why);
        });
    };
    m_leader = std::make_unique<ElasticLeader>(m_store->clone(), std::move(leader));
    m_leader->start();
}

void Coordinator::leave(const std::string& why) {
    if (!m_member) return;
    m_left = true;
    try {
        m_member->leave(why);
    } catch (const StoreError& e) {
        spdlog::debug("leaving the job: {}", e.what());
    }
}

void Coordinator::close_job(int exit_code, const std::string& message) {
    // A leader that left (etcd) hands the job over: it goes on without this agent.
    if (!m_leader || m_left || store_stalled()) return;
    try {
        m_member->close(exit_code, message);
        m_leader->wait_closed(std::chrono::seconds(3));
    } catch (const StoreError& e) {
        spdlog::debug("closing the job: {}", e.what());
    }
}

bool Coordinator::store_stalled() const {
    std::int64_t done = m_beat_done_ms;
    return m_abandoned || (done != 0 && steady_ms() - done > m_options.heartbeat_timeout.count());
}

bool Coordinator::settle() {
    if (m_settled) return true;
    m_closing = true;
    m_wake.notify_all();
    {
        // The heartbeat thread may be in an etcd watch: end it now.
        std::lock_guard lock(m_mutex);
        if (m_liveness) m_liveness->cancel();
        if (m_entry) m_entry->cancel();
        if (m_watch_store) m_watch_store->cancel();
    }
    if (m_at_once ? threads_return(k_killed_bound)
                  : (!store_stalled() || threads_return(k_settle_bound)))
        return m_settled = true;
    abandon();
    if (m_leader) m_leader->abandon();
    return false;
}

void Coordinator::abandon() {
    std::lock_guard lock(m_reach_mutex);
    m_abandoned = true;
}

void Coordinator::reach_agent(std::function<void()> handler) {
    std::lock_guard lock(m_reach_mutex);
    if (!m_abandoned) asio::post(m_io, std::move(handler));
}

void Coordinator::retire(std::unique_ptr<Coordinator> coordinator) {
    if (coordinator && !coordinator->settle()) {
        spdlog::debug("leaving the threads blocked in a store call to the process's exit");
        (void)coordinator.release();
    }
}

Coordinator::~Coordinator() {
    // Owners retire() it; one that did not must not leave threads to a freed object.
    if (!settle()) {
        spdlog::critical("a Coordinator was destroyed under its blocked threads");
        std::abort();
    }
    if (m_heartbeat.joinable()) m_heartbeat.join();
    stop_watcher();
    m_ops->join();
    if (m_entry && m_options.elastic && m_entered.lease != 0) {
        // Its keys go at once, the others re-form or elect a leader at once; but its
        // leader's thread first (within a slice): it reads keys that go with the last
        // agent in. A client of its own: the others were cancelled.
        m_leader.reset();
        EtcdOptions client = m_options.etcd->client;
        client.timeout = std::min<std::chrono::milliseconds>(client.timeout, 2s);
        try {
            EtcdClient(client).call("/v3/lease/revoke",
                                    {{"ID", std::to_string(m_entered.lease.load())}});
            if (end_elastic_run_if_last(*m_options.etcd, m_options.run_id))
                spdlog::debug("the last agent out: removed the run's etcd keys");
        } catch (const StoreError& e) {
            spdlog::debug("leaving etcd (its keys go with their lease): {}", e.what());
        }
    }
    if (m_entry && !m_options.elastic && m_entered.round >= 0) {
        try {
            if (count_out_of_run(*m_options.etcd, m_options.run_id, nnodes()))
                spdlog::debug("the last node out: removed the run's etcd keys");
        } catch (const StoreError& e) {
            spdlog::debug("counting this node out of the run (its keys go with their lease): {}",
                          e.what());
        }
    }
}

bool Coordinator::threads_return(std::chrono::milliseconds bound) {
    if (m_abandoned) return false;
    const auto deadline = std::chrono::steady_clock::now() + bound;
    auto returned = [&deadline](const std::future<void>& done) {
        return !done.valid() || done.wait_until(deadline) == std::future_status::ready;
    };
    if (!returned(m_watcher_done) || !returned(m_heartbeat_done)) return false;
    // The operations thread is free when a task posted now runs.
    auto idle = std::make_shared<std::promise<void>>();
    auto ops_idle = idle->get_future();
    asio::post(*m_ops, [idle] { idle->set_value(); });
    if (!returned(ops_idle)) return false;
    if (!m_leader) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return m_leader->stop_within(std::max(left, std::chrono::milliseconds(0)));
}

void Coordinator::stop_watcher() {
    if (m_watcher.joinable()) m_watcher.join();
}

void Coordinator::join(int round, int node_rank, int master_port, JoinDone done) {
    NodeInfo me = m_options.me;
    me.node_rank = node_rank;
    me.master_port = master_port;
    if (m_options.elastic) {
        me.node_rank = -1;
        me.agent_id = fmt::format("{}-{}", me.pid, m_agent);
        asio::post(*m_ops, [this, me, done = std::move(done)] {
            auto spare = [this](std::string line) {
                reach_agent([this, line] {
                    if (m_on_spare) m_on_spare(line);
                });
            };
            auto result =
                m_ops_member->join(me, spare, [this] { return m_closing || m_join_cancelled; });
            if (result) {
                m_round_nnodes = static_cast<int>(result->nproc_per_node.size());
                m_round = result->round;
            }
            reach_agent([done, result = std::move(result)] { done(result); });
        });
        return;
    }
    m_round = round;
    asio::post(*m_ops, [this, round, me, done = std::move(done)] {
        auto result = m_ops_rendezvous->join(round, me, m_options.store.is_server,
                                             m_options.join_timeout, !m_options.etcd);
        if (result && m_entry) {
            // This node's lease key, before its workers start: from then on, its death
            // is seen through the watch of the others.
            try {
                const std::int64_t revision = m_entry->enter(round, result->node_rank);
                m_entered.lease = m_entry->lease();
                m_entered.revision = revision;
                m_entered.round = round;
            } catch (const StoreError& e) {
                result = std::unexpected(
                    Error{fmt::format("putting this node's etcd lease key: {}", e.what()),
                          exit_code::kRendezvous});
            }
        }
        reach_agent([done, result = std::move(result)] { done(result); });
    });
}

void Coordinator::watch(int round, StopHandler on_stop) {
    stop_watcher();
    m_watch_cancelled = false;
    std::promise<void> done;
    m_watcher_done = done.get_future();
    m_watcher =
        std::thread([this, round, on_stop = std::move(on_stop), done = std::move(done)]() mutable {
            watch_stop(round, on_stop);
            done.set_value();
        });
}

void Coordinator::watch_stop(int round, const StopHandler& on_stop) {
    std::unique_ptr<Store> store;
    try {
        store = m_store->clone();
    } catch (const StoreError& e) {
        reach_agent([on_stop, lost = store_lost(e.what())] { on_stop(lost); });
        return;
    }
    // A store whose wait can be cancelled (etcd) keeps one watch open for a heartbeat
    // timeout at a time (a member frozen mid-watch costs at most that; closing cancels
    // it); the others wait in short slices, so that closing stays prompt.
    const auto slice = store->cancellable() ? m_options.heartbeat_timeout : k_wait_slice;
    publish_watch_store(store.get());
    struct Unpublish {
        Coordinator& self;
        ~Unpublish() { self.publish_watch_store(nullptr); }
    } unpublish{*this};
    Rendezvous rendezvous(*store, m_options.run_id);
    for (;;) {
        StopEvent event = rendezvous.wait_stop(round, slice);
        if (event.kind == StopEvent::Kind::Timeout) {
            if (m_closing || m_watch_cancelled) return;
            continue;
        }
        reach_agent([on_stop, event = std::move(event)] { on_stop(event); });
        return;
    }
}

void Coordinator::publish_watch_store(Store* store) {
    std::lock_guard lock(m_mutex);
    m_watch_store = store;
    if (store && (m_closing || m_watch_cancelled)) store->cancel();
}

void Coordinator::cancel_watch() {
    m_watch_cancelled = true;
    std::lock_guard lock(m_mutex);
    if (m_watch_store) m_watch_store->cancel();
}

void Coordinator::publish_failure(int round, FailureRecord record) {
    asio::post(*m_ops, [this, round, record = std::move(record)] {
        try {
            m_ops_rendezvous->publish_failure(round, record);
        } catch (const StoreError& e) {
            // A lost store reaches the watcher too; garbage under our keys does not.
            give_up(round, std::string("publishing a failure failed: ") + e.what());
        }
    });
}

void Coordinator::share_progress(int round, int node_rank, std::vector<RankProgress> mine,
                                 std::chrono::milliseconds bound,
                                 std::function<void(std::vector<RankProgress>)> done) {
    asio::post(*m_ops, [this, round, node_rank, mine = std::move(mine), bound,
                        done = std::move(done)]() mutable {
        std::vector<RankProgress> all = mine;
        try {
            m_ops_rendezvous->publish_progress(round, node_rank, mine);
            auto others = m_ops_rendezvous->read_progress(round, nnodes(), node_rank, bound);
            all.insert(all.end(), others.begin(), others.end());
        } catch (const StoreError& e) {
            spdlog::debug("sharing the ranks' progress: {}", e.what());
        }
        reach_agent([done = std::move(done), all = std::move(all)] { done(all); });
    });
}

void Coordinator::publish_finished(int round, int node_rank) {
    asio::post(*m_ops, [this, round, node_rank] {
        try {
            m_ops_rendezvous->publish_finished(round, nnodes(), node_rank);
        } catch (const StoreError& e) {
            // E.g. a stray client wrote garbage under the round's keys: the barrier can never
            // complete, so the round ends now, on every node, saying why.
            give_up(round, std::string("the exit barrier failed: ") + e.what());
        }
    });
}

void Coordinator::publish_kill(int round) {
    asio::post(*m_ops, [this, round] {
        try {
            RoundSignals::publish_kill(*m_ops_store, JobKeys(m_options.run_id), round);
        } catch (const StoreError& e) {
            spdlog::debug("asking the other nodes to kill their workers: {}", e.what());
        }
    });
}

void Coordinator::give_up(int round, const std::string& message) {
    try {
        m_ops_rendezvous->abort(round, nnodes(), message, exit_code::kRendezvous);
    } catch (const StoreError& e) {
        spdlog::debug("aborting the round: {}", e.what());
    }
}

void Coordinator::abort(int round, const std::string& message, int exit_code) {
    try {
        m_rendezvous->abort(round, nnodes(), message, exit_code);
    } catch (const StoreError& e) {
        spdlog::debug("aborting the round: {}", e.what());
    }
    // An elastic job's host gives the job up: whoever waits to join is told too, and its
    // own join ends.
    m_join_cancelled = true;
    close_job(exit_code, message);
}

std::optional<Error> Coordinator::check_run_id() {
    // An etcd cluster serves many jobs, each under its own run id's keys.
    if (m_options.etcd) return std::nullopt;
    // The value names who wrote it and what they run: "<run id>\n<node>\n<program>".
    const std::string& mine = m_options.run_id;
    const std::string me = fmt::format("node {} ({})", m_options.me.node_rank, m_options.me.host);
    const std::string& program = m_options.me.fingerprint.program;
    try {
        std::string first;
        try {
            first =
                m_store->compare_set(JobKeys::run_id_key(), "", mine + "\n" + me + "\n" + program);
        } catch (const RecordRejected&) {
            // Warned by the store. Nothing is decided on it: the join that follows is signed
            // throughout, and fails on every node at once if another agent's secret differs
            // (or it has none), which a failure here alone would not (node 0 would wait).
            return std::nullopt;
        }
        std::size_t at = 0;
        auto field = [&first, &at] {
            auto newline = std::min(first.find('\n', at), first.size());
            std::string text = first.substr(at, newline - at);
            at = std::min(newline + 1, first.size());
            return text;
        };
        const std::string first_id = field();
        if (first_id == mine) return std::nullopt;
        std::string first_node = field();
        if (first_node.empty()) first_node = "another node";
        const std::string first_program = first.substr(at);
        const std::string endpoint =
            fmt::format("{}:{}", m_options.store.host, m_options.store.port);
        if (first_program != program) {
            // Another job's store: leave that job alone, it is not this one's to stop.
            return Error{
                fmt::format("the rendezvous store at {} belongs to another job (run '{}', "
                            "started by {}), not to this one (run '{}'): two jobs share a store "
                            "port; give each its own with --rdzv_endpoint=HOST:PORT",
                            endpoint, first_id, first_node, mine),
                exit_code::kRendezvous};
        }
        std::string message = fmt::format(
            "the nodes must run the same job, but the run id (--rdzv_id) differs: '{}' on {}, "
            "'{}' on {}; give every node the same --rdzv_id",
            first_id, first_node, mine, me);
        // The same program under another run id: the nodes of one job, started with
        // different ids. They wait under their own keys: tell them there, and give them a
        // moment to read it before this agent (maybe the store's host) goes away.
        Rendezvous other(*m_store, first_id);
        other.abort(0, nnodes(), message, exit_code::kRendezvous);
        if (m_options.store.is_server)
            other.wait_acknowledged(0, nnodes(), std::chrono::seconds(2));
        return Error{message, exit_code::kRendezvous};
    } catch (const StoreError& e) {
        return Error{e.what(), exit_code::kRendezvous};
    }
}

void Coordinator::broadcast_signal(int round, int node_rank, int signal) {
    // Who sent it, so that its own heartbeat thread skips it: an elastic agent's node rank
    // may change between rounds, its id does not.
    const int origin = m_options.elastic ? m_agent : node_rank;
    asio::post(*m_ops, [this, round, origin, signal] {
        try {
            RoundSignals::publish_signal(*m_ops_store, JobKeys(m_options.run_id), round, signal,
                                         origin);
        } catch (const StoreError& e) {
            spdlog::warn("could not pass the signal on to the other nodes: {}", e.what());
        }
    });
}

}  // namespace ddprun
