// The rendezvous protocol (see rendezvous.hpp) once a round has formed: how it
// stops (first-writer-wins on the round's stop key), what the nodes tell each
// other at its end, and their heartbeats. How a round forms is in rendezvous.cpp.
#include "ddprun/rendezvous/rendezvous.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/base/text.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {

namespace {

using std::chrono::milliseconds;

// Every node's list record among `keys` that is there (outcomes, progress): one that
// is missing is left out, one that is malformed too, with a warning.
template <class T, class Parse>
std::vector<T> read_node_lists(Store& store, const std::vector<std::string>& keys,
                               const std::string& run_id, Parse parse) {
    std::vector<T> all;
    for (const auto& node_key : keys) {
        // Missing, or rejected (warned by the store): a report goes on without it.
        auto record = read_record(store, node_key);
        if (!record) continue;
        auto items = parse(*record, node_key, run_id);
        if (!items) {
            spdlog::warn("{}", items.error());
            continue;
        }
        all.insert(all.end(), items->begin(), items->end());
    }
    return all;
}

}  // namespace

void Rendezvous::abort(int round, int nnodes, const std::string& message, int exit_code) {
    abort_join(round, message, exit_code, nnodes);
    m_store.compare_set(key(round, "stop"), "",
                        wire::abort_json(message, exit_code, m_keys.run_id()));
}

StopEvent Rendezvous::publish_failure(int round, const FailureRecord& record) {
    const std::string stop_key = key(round, "stop");
    return wire::parse_stop(
        m_store.compare_set(stop_key, "", wire::failure_stop_json(record, m_keys.run_id())),
        stop_key, m_keys.run_id());
}

bool Rendezvous::publish_finished(int round, int nnodes, int node_rank) {
    if (!m_authenticated) {
        if (m_store.add(key(round, "finished"), 1) != nnodes) return false;
    } else {
        // The count carries no MAC: it only says when to look. Every node's record is
        // written before its add, so the add that makes the count genuinely complete
        // finds them all; one that finds some missing was helped by a forged add, and
        // a later node's add (the count then past nnodes) looks again.
        if (node_rank >= 0) m_store.set(key(round, fmt::format("finished/{}", node_rank)), "1");
        if (m_store.add(key(round, "finished"), 1) < nnodes) return false;
        std::vector<std::string> keys;
        for (int rank = 0; rank < nnodes; ++rank)
            keys.push_back(key(round, fmt::format("finished/{}", rank)));
        if (!m_store.check(keys)) {
            spdlog::warn(
                "the count under '{}' reached {} before every node said it finished: "
                "someone without this job's secret added to it; waiting for the "
                "nodes themselves",
                key(round, "finished"), nnodes);
            return false;
        }
        try {
            m_store.wait_get(keys, std::chrono::seconds(5));
        } catch (const RecordRejected&) {
            return false;  // warned by the store: not every node's own word
        }
    }
    m_store.compare_set(key(round, "stop"), "", wire::done_stop_json(m_keys.run_id()));
    return true;
}

StopEvent Rendezvous::wait_stop(int round, milliseconds timeout) noexcept {
    const std::string stop_key = key(round, "stop");
    try {
        m_store.wait({stop_key}, timeout);
        return wire::parse_stop(m_store.get(stop_key), stop_key, m_keys.run_id());
    } catch (const StoreError& error) {
        if (error.kind() != StoreError::Kind::Timeout) return store_lost(error.what());
        StopEvent event;
        event.kind = StopEvent::Kind::Timeout;
        event.message = error.what();
        return event;
    } catch (const std::exception& error) {
        return store_lost(fmt::format("rendezvous: {}", error.what()));
    }
}

void Rendezvous::publish_outcomes(int round, int node_rank,
                                  const std::vector<FailureRecord>& workers) {
    m_store.set(key(round, fmt::format("outcomes/{}", node_rank)),
                wire::outcomes_json(workers, m_keys.run_id()));
}

std::vector<FailureRecord> Rendezvous::read_outcomes(int round, int nnodes, int except) {
    std::vector<std::string> keys;
    for (int rank = 0; rank < nnodes; ++rank)
        if (rank != except) keys.push_back(key(round, fmt::format("outcomes/{}", rank)));
    return read_node_lists<FailureRecord>(m_store, keys, m_keys.run_id(), wire::parse_outcomes);
}

