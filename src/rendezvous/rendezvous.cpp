// The rendezvous protocol (see rendezvous.hpp). Two ideas carry it:
//  - Agreement comes from first-writer-wins compare_set on single keys (a
//    rank's claim, the round's result, the round's stop), so every agent reads
//    the same outcome however the races go.
//  - Waiting costs one store operation: joiners count with add(), the last one
//    marks the round complete, node 0 reads the records once and publishes the
//    whole membership (or why the round failed) as one record that everyone
//    waits for and reads with one get.
// How a formed round stops and ends is in rendezvous_round.cpp; what each
// record holds, and how it is written and read, in records.cpp.
#include "ddprun/rendezvous/rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {

namespace {

using std::chrono::milliseconds;

// Thrown out of the waits of a join when its deadline passes, as opposed to a
// single store operation timing out.
struct JoinTimedOut {};

std::string make_agent_id() {
    std::random_device device;
    std::uint64_t random = (std::uint64_t{device()} << 32) | device();
    return fmt::format("{}-{:016x}", ::getpid(), random);
}

}  // namespace

// ---------------------------------------------------------------------------
// Rendezvous

Rendezvous::Rendezvous(Store& store, std::string run_id)
    : m_store(store),
      m_keys(std::move(run_id)),
      m_agent_id(make_agent_id()),
      m_report_progress([](const std::string& line) { spdlog::info("{}", line); }) {}

void Rendezvous::set_join_progress(milliseconds interval, ProgressReport report) {
    m_progress_interval = interval;
    m_report_progress = std::move(report);
}

std::vector<std::string> Rendezvous::wait_joining(const std::vector<std::string>& keys,
                                                  std::int64_t missing_at) {
    for (;;) {
        const auto until = std::min(m_join.deadline, m_join.next_report);
        auto slice = std::chrono::duration_cast<milliseconds>(until - Clock::now());
        try {
            return m_store.wait_get_after(keys, missing_at, std::max(slice, milliseconds(1)));
        } catch (const StoreError& error) {
            if (error.kind() != StoreError::Kind::Timeout) throw;
        }
        const auto now = Clock::now();
        if (now >= m_join.deadline) throw JoinTimedOut{};
        if (now < m_join.next_report) continue;
        m_join.next_report += m_progress_interval;
        report_waiting();
    }
}

// Node 0 knows who joined (one check per node, once per interval) and publishes it
// under "waiting" as "<count joined>\n<who is missing>"; the others read that.
void Rendezvous::report_waiting() {
    const NodeInfo& me = *m_join.me;
    const int nnodes = me.fingerprint.nnodes;
    const std::string waiting_key = key(m_join.round, "waiting");
    std::string waiting;
    if (me.node_rank == 0) {
        std::vector<int> missing;
        for (int rank = 1; rank < nnodes; ++rank)
            if (!m_store.check({key(m_join.round, fmt::format("info/{}", rank))}))
                missing.push_back(rank);
        if (missing.empty()) return;  // all joined: the round completes now
        waiting = fmt::format("{}\n{}", nnodes - static_cast<int>(missing.size()),
                              wire::describe_nodes(missing));
        m_store.set(waiting_key, waiting);
    } else {
        auto record = read_record(m_store, waiting_key);
        // Rejected (warned by the store): only a progress line is lost.
        if (!record && record.error() == NoRecord::Rejected) return;
        waiting = record.value_or("");
    }
    auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - m_join.start);
    auto bound = std::chrono::duration_cast<std::chrono::seconds>(m_join.deadline - m_join.start);
    auto newline = waiting.find('\n');
    const std::string progress =
        fmt::format("{} of {}", duration_text(elapsed), duration_text(bound));
    m_report_progress(newline == std::string::npos
                          ? fmt::format("waiting for node 0{} to join ({})",
                                        m_join.hosted ? ", the store's host," : "", progress)
                          : fmt::format("waiting for {} ({} of {} joined, {})",
                                        waiting.substr(newline + 1), waiting.substr(0, newline),
                                        nnodes, progress));
}

std::string Rendezvous::key(int round, std::string_view name) const {
    return m_keys.round(round, name);
}

