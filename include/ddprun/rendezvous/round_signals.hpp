// RoundSignals: the round's signals between agents. One agent publishes a signal
// it got (--broadcast-signals) or, at a second stop signal, the round's kill; every
// other agent's heartbeat thread hears it at its next tick (a heartbeat interval).
//
// Keys, under the round's (job_keys.hpp): "kill"; "signals", a counter of the
// signals published; "signal/<n>", the n-th: "<signal> <origin>", the origin being
// the sender's node rank (its agent id in an elastic job), so that it skips its own.
// With a job secret every record is signed (signed_store.hpp): one that is not is
// never acted on, and a count without its record, forged or not yet written, holds
// no later signal back for longer than `gap_bound`.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

class RoundSignals {
  public:
    using Clock = std::chrono::steady_clock;

    // The hearing side. `origin`: this agent's, as it publishes it. `gap_bound`: how long a counted
    // signal's missing record is waited for (heartbeat_timeout).
    RoundSignals(JobKeys keys, int origin, std::chrono::milliseconds gap_bound)
        : m_keys(std::move(keys)), m_origin(origin), m_gap_bound(gap_bound) {}

    // The sending side, from any thread with a Store of its own. Throw StoreError.
    static void publish_kill(Store& store, const JobKeys& keys, int round);
    static void publish_signal(Store& store, const JobKeys& keys, int round, int signal,
                               int origin);

    // The hearing side: what the others published in `round` since the last tick
    // (a new round starts from its beginning). `kill` and `signals` say what this
    // agent listens to: a tick costs no store call for what it does not. Throws
    // StoreError.
    struct Heard {
        bool kill = false;  // once per round
        std::vector<int> signals;
    };
    Heard tick(Store& store, int round, Clock::time_point now, bool kill, bool signals);

  private:
    bool heard_kill(Store& store, int round);
    std::vector<int> heard_signals(Store& store, int round, Clock::time_point now);

    JobKeys m_keys;
    const int m_origin;
    const std::chrono::milliseconds m_gap_bound;
    int m_round = -1;
    bool m_kill_heard = false;
    std::int64_t m_signals_seen = 0;
    std::optional<Clock::time_point> m_gap_since;  // since when the next one's record is missing
};

}  // namespace ddprun
