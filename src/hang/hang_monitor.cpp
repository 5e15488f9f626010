// Which ranks are hung, and the job-wide picture in one line (hang_monitor.hpp).
#include "ddprun/hang/hang_monitor.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/records/wire.hpp"

namespace ddprun {

namespace {

using std::chrono::milliseconds;

std::int64_t ms_between(HangMonitor::Clock::time_point from, HangMonitor::Clock::time_point to) {
    return std::chrono::duration_cast<milliseconds>(to - from).count();
}

// A --hang-timeout value as the option takes it, in seconds: "30", "2.5".
std::string option_seconds(milliseconds timeout) {
    return fmt::format("{:g}", static_cast<double>(timeout.count()) / 1000.0);
}

std::string quoted_label(const std::string& label) {
    return label.empty() ? std::string("no label") : wire::quote_value(label);
}

}  // namespace

HangMonitor::HangMonitor(HangLimits limits, const std::vector<int>& ranks, Clock::time_point start,
                         int node_rank)
    : m_limits(limits), m_start(start), m_node_rank(node_rank) {
    for (int rank : ranks) {
        m_ranks.emplace_back();
        m_ranks.back().rank = rank;
    }
    std::sort(m_ranks.begin(), m_ranks.end(),
              [](const Rank& a, const Rank& b) { return a.rank < b.rank; });
}

void HangMonitor::beat(int rank, Clock::time_point at, const std::string& label,
                       std::uint64_t lines) {
    for (Rank& r : m_ranks) {
        if (r.rank != rank) continue;
        r.last = std::max(r.last.value_or(at), at);
        if (!label.empty()) r.label = label;
        r.beats += static_cast<std::int64_t>(lines);
        if (!r.first) r.first = at;
        r.recent.emplace_back(at, lines);
        while (r.recent.front().first < *r.last - m_rate_window) r.recent.pop_front();
    }
}

std::vector<HangMonitor::Rate> HangMonitor::rates(Clock::time_point now) const {
    std::vector<Rate> out;
    for (const Rank& r : m_ranks) {
        Rate rate{r.rank, r.beats, {}, std::nullopt};
        if (r.last) {
            rate.since_beat = now - *r.last;
            const auto span = std::min<Clock::duration>(now - *r.first, m_rate_window);
            if (span >= std::chrono::seconds(1)) {
                std::uint64_t counted = 0;
                for (const auto& [at, lines] : r.recent)
                    if (at >= now - span) counted += lines;
                // The first look also finds what was written before it: not in the span.
                if (span == now - *r.first && r.recent.front().first == *r.first)
                    counted -= r.recent.front().second;
                rate.beats_per_second =
                    static_cast<double>(counted) / std::chrono::duration<double>(span).count();
            }
        }
        out.push_back(rate);
    }
    std::ranges::sort(out, {}, &Rate::rank);
    return out;
}

void HangMonitor::exited(int rank) {
    for (Rank& r : m_ranks)
        if (r.rank == rank) r.exited = true;
}

bool HangMonitor::is_hung(const Rank& rank, Clock::time_point now) const {
    if (!m_limits.enabled() || rank.exited) return false;
    if (rank.last) return now - *rank.last > m_limits.timeout;
    return m_limits.first && now - m_start > *m_limits.first;
}

std::vector<int> HangMonitor::hung(Clock::time_point now) const {
    std::vector<int> ranks;
    for (const Rank& r : m_ranks)
        if (is_hung(r, now)) ranks.push_back(r.rank);
    return ranks;
}

std::vector<RankProgress> HangMonitor::progress(Clock::time_point now) const {
    std::vector<RankProgress> all;
    for (const Rank& r : m_ranks) {
        if (r.exited) continue;
        all.push_back(RankProgress{r.rank, m_node_rank, r.last ? ms_between(*r.last, now) : -1,
                                   ms_between(m_start, now), r.label, is_hung(r, now)});
    }
    return all;
}

std::optional<RankProgress> first_to_stop(const std::vector<RankProgress>& ranks) {
    auto silence = [](const RankProgress& r) {
        return r.silent_ms < 0 ? r.running_ms : r.silent_ms;
    };
    std::optional<RankProgress> first;
    for (const RankProgress& r : ranks)
        if (r.hung && (!first || silence(r) > silence(*first) ||
                       (silence(r) == silence(*first) && r.rank < first->rank)))
            first = r;
    return first;
}

std::string describe_first_stop(const RankProgress& rank, const HangLimits& limits) {
    const std::string who = rank.node_rank >= 0
                                ? fmt::format("rank {} (node {})", rank.rank, rank.node_rank)
                                : fmt::format("rank {}", rank.rank);
    if (rank.silent_ms < 0)
        return fmt::format("{} never beat within --hang-timeout-first={} (running {})", who,
                           limits.first ? option_seconds(*limits.first) : std::string("?"),
                           duration_text(milliseconds(rank.running_ms)));
    return fmt::format(
        "{} stopped making progress first: no beat for {} (--hang-timeout={}), "
        "last beat {}",
        who, duration_text(milliseconds(rank.silent_ms)), option_seconds(limits.timeout),
        quoted_label(rank.label));
}

std::string describe_progress(std::vector<RankProgress> ranks) {
    // Hung first, then the longest silent; ranks that never beat last.
    std::sort(ranks.begin(), ranks.end(), [](const RankProgress& a, const RankProgress& b) {
        return std::tuple(!a.hung, a.silent_ms < 0, -a.silent_ms, a.rank) <
               std::tuple(!b.hung, b.silent_ms < 0, -b.silent_ms, b.rank);
    });
    // Together: the same state and label, silences within half a second of the group's first.
    struct Group {
        bool hung;
        std::int64_t silent_ms;
        std::string label;
        std::vector<int> ranks;
    };
    std::vector<Group> groups;
    for (const RankProgress& r : ranks) {
        auto same = std::find_if(groups.begin(), groups.end(), [&r](const Group& g) {
            return g.hung == r.hung && g.label == r.label &&
                   (g.silent_ms < 0) == (r.silent_ms < 0) &&
                   std::abs(g.silent_ms - r.silent_ms) <= 500;
        });
        if (same == groups.end())
            groups.push_back(Group{r.hung, r.silent_ms, r.label, {r.rank}});
        else
            same->ranks.push_back(r.rank);
    }
    std::string line;
    for (const Group& g : groups) {
        if (!line.empty()) line += "; ";
        const std::string who = wire::describe_numbers(g.ranks, "rank", "ranks");
        if (g.silent_ms < 0)
            line += fmt::format("{} never beat{}", who, g.hung ? " (hung)" : "");
        else if (g.hung)
            line += fmt::format("no progress from {} for {} (last beat {})", who,
                                duration_text(milliseconds(g.silent_ms)), quoted_label(g.label));
        else
            line += fmt::format("{} last beat {} ago ({})", who,
                                duration_text(milliseconds(g.silent_ms)), quoted_label(g.label));
    }
    return line.empty() ? std::string("no rank beats") : line;
}

}  // namespace ddprun
