// StragglerWatch: node 0's judgement of which ranks are stragglers, from the step
// rates every node publishes in its status record (node_status.hpp). Kept apart from
// the heartbeat thread that feeds it, like HeartbeatMonitor: it does no I/O, so its
// rules are tested with made-up rates and times.
//
// The rules (docs/status.md): the median is taken over every rank whose rate is
// known; with fewer than two such ranks, or a median of 0 (nobody steps: a hang, the
// hang monitor's business), nothing is judged. A rank whose rate stays below
// `fraction` of the median for `window` is named once; a named rank whose rate is
// back at `fraction` of the median or above is named again as recovered.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "ddprun/records/node_status.hpp"

namespace ddprun {

struct StragglerLimits {
    double fraction = 0.5;                    // 0: off
    std::chrono::milliseconds window{60000};  // how long a rank stays below first
    bool enabled() const { return fraction > 0; }
};

class StragglerWatch {
  public:
    using Clock = std::chrono::steady_clock;

    explicit StragglerWatch(StragglerLimits limits = {}) : m_limits(limits) {}

    struct Rate {
        int rank = 0;
        int node_rank = 0;
        double rate = -1;  // < 0: not known
    };
    // One look at the round's ranks at `now` (`wall_ms` for the records). Returns
    // what it named this time (each also in news()).
    std::vector<Straggler> observe(const std::vector<Rate>& rates, Clock::time_point now,
                                   std::int64_t wall_ms);

    // The ranks named and not recovered, by rank; the round's last namings.
    std::vector<Straggler> current() const;
    const std::vector<Straggler>& news() const { return m_news; }

  private:
    StragglerLimits m_limits;
    std::map<int, Clock::time_point> m_below_since;  // by rank, while below
    std::map<int, Straggler> m_named;                // by rank
    std::vector<Straggler> m_news;
    int m_seq = 0;
};

// The median of the known rates (< 0: not known); -1 when fewer than two are known.
double median_rate(const std::vector<double>& rates);

// "rank 5 (node 1) is a straggler: 0.9 steps/s against a median of 10.0 over the
// last 60 s (--straggler-window)" / "rank 5 (node 1) recovered: 9.8 steps/s against
// a median of 10.0".
std::string describe_straggler(const Straggler& straggler, std::chrono::milliseconds window);

}  // namespace ddprun