void Rendezvous::publish_progress(int round, int node_rank,
                                  const std::vector<RankProgress>& ranks) {
    m_store.set(key(round, fmt::format("progress/{}", node_rank)),
                wire::progress_json(ranks, m_keys.run_id()));
}

std::vector<RankProgress> Rendezvous::read_progress(int round, int nnodes, int except,
                                                    milliseconds bound) {
    std::vector<std::string> keys;
    for (int rank = 0; rank < nnodes; ++rank)
        if (rank != except) keys.push_back(key(round, fmt::format("progress/{}", rank)));
    wait_for(m_store, keys, bound);  // usually all there at once: every node shares at the stop
    return read_node_lists<RankProgress>(m_store, keys, m_keys.run_id(), wire::parse_progress);
}

void Rendezvous::publish_made_progress(int round, int node_rank, bool made) {
    m_store.set(key(round, fmt::format("made_progress/{}", node_rank)), made ? "1" : "0");
}

Rendezvous::ProgressVotes Rendezvous::read_made_progress(int round, int nnodes, int except,
                                                         milliseconds bound) {
    std::vector<std::string> keys;
    for (int rank = 0; rank < nnodes; ++rank)
        if (rank != except) keys.push_back(key(round, fmt::format("made_progress/{}", rank)));
    wait_for(m_store, keys, bound);  // usually there at once: each node says so at the stop
    ProgressVotes votes;
    for (const auto& vote_key : keys) {
        const std::string value = read_record(m_store, vote_key).value_or("");
        if (value == "1")
            ++votes.made;
        else if (value != "0") {
            if (!value.empty()) spdlog::warn("{}: not a progress vote, taken as none", vote_key);
            ++votes.missing;
        }
    }
    return votes;
}

void Rendezvous::acknowledge(int round, int node_rank, int nnodes) {
    m_store.set(key(round, fmt::format("ack/{}", node_rank)), "1");
    // A forged add can only make the store's host leave early, after every node saw the
    // stop; a node that still needs the store then loses it (75), never succeeds by it.
    if (m_store.add(key(round, "acks"), 1) == nnodes) m_store.set(key(round, "acked"), "1");
}

std::vector<int> Rendezvous::wait_acknowledged(int round, int nnodes, milliseconds timeout) {
    if (wait_for(m_store, {key(round, "acked")}, timeout)) return {};
    std::vector<int> missing;
    for (int rank = 0; rank < nnodes; ++rank)
        if (!m_store.check({key(round, fmt::format("ack/{}", rank))})) missing.push_back(rank);
    return missing;
}

void Rendezvous::beat(int round, int node_rank, std::int64_t seq) {
    m_store.set(key(round, fmt::format("hb/{}", node_rank)), std::to_string(seq));
}

std::optional<std::int64_t> Rendezvous::read_heartbeat(int round, int node_rank) {
    std::string hb_key = key(round, fmt::format("hb/{}", node_rank));
    if (!m_store.check({hb_key})) return std::nullopt;
    return read_beat(hb_key);
}

std::vector<std::optional<std::int64_t>> Rendezvous::read_heartbeats(int round, int nnodes) {
    std::vector<std::string> keys;
    for (int rank = 0; rank < nnodes; ++rank)
        keys.push_back(key(round, fmt::format("hb/{}", rank)));
    std::vector<std::optional<std::int64_t>> seqs;
    // Usually every node is beating: one check instead of one per node.
    bool all = m_store.check(keys);
    for (const auto& hb_key : keys) {
        if (all || m_store.check({hb_key}))
            seqs.push_back(read_beat(hb_key));
        else
            seqs.push_back(std::nullopt);
    }
    return seqs;
}

// A beat that is not signed with the job's secret is no beat (warned by the store):
// the node's next beat overwrites it; a stray that keeps writing makes the node look
// lost, which ends the job (75), never a false success.
std::optional<std::int64_t> Rendezvous::read_beat(const std::string& hb_key) {
    try {
        return to_integer(m_store.get(hb_key));
    } catch (const RecordRejected&) {
        return std::nullopt;
    }
}

}  // namespace ddprun