std::expected<RoundMembership, Error> Rendezvous::join(int round, NodeInfo me, bool is_store_host,
                                                       milliseconds timeout, bool hosted) {
    const auto start = Clock::now();
    m_join = {round, &me, start, start + timeout, start + m_progress_interval, hosted};
    const int nnodes = me.fingerprint.nnodes;
    me.agent_id = m_agent_id;
    try {
        if (me.node_rank < 0) {
            if (is_store_host) {
                me.node_rank = 0;
            } else {
                // The store's host is node 0; without one the first to come is.
                // A forged add here can only make a rank out of range or leave one that
                // nobody claims: the join then fails (75), naming it.
                std::int64_t assigned = m_store.add(key(round, "assign"), 1) - (hosted ? 0 : 1);
                if (assigned >= nnodes) {
                    if (auto ended = ended_before(round)) return std::unexpected(*ended);
                    return std::unexpected(rendezvous_error(fmt::format(
                        "rendezvous: more agents than --nnodes={} joined round {} of run {}; "
                        "this one ({}) is one too many",
                        nnodes, round, wire::quote_value(m_keys.run_id()),
                        wire::describe_agent(me.host, me.pid))));
                }
                me.node_rank = static_cast<int>(assigned);
            }
        }
        if (me.node_rank >= nnodes) {
            return std::unexpected(rendezvous_error(
                fmt::format("rendezvous: --node_rank={} is out of range for --nnodes={}",
                            me.node_rank, nnodes)));
        }

        const std::string claim_key = key(round, fmt::format("claim/{}", me.node_rank));
        const std::string claim = wire::claim_json(m_agent_id, me.host, me.pid);
        // The claim, this node's record (and node 0's under "zero", which an abort sets
        // empty: the others must not wait for a node 0 that will never join) and its
        // add to "joined", in one request where the store can (etcd: docs/scale.md),
        // which also reads the result (there already when the round was aborted) and,
        // for the others, node 0's record.
        std::vector<std::pair<std::string, std::string>> records{
            {key(round, fmt::format("info/{}", me.node_rank)), to_json(me)}};
        if (me.node_rank == 0) records.emplace_back(key(round, "zero"), records.front().second);
        const std::string result_key = key(round, "result");
        std::vector<std::string> peeks{result_key};
        if (me.node_rank != 0) peeks.push_back(key(round, "zero"));
        const Store::Claim claimed =
            m_store.claim(claim_key, claim, records, key(round, "joined"), peeks);
        const std::string& holder = claimed.holder;
        if (holder != claim) {
            if (auto ended = ended_before(round)) return std::unexpected(*ended);
            std::string message = fmt::format(
                "rendezvous: node rank {} is claimed by two agents, {} and {}: give each node "
                "its own --node_rank (0 to {}) or omit it to assign ranks in join order",
                me.node_rank, wire::describe_claim(holder), wire::describe_agent(me.host, me.pid),
                nnodes - 1);
            std::string result = abort_join(round, message, exit_code::kRendezvous, nnodes);
            // If the round was already complete, only this agent is wrong;
            // else every agent reports the abort that won (this one, usually).
            if (wire::is_membership(result)) return std::unexpected(rendezvous_error(message));
            return read_result(round, me);
        }
        const std::optional<std::string>& result = claimed.peeked.front();
        if (result) return parse_round_result(*result, result_key, m_keys.run_id(), round, me);

        // Node 0 waits for "joined/<its nnodes>", written by the agent whose add completed
        // that count. An agent that expects another count than node 0 ends the round.
        const bool agrees = me.node_rank == 0 ||
                            check_node_zero(round, me, claimed.peeked.back(), claimed.revision);
        // "joined" carries no MAC: a forged add can only wake node 0 early (it then waits
        // for every node's signed record) or skip the count (the join times out, 75).
        if (agrees && claimed.count == nnodes)
            m_store.set(key(round, fmt::format("joined/{}", claimed.count)),
                        wire::joined_json(me.node_rank, nnodes));
        if (me.node_rank == 0) {
            if (auto error = collect(round, me)) {
                abort_join(round, error->message, error->exit_code, nnodes);
            }
        }
        // The result was missing at the claim: watched from there, where the store can.
        return parse_round_result(wait_joining({result_key}, claimed.revision).front(), result_key,
                                  m_keys.run_id(), round, me);
    } catch (const JoinTimedOut&) {
        try {
            return join_timed_out(round, me, timeout);
        } catch (const StoreError& error) {
            return std::unexpected(rendezvous_error(fmt::format(
                "rendezvous timed out after {} ({})", duration_text(timeout), error.what())));
        }
    } catch (const StoreError& error) {
        Error failed = rendezvous_error(fmt::format("rendezvous failed: {}", error.what()));
        // The store answered but refused (garbage under a key): the others would wait for
        // this agent until join_timeout, so end the round for everyone with this line.
        if (error.kind() == StoreError::Kind::Other) {
            try {
                abort_join(round, failed.message, failed.exit_code, nnodes);
                return read_result(round, me);
            } catch (const StoreError&) {
            }
        }
        return std::unexpected(failed);
    }
}

// A round that already stopped was joined by agents of an earlier job under the
// same run id (over etcd a run's keys outlive it) or this agent came too late:
// either way it is not this agent's to join, and nothing of it is touched.
std::optional<Error> Rendezvous::ended_before(int round) {
    if (!m_store.check({key(round, "stop")})) return std::nullopt;
    return rendezvous_error(fmt::format(
        "rendezvous: round {} of run {} already ran and ended (its records are still in the "
        "store, e.g. an earlier job's with the same --rdzv_id): give this job its own --rdzv_id",
        round, wire::quote_value(m_keys.run_id())));
}

