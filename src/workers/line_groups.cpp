#include "ddprun/workers/line_groups.hpp"

#include <array>
#include <bit>
#include <unordered_map>

namespace ddprun {

namespace {
constexpr std::size_t k_none = static_cast<std::size_t>(-1);
}

void LineGroups::hold(std::uint64_t bit, std::shared_ptr<const std::string> prefix,
                      std::string_view line, Clock::time_point now) {
    m_bytes += line.size() + 1;
    m_held.push_back({bit, std::move(prefix), std::string(line), now});
}

std::size_t LineGroups::take(Clock::time_point until, const GroupPrefix& group_prefix,
                             OutputBuffer& out) {
    if (m_held.empty()) return 0;
    m_groups.clear();
    // Made afresh each time: one kept for its buckets made a flood 1.6 times slower
    // (bench/run.sh --only logs; clearing it walks nodes long out of the cache).
    std::unordered_map<std::string_view, std::size_t> newest;  // a text's newest group
    m_group_of.resize(m_held.size());
    std::array<std::size_t, 65> next_group{};  // by bit: where its next line may join
    for (std::size_t i = 0; i < m_held.size(); ++i) {
        const Held& held = m_held[i];
        const auto stream = static_cast<std::size_t>(std::countr_zero(held.bit));  // 64: none
        std::size_t at = k_none;
        auto found = held.bit == 0 ? newest.end() : newest.find(held.line);
        if (found != newest.end())
            for (std::size_t g = found->second; g != k_none && g >= next_group[stream];
                 g = m_groups[g].same_text)
                if ((m_groups[g].members & held.bit) == 0) at = g;  // the earliest that fits
        if (at == k_none) {
            at = m_groups.size();
            m_groups.push_back({&held, 0, found == newest.end() ? k_none : found->second});
            // A key views the line of its text's first group: held until this take ends.
            if (found != newest.end())
                found->second = at;
            else if (held.bit != 0)
                newest.emplace(held.line, at);
        }
        m_group_of[i] = at;
        if (held.bit == 0) continue;
        m_groups[at].members |= held.bit;
        next_group[stream] = at + 1;
    }
    // Groups begin in arrival order, so those due are the first ones.
    std::size_t due = 0;
    while (due < m_groups.size() && m_groups[due].first->since <= until) ++due;
    for (std::size_t g = 0; g < due; ++g) {
        const Group& group = m_groups[g];
        const bool alone = (group.members & (group.members - 1)) == 0;
        out.append(alone ? *group.first->prefix : group_prefix(group.members));
        out.append(group.first->line);
        out.append("\n");
    }
    // A stream's lines are in later groups than its earlier lines: what stays is
    // the end of each stream's lines, still in order.
    std::size_t kept = 0;
    m_bytes = 0;
    for (std::size_t i = 0; i < m_held.size(); ++i) {
        if (m_group_of[i] < due) continue;
        m_bytes += m_held[i].line.size() + 1;
        if (kept != i) m_held[kept] = std::move(m_held[i]);
        ++kept;
    }
    m_held.erase(m_held.begin() + static_cast<std::ptrdiff_t>(kept), m_held.end());
    return due;
}

}  // namespace ddprun
