// How an agent's round ends: what it tells the others, within which bound, and
// whether any node made progress in a failed one (see coordinator.hpp). Apart from coordinator.cpp
// because a killed agent's end has a path of its own.
#include <future>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "ddprun/base/logging.hpp"
#include "ddprun/cluster/coordinator.hpp"

namespace asio = boost::asio;

namespace ddprun {

void Coordinator::end_round(int round, int node_rank, std::chrono::milliseconds bound,
                            const std::vector<int>& lost, bool store_alive, bool joined) {
    // The round may end without a stop (this agent was killed): the watcher must not wait.
    cancel_watch();
    if (m_at_once) {
        // Killed: what it tells the others is best effort, for k_killed_bound (the store's
        // host may have died with it: a reconnect loop lasts the store's whole timeout).
        auto told = std::make_shared<std::promise<void>>();
        auto done = told->get_future();
        asio::post(*m_ops, [this, round, node_rank, outcomes = m_outcomes, told] {
            try {
                if (!outcomes.empty())
                    m_ops_rendezvous->publish_outcomes(round, node_rank, outcomes);
                m_ops_rendezvous->acknowledge(round, node_rank, nnodes());
            } catch (const StoreError& e) {
                spdlog::debug("ending the round: {}", e.what());
            }
            told->set_value();
        });
        if (done.wait_for(k_killed_bound) != std::future_status::ready) abandon();
        return;
    }
    if (!store_alive && store_stalled() && m_watcher.joinable() &&
        m_watcher_done.wait_for(k_settle_bound) != std::future_status::ready) {
        // The watcher is blocked in a call to the frozen store beyond its slice: c10d 2.x
        // waits out the store's timeout for the reply to the CANCEL_WAIT it sends when a
        // wait runs out. Abandoned with the rest (~Coordinator), whatever the clock says
        // then. A store that is gone (not frozen) fails the call at once: joined.
        abandon();
        return;
    }
    stop_watcher();
    if (!store_alive) return;  // a call to a dead store could block until its timeout
    try {
        if (!m_outcomes.empty()) m_rendezvous->publish_outcomes(round, node_rank, m_outcomes);
        for (int node : lost) m_rendezvous->acknowledge(round, node, nnodes());
        m_rendezvous->acknowledge(round, node_rank, nnodes());
        if (m_options.store.is_server) {
            auto missing = m_rendezvous->wait_acknowledged(round, nnodes(), bound);
            if (!missing.empty() && joined)
                spdlog::warn("{} node(s) did not confirm the end of the job; closing the store",
                             missing.size());
            if (!m_outcomes.empty())
                m_others_outcomes = m_rendezvous->read_outcomes(round, nnodes(), node_rank);
        }
    } catch (const StoreError& e) {
        spdlog::debug("ending the round: {}", e.what());
    }
}

void Coordinator::publish_made_progress(int round, int node_rank, bool made) {
    asio::post(*m_ops, [this, round, node_rank, made] {
        try {
            m_ops_rendezvous->publish_made_progress(round, node_rank, made);
        } catch (const StoreError& e) {
            spdlog::debug("telling the others whether this node made progress: {}", e.what());
        }
    });
}

bool Coordinator::made_progress_anywhere(int round, int node_rank, bool mine,
                                         std::chrono::milliseconds bound) {
    if (mine) return true;
    auto answer = std::make_shared<std::promise<Rendezvous::ProgressVotes>>();
    auto votes = answer->get_future();
    asio::post(*m_ops, [this, round, node_rank, bound, answer] {
        Rendezvous::ProgressVotes read{0, nnodes() - 1};
        try {
            read = m_ops_rendezvous->read_made_progress(round, nnodes(), node_rank, bound);
        } catch (const StoreError& e) {
            spdlog::debug("reading whether the other nodes made progress: {}", e.what());
        }
        answer->set_value(read);
    });
    // The ops thread runs one call at a time: the ones queued before this one first.
    if (votes.wait_for(bound + std::chrono::seconds(5)) != std::future_status::ready) {
        spdlog::warn("the other nodes' progress did not arrive: counted as progress");
        return true;
    }
    const auto read = votes.get();
    if (read.missing > 0)
        spdlog::warn("{} node(s) did not say whether they made progress: counted as progress",
                     read.missing);
    return read.made > 0 || read.missing > 0;
}

}  // namespace ddprun
