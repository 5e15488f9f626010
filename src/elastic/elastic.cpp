// Elastic jobs over a Store (see elastic.hpp): the agents' side. The leader's
// thread is in elastic_leader.cpp; what it decides is MembershipPlanner's.
#include "ddprun/elastic/elastic.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "ddprun/store/signed_store.hpp"
#include "elastic_shared.hpp"

namespace ddprun {

namespace {

using elastic_shared::answer_key;
using elastic_shared::k_slice;

// The job's end as its leader published it ("closed"), if it did: the answer every
// agent still waiting gets, or why the record cannot be read. Throws StoreError.
std::optional<std::expected<wire::ElasticAnswer, Error>> read_closed(Store& store,
                                                                     const std::string& run_id) {
    const std::string closed_key = JobKeys(run_id).elastic("closed");
    if (!store.check({closed_key})) return std::nullopt;
    auto end = wire::parse_answer(store.get(closed_key));
    if (!end) return std::unexpected(rendezvous_error(wire::malformed(closed_key, end.error())));
    return *end;
}

}  // namespace

std::string lease_expired(std::chrono::milliseconds ttl) {
    return fmt::format(
        "stopped answering (its etcd lease of {} expired: killed, frozen or cut "
        "off)",
        duration_text(ttl));
}

std::string queue_key(const std::string& run_id, int leader, std::string_view name) {
    return leader < 0 ? JobKeys(run_id).elastic(name)
                      : JobKeys(run_id).elastic(fmt::format("L{}/{}", leader, name));
}

// ---------------------------------------------------------------------------
// ElasticMember

ElasticMember::ElasticMember(Store& store, std::string run_id, int agent)
    : m_store(store), m_run_id(std::move(run_id)), m_agent(agent) {}

std::optional<Error> ElasticMember::ended(Store& store, const std::string& run_id) {
    auto closed = read_closed(store, run_id);
    if (!closed) return std::nullopt;
    if (!*closed) return closed->error();
    return rendezvous_error(fmt::format(
        "rendezvous: run {} already ended ({}); its records are still in the store, e.g. an "
        "earlier job's with the same --rdzv_id whose agent died (over etcd they go with their "
        "lease, 2 x heartbeat_timeout + exit_barrier_timeout after its last agent): give this "
        "job its own --rdzv_id",
        wire::quote_value(run_id), (*closed)->message));
}

// A forged add to "arrivals" only skips agent ids.
int ElasticMember::arrive(Store& store, const std::string& run_id) {
    return static_cast<int>(store.add(JobKeys(run_id).elastic("arrivals"), 1) - 1);
}

std::string ElasticMember::heartbeat_key(bool leader) const {
    return JobKeys(m_run_id).elastic(leader ? std::string("hb/host")
                                            : fmt::format("hb/{}", m_agent));
}

// A forged add to "events" numbers an event nobody writes: the leader skips the gap
// (skip_gap); a forged event record is skipped too (run).
void ElasticMember::post(const std::string& event) {
    const int leader = m_leader;
    std::int64_t number = m_store.add(queue_key(m_run_id, leader, "events"), 1);
    m_store.set(queue_key(m_run_id, leader, fmt::format("event/{}", number)), event);
}

void ElasticMember::report_lost(int agent, const std::string& why) {
    post(wire::lost_event_json(agent, why));
}

void ElasticMember::leave(const std::string& why) {
    // Also for a successor of the leader (etcd), which may not have read the event.
    m_store.set(JobKeys(m_run_id).elastic(fmt::format("left/{}", m_agent)), why);
    post(wire::leave_event_json(m_agent, why));
}

void ElasticMember::close(int exit_code, const std::string& message) {
    post(wire::close_event_json(m_agent, exit_code, message));
}

std::expected<RoundMembership, Error> ElasticMember::join(
    const NodeInfo& me, const std::function<void(std::string)>& on_spare,
    const std::function<bool()>& cancelled) {
    bool zero_checked = false;
    bool said_spare = false;
    try {
        int asked = m_leader;
        post(wire::join_event_json(m_agent, m_next_answer, me));
        for (;;) {
            const std::string key = answer_key(m_run_id, m_agent, m_next_answer);
            if (!wait_for(m_store, {key}, k_slice)) {
                if (cancelled()) return std::unexpected(rendezvous_error("the join was cancelled"));
                if (m_leader != asked) {
                    // The leader was lost: ask its successor, under a new answer number (a
                    // late answer of the lost one is never read).
                    asked = m_leader;
                    ++m_next_answer;
                    post(wire::join_event_json(m_agent, m_next_answer, me));
                    continue;
                }
                // The job ended before the leader read this agent's event.
                if (auto closed = read_closed(m_store, m_run_id)) {
                    if (!*closed) return std::unexpected(closed->error());
                    return std::unexpected(Error{(*closed)->message, (*closed)->exit_code});
                }
                // A fixed-size job's node 0 never answers: its record says so.
                const std::string zero_key = JobKeys(m_run_id).round(0, "zero");
                if (!zero_checked && m_store.check({zero_key})) {
                    zero_checked = true;
                    auto zero = parse_node_info(m_store.get(zero_key));
                    const Fingerprint& mine = me.fingerprint;
                    if (zero && (zero->fingerprint.nnodes != mine.nnodes ||
                                 zero->fingerprint.min() != mine.min())) {
                        return std::unexpected(rendezvous_error(wire::nnodes_mismatch(
                            nnodes_text(zero->fingerprint.min(), zero->fingerprint.nnodes),
                            nnodes_text(mine.min(), mine.nnodes), -1)));
                    }
                }
                continue;
            }
            auto answer = wire::parse_answer(m_store.get(key));
            ++m_next_answer;
            if (!answer)
                return std::unexpected(rendezvous_error(wire::malformed(key, answer.error())));
            switch (answer->kind) {
                case wire::ElasticAnswer::Kind::Round: {
                    const std::string result_key = JobKeys(m_run_id).round(answer->round, "result");
                    return parse_round_result(m_store.get(result_key), result_key, m_run_id,
                                              answer->round, me);
                }
                case wire::ElasticAnswer::Kind::Spare:
                    if (!said_spare && on_spare) {
                        on_spare(fmt::format(
                            "the job has its maximum of {} nodes (--nnodes={}); waiting as a spare "
                            "until a node leaves",
                            me.fingerprint.nnodes,
                            nnodes_text(me.fingerprint.min(), me.fingerprint.nnodes)));
                    }
                    said_spare = true;
                    continue;
                case wire::ElasticAnswer::Kind::Finished:
                case wire::ElasticAnswer::Kind::Refused:
                    m_store.set(key + "/read", "1");
                    return std::unexpected(Error{answer->message, answer->exit_code});
            }
        }
    } catch (const StoreError& error) {
        return std::unexpected(
            rendezvous_error(fmt::format("rendezvous failed: {}", error.what())));
    }
}

}  // namespace ddprun
