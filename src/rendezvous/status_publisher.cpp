// The status protocol's steps (see status_publisher.hpp).
#include "ddprun/rendezvous/status_publisher.hpp"

#include "ddprun/base/logging.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {

std::optional<NodeStatus> read_node_status(Store& store, const std::string& key,
                                           const std::string& run_id) {
    auto text = read_record(store, key);  // a rejected one was warned about by the store
    if (!text) return std::nullopt;
    auto status = parse_node_status(*text, run_id);
    if (!status) {
        spdlog::debug("status record {}: {}", key, status.error());
        return std::nullopt;
    }
    return *status;
}

std::vector<StragglerWatch::Rate> StatusPublisher::read_rates(Store& store,
                                                              const NodeStatus& mine) {
    std::vector<StragglerWatch::Rate> rates;
    auto add = [&rates](const NodeStatus& node) {
        for (const RankStatus& rank : node.ranks)
            rates.push_back({rank.rank, node.node_rank, rank.rate});
    };
    add(mine);
    for (int node = 0; node < mine.nnodes; ++node) {
        if (node == mine.node_rank) continue;
        auto theirs = read_node_status(store, m_keys.status(node), m_keys.run_id());
        if (theirs && theirs->round == mine.round && theirs->node_rank == node) add(*theirs);
    }
    return rates;
}

std::vector<Straggler> StatusPublisher::tick(Store& store, NodeStatus mine,
                                             StragglerWatch::Clock::time_point now) {
    if (mine.round != m_round) {
        m_round = mine.round;
        m_watch = StragglerWatch(m_limits.value_or(StragglerLimits{0, {}}));
        m_news_seen = 0;
    }
    const bool node_zero = mine.node_rank == 0;
    if (node_zero) {
        if (watching() && mine.state == "running")
            m_watch.observe(read_rates(store, mine), now, mine.time_ms);
        mine.stragglers = m_watch.current();
        mine.straggler_news = m_watch.news();
    }
    store.set(m_keys.status(mine.node_rank), to_json(mine, m_keys.run_id()));
    if (!watching()) return {};
    std::vector<Straggler> news = mine.straggler_news;
    if (!node_zero) {
        auto zero = read_node_status(store, m_keys.status(0), m_keys.run_id());
        if (!zero || zero->round != mine.round) return {};
        news = zero->straggler_news;
    }
    std::vector<Straggler> unseen;
    for (const Straggler& straggler : news) {
        if (straggler.seq <= m_news_seen) continue;
        m_news_seen = straggler.seq;
        unseen.push_back(straggler);
    }
    return unseen;
}

}  // namespace ddprun
