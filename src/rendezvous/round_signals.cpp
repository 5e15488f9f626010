#include "ddprun/rendezvous/round_signals.hpp"

#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/signed_store.hpp"

namespace ddprun {

void RoundSignals::publish_kill(Store& store, const JobKeys& keys, int round) {
    store.set(keys.round(round, "kill"), "1");
}

void RoundSignals::publish_signal(Store& store, const JobKeys& keys, int round, int signal,
                                  int origin) {
    const std::int64_t n = store.add(keys.round(round, "signals"), 1);
    store.set(keys.round(round, fmt::format("signal/{}", n)), fmt::format("{} {}", signal, origin));
}

RoundSignals::Heard RoundSignals::tick(Store& store, int round, Clock::time_point now, bool kill,
                                       bool signals) {
    if (round != m_round) {
        m_round = round;
        m_kill_heard = false;
        m_signals_seen = 0;
        m_gap_since.reset();
    }
    Heard heard;
    if (kill && !m_kill_heard) heard.kill = m_kill_heard = heard_kill(store, round);
    if (signals) heard.signals = heard_signals(store, round, now);
    return heard;
}

// Whether the round's "kill" exists and is a record of this job: one that is not
// signed with its secret is ignored (the store warns once), so that nobody without
// the secret stops a healthy job. A genuine kill overwrites it (a set, not a
// compare_set), and is heard at a later tick.
bool RoundSignals::heard_kill(Store& store, int round) {
    return read_record(store, m_keys.round(round, "kill")).has_value();
}

// The count only says that records may be there: each is read signed. A number
// without its record (the sender is between its add and its set, or someone without
// the secret added) is waited for until m_gap_bound, then skipped, so that a forged
// count holds no later signal back.
std::vector<int> RoundSignals::heard_signals(Store& store, int round, Clock::time_point now) {
    std::vector<int> heard;
    const std::int64_t count = store.add(m_keys.round(round, "signals"), 0);
    for (; m_signals_seen < count; ++m_signals_seen) {
        const std::string signal_key =
            m_keys.round(round, fmt::format("signal/{}", m_signals_seen + 1));
        auto text = read_record(store, signal_key);
        if (!text && text.error() == NoRecord::Missing) {
            if (!m_gap_since) m_gap_since = now;
            if (now - *m_gap_since < m_gap_bound) break;
            spdlog::warn("signal {} of round {} was counted but never written; skipping it",
                         m_signals_seen + 1, round);
            m_gap_since.reset();
            continue;
        }
        m_gap_since.reset();
        if (!text) continue;  // warned by the store: a forged signal is ignored
        int signal = 0;
        int origin = -1;
        if (std::sscanf(text->c_str(), "%d %d", &signal, &origin) != 2 || signal <= 0 ||
            signal >= 65)
            continue;                      // not ours to trust; never a reason to fail the job
        if (origin == m_origin) continue;  // forwarded here already
        heard.push_back(signal);
    }
    return heard;
}

}  // namespace ddprun