// Node 0 checks the records once everyone has joined and publishes the
// membership. Returns why the round cannot start, if it cannot.
std::optional<Error> Rendezvous::collect(int round, const NodeInfo& me) {
    const int nnodes = me.fingerprint.nnodes;
    const std::string complete_key = key(round, fmt::format("joined/{}", nnodes));
    const std::string complete_record = wait_joining({complete_key}).front();
    if (m_store.check({key(round, "result")})) return std::nullopt;  // aborted meanwhile

    auto complete = wire::parse_joined(complete_record);
    if (!complete) return rendezvous_error(wire::malformed(complete_key, complete.error()));
    if (complete->nnodes != nnodes) {
        return rendezvous_error(wire::nnodes_mismatch(
            std::to_string(nnodes), std::to_string(complete->nnodes), complete->node_rank));
    }

    std::vector<std::string> info_keys;
    for (int rank = 0; rank < nnodes; ++rank)
        info_keys.push_back(key(round, fmt::format("info/{}", rank)));
    // In as few round trips as the store can: node 0's one read that grows with N.
    const std::vector<std::string> records = wait_joining(info_keys);

    std::vector<NodeInfo> nodes;
    nodes.reserve(static_cast<std::size_t>(nnodes));
    for (int rank = 0; rank < nnodes; ++rank) {
        const std::string& info_key = info_keys[static_cast<std::size_t>(rank)];
        auto info = parse_node_info(records[static_cast<std::size_t>(rank)]);
        if (!info) return rendezvous_error(wire::malformed(info_key, info.error()));
        if (info->node_rank != rank) {
            return rendezvous_error(wire::malformed(
                info_key, fmt::format("it is the record of node rank {}", info->node_rank)));
        }
        nodes.push_back(std::move(*info));
    }
    if (std::string mismatch = wire::fingerprint_mismatch(nodes); !mismatch.empty())
        return rendezvous_error("rendezvous: the nodes must run the same job, but " + mismatch);

    m_store.compare_set(
        key(round, "result"), "",
        wire::membership_json(round, nodes, me.fingerprint, fixed_size_restarts(round)));
    return std::nullopt;
}

// Node 0 waits for as many agents as it expects: if this agent expects a
// different number, one of the two would wait forever. Node 0 checks the rest.
// Returns whether node 0's record is there and agrees; if not, the round is over.
bool Rendezvous::check_node_zero(int round, const NodeInfo& me,
                                 const std::optional<std::string>& peeked,
                                 std::int64_t missing_at) {
    const std::string zero_key = key(round, "zero");
    std::string record = peeked ? *peeked : wait_joining({zero_key}, missing_at).front();
    if (record.empty()) return false;  // aborted, maybe before node 0 joined
    auto zero = parse_node_info(record);
    if (!zero) {
        abort_join(round, wire::malformed(zero_key, zero.error()), exit_code::kRendezvous,
                   me.fingerprint.nnodes);
        return false;
    }
    if (zero->fingerprint.nnodes != me.fingerprint.nnodes ||
        zero->fingerprint.min() != me.fingerprint.min()) {
        auto text = [](const Fingerprint& f) { return nnodes_text(f.min(), f.nnodes); };
        abort_join(
            round,
            wire::nnodes_mismatch(text(zero->fingerprint), text(me.fingerprint), me.node_rank),
            exit_code::kRendezvous, zero->fingerprint.nnodes);
        return false;
    }
    return true;
}

// Ends the join for every agent still in it; returns the round's result,
// which is this abort unless something was published first.
std::string Rendezvous::abort_join(int round, const std::string& message, int exit_code,
                                   int nnodes) {
    // Node 0 may be waiting for the others to join, the others for node 0, rather than
    // for the result: they are woken even when the result is a forged record.
    auto wake = [&] {
        m_store.set(key(round, fmt::format("joined/{}", nnodes)), wire::joined_json(-1, nnodes));
        m_store.set(key(round, "zero"), "");
    };
    std::string result;
    try {
        result = m_store.compare_set(key(round, "result"), "",
                                     wire::abort_json(message, exit_code, m_keys.run_id()));
    } catch (const RecordRejected&) {
        wake();
        throw;
    }
    wake();
    return result;
}

std::expected<RoundMembership, Error> Rendezvous::read_result(int round, const NodeInfo& me) {
    const std::string result_key = key(round, "result");
    return parse_round_result(m_store.get(result_key), result_key, m_keys.run_id(), round, me);
}

std::expected<RoundMembership, Error> Rendezvous::join_timed_out(int round, const NodeInfo& me,
                                                                 milliseconds timeout) {
    const int nnodes = me.fingerprint.nnodes;
    std::vector<int> missing;
    for (int rank = 0; rank < nnodes; ++rank)
        if (!m_store.check({key(round, fmt::format("info/{}", rank))})) missing.push_back(rank);
    std::string message =
        missing.empty()
            ? fmt::format(
                  "rendezvous timed out after {}: all {} nodes joined, but node 0 did not "
                  "publish the membership",
                  duration_text(timeout), nnodes)
            : fmt::format("rendezvous timed out after {}: {} never joined ({} of {} joined)",
                          duration_text(timeout), wire::describe_nodes(missing),
                          nnodes - static_cast<int>(missing.size()), nnodes);
    // Stop the agents that are still waiting, with the same line; or learn
    // that the round completed after all.
    abort_join(round, message, exit_code::kRendezvous, nnodes);
    return read_result(round, me);
}

}  // namespace ddprun
