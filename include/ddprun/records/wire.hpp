// The records only the protocol's conversations write and read, beyond the
// public records.hpp: a rank's claim, the "joined" count, the round's result and
// stop, the outcomes and progress nodes share, an elastic job's events, answers
// and state; and the wording of the messages they build. Their JSON is written
// and read in records/ alone, so that the whole wire format stays in one folder.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/records/records.hpp"

namespace ddprun::wire {

// Messages: one line each, with the values quoted and shortened.
std::string quote_value(std::string_view text);
// "node 2", "nodes 0-3, 7"
std::string describe_nodes(std::vector<int> ranks);
// The same for any numbered things: describe_numbers({0, 1, 2, 7}, "rank", "ranks")
// is "ranks 0-2, 7".
std::string describe_numbers(std::vector<int> ranks, std::string_view one, std::string_view many);
std::string describe_agent(const std::string& host, std::int64_t pid);
std::string malformed(const std::string& key, const std::string& why);
// Empty when every node agrees; else one line per differing field, joined:
// "program and arguments differ: './a' on nodes 0-2, './b' on node 3".
std::string fingerprint_mismatch(const std::vector<NodeInfo>& nodes);
// The same, between the job's fingerprint (node 0's) and a newcomer's.
std::string fingerprint_conflict(const Fingerprint& job, const Fingerprint& theirs);
// Said by whichever node notices first, with only two nodes' values at hand.
// The counts as --nnodes takes them ("4", "2:8").
std::string nnodes_mismatch(const std::string& node_zero_nnodes, const std::string& their_nnodes,
                            int their_rank);

// A node rank's claim: the first one written wins the rank.
std::string claim_json(const std::string& agent_id, const std::string& host, std::int64_t pid);
// Who holds a claim, for messages ("an unreadable claim" if it cannot tell).
std::string describe_claim(std::string_view text);

// The record under "joined/<count>": who made the count, and how many nodes
// it expects (-1 for node_rank: an abort ended the wait).
struct JoinedRecord {
    int node_rank = -1;
    int nnodes = 1;
};
std::string joined_json(int node_rank, int nnodes);
std::expected<JoinedRecord, std::string> parse_joined(std::string_view text);

// The round's result: the membership node 0 publishes (`nodes` by node rank),
// or an abort in its place; parse_round_result() (records.hpp) reads either.
// `restarts`: the failure restarts before this round (TORCHELASTIC_RESTART_COUNT);
// `change`: how an elastic job's membership changed, for every node's log.
std::string membership_json(int round, const std::vector<NodeInfo>& nodes,
                            const Fingerprint& fingerprint, int restarts,
                            const std::string& change = {});
// An abort is written as the round's result and as its stop alike.
std::string abort_json(const std::string& message, int exit_code, const std::string& run_id);
bool is_membership(std::string_view text);

// The round's stop: the first one written is how the round ends everywhere.
std::string failure_stop_json(const FailureRecord& record, const std::string& run_id);
std::string done_stop_json(const std::string& run_id);
// An elastic job's round ends because its membership changes.
std::string reform_stop_json(const std::string& message, const std::string& run_id);
// Never Timeout or StoreLost: text that is not a stop is an Abort naming `key`.
// A node's failed workers at the end of a round, for the one summary a shared
// console shows (srun, mpirun): at most k_max_node_outcomes, without their
// stderr or message (the root cause's come with the round's stop).
constexpr std::size_t k_max_node_outcomes = 512;
std::string outcomes_json(const std::vector<FailureRecord>& records, const std::string& run_id);
std::expected<std::vector<FailureRecord>, std::string> parse_outcomes(std::string_view text,
                                                                      const std::string& key,
                                                                      const std::string& run_id);

// A node's ranks' progress at a hang (hang_monitor.hpp), shared so that every
// node prints the job-wide picture: at most k_max_node_outcomes ranks.
std::string progress_json(const std::vector<RankProgress>& ranks, const std::string& run_id);
std::expected<std::vector<RankProgress>, std::string> parse_progress(std::string_view text,
                                                                     const std::string& key,
                                                                     const std::string& run_id);

// An elastic job's queue of events for its leader (elastic.hpp): an agent asks
// to join (and waits for answer number `answer`), or leaves; the leader's own
// agent closes the job, or (etcd) reports an agent whose lease expired (Lost).
// Malformed events are reported and skipped.
struct ElasticEvent {
    enum class Kind { Join, Leave, Close, Lost };
    Kind kind = Kind::Join;
    int agent = -1;
    int answer = 0;
    NodeInfo node;        // Join
    std::string message;  // Leave: why; Close: what waiting agents are told
    int exit_code = 0;    // Close
};
std::string join_event_json(int agent, int answer, const NodeInfo& node);
std::string leave_event_json(int agent, const std::string& why);
std::string lost_event_json(int agent, const std::string& why);
std::string close_event_json(int agent, int exit_code, const std::string& message);
std::expected<ElasticEvent, std::string> parse_event(std::string_view text);

// The leader's answer to one join: the round it is placed in, or that it
// waits as a spare, or that it has nothing to join (Finished, exit 0) or
// must leave (Refused: `message`, `exit_code`).
struct ElasticAnswer {
    enum class Kind { Round, Spare, Finished, Refused };
    Kind kind = Kind::Round;
    int round = 0;
    std::string message;
    int exit_code = 0;
};
std::string answer_json(const ElasticAnswer& answer);
std::expected<ElasticAnswer, std::string> parse_answer(std::string_view text);

// What a leader leaves for the next one (etcd, where any agent may lead): the
// last round it formed, its members (agent ids by node rank, with their
// records) and the failure restarts before it.
struct ElasticState {
    int round = -1;
    int restarts = 0;
    std::vector<std::pair<int, NodeInfo>> members;
};
std::string state_json(const ElasticState& state);
std::expected<ElasticState, std::string> parse_state(std::string_view text);

// The round's stop and result records name their run ("run_id"): one that
// names another run, or none, is malformed (the error says whose it is), so
// agents of two jobs that reach one store never act on each other's rounds.
StopEvent parse_stop(std::string_view text, const std::string& key, const std::string& run_id);

}  // namespace ddprun::wire
