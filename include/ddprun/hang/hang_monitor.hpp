// HangMonitor: which of this node's ranks stopped making progress, from the
// beats their workers write (progress.hpp). Pure: the agent feeds it beats and
// the time; it owns no timer and does no I/O, so every rule is unit-tested.
//
// The rules (docs/hangs.md):
//  - a rank is watched from its first beat: after it, a gap longer than
//    `timeout` between beats (or since the last one) makes it hung;
//  - a rank that never beats is not watched, unless `first` is set: then it
//    must beat within `first` of its start (start-up and compilation take
//    longer than a step, as ft_launcher's initial timeout);
//  - a worker that exited is not watched.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/records/records.hpp"

namespace ddprun {

struct HangLimits {
    std::chrono::milliseconds timeout{0};  // 0: hang detection off
    std::optional<std::chrono::milliseconds> first;
    bool enabled() const { return timeout.count() > 0; }
};

class HangMonitor {
  public:
    using Clock = std::chrono::steady_clock;

    HangMonitor() = default;
    HangMonitor(HangLimits limits, const std::vector<int>& ranks, Clock::time_point start,
                int node_rank = -1);

    // `rank` wrote something at `at`; `label` is its last line ("" keeps the last one),
    // `lines` how many lines (steps) that was.
    void beat(int rank, Clock::time_point at, const std::string& label, std::uint64_t lines = 1);
    // `rank`'s worker exited: it is no longer watched.
    void exited(int rank);

    // This node's ranks that are hung at `now`, in rank order (empty: none).
    std::vector<int> hung(Clock::time_point now) const;
    // Every rank of this node at `now`, in rank order.
    std::vector<RankProgress> progress(Clock::time_point now) const;

    // How fast each rank beats (--metrics-port, `ddprun status`, stragglers): its beats
    // (lines), the time since its last, and its beats per second over the last rate
    // window (or since its first beat, once that is a second ago; none before).
    static constexpr std::chrono::seconds k_rate_window{30};
    void set_rate_window(Clock::duration window) { m_rate_window = window; }
    struct Rate {
        int rank = -1;
        std::int64_t beats = 0;
        Clock::duration since_beat{};
        std::optional<double> beats_per_second;
    };
    std::vector<Rate> rates(Clock::time_point now) const;

  private:
    struct Rank {
        int rank = -1;
        std::optional<Clock::time_point> last;
        std::string label;
        bool exited = false;
        std::int64_t beats = 0;
        std::optional<Clock::time_point> first;
        // Beats within the rate window of the last one: when, and how many lines.
        std::deque<std::pair<Clock::time_point, std::uint64_t>> recent;
    };
    bool is_hung(const Rank& rank, Clock::time_point now) const;

    HangLimits m_limits;
    Clock::duration m_rate_window = k_rate_window;
    Clock::time_point m_start;
    int m_node_rank = -1;
    std::vector<Rank> m_ranks;
};

// The job-wide picture in one line, from every node's ranks: who stopped beating
// and when, their last labels, who is still beating, e.g.
//   "no progress from rank 3 for 30.1 s (last beat 'step 41'); ranks 0-2 last beat
//    29.9 s ago ('step 42'); rank 4 never beat"
// Ranks with the same label and about the same silence are shown together.
std::string describe_progress(std::vector<RankProgress> ranks);

// The hung rank that stopped first: the longest silent (one that never beat has
// been silent since its start). nullopt when none is hung.
std::optional<RankProgress> first_to_stop(const std::vector<RankProgress>& ranks);
// That rank as the hang's root cause, in one line: "rank 3 (node 1) stopped making
// progress first: no beat for 30.1 s (--hang-timeout=30), last beat 'step 41'".
std::string describe_first_stop(const RankProgress& rank, const HangLimits& limits);

}  // namespace ddprun
