// Node 0's straggler judgement (see straggler.hpp).
#include "ddprun/rendezvous/straggler.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"

namespace ddprun {

double median_rate(const std::vector<double>& rates) {
    std::vector<double> known;
    for (double rate : rates)
        if (rate >= 0) known.push_back(rate);
    if (known.size() < 2) return -1;
    std::ranges::sort(known);
    const std::size_t mid = known.size() / 2;
    return known.size() % 2 ? known[mid] : (known[mid - 1] + known[mid]) / 2;
}

std::vector<Straggler> StragglerWatch::observe(const std::vector<Rate>& rates,
                                               Clock::time_point now, std::int64_t wall_ms) {
    std::vector<Straggler> named;
    if (!m_limits.enabled()) return named;
    std::vector<double> values;
    for (const Rate& r : rates) values.push_back(r.rate);
    const double median = median_rate(values);
    if (median <= 0) return named;
    const double floor = m_limits.fraction * median;
    auto name = [&](const Rate& r, bool recovered) {
        Straggler g{r.rank, r.node_rank, r.rate, median, wall_ms, recovered, ++m_seq};
        named.push_back(g);
        m_news.push_back(g);
        if (m_news.size() > k_max_straggler_news) m_news.erase(m_news.begin());
        if (recovered)
            m_named.erase(r.rank);
        else
            m_named[r.rank] = g;
    };
    for (const Rate& r : rates) {
        if (r.rate < 0) continue;
        if (r.rate >= floor) {
            m_below_since.erase(r.rank);
            if (m_named.contains(r.rank)) name(r, true);
            continue;
        }
        const auto since = m_below_since.try_emplace(r.rank, now).first;
        if (auto it = m_named.find(r.rank); it != m_named.end()) {
            it->second.rate = r.rate;  // still one: the current figures for readers
            it->second.median = median;
        } else if (now - since->second >= m_limits.window) {
            name(r, false);
        }
    }
    return named;
}

std::vector<Straggler> StragglerWatch::current() const {
    std::vector<Straggler> out;
    for (const auto& [rank, straggler] : m_named) out.push_back(straggler);
    return out;
}

std::string describe_straggler(const Straggler& g, std::chrono::milliseconds window) {
    if (g.recovered)
        return fmt::format(
            "rank {} (node {}) is no longer a straggler: {:.1f} steps/s against a "
            "median of {:.1f}",
            g.rank, g.node_rank, g.rate, g.median);
    return fmt::format(
        "rank {} (node {}) is a straggler: {:.1f} steps/s against a median of {:.1f} for {} "
        "(--straggler-window)",
        g.rank, g.node_rank, g.rate, g.median, duration_text(window));
}

}  // namespace ddprun
