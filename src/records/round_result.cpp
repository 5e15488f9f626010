// The round's result (wire.hpp, records.hpp): the membership node 0
// publishes once every node joined, written as runs of workers per node (or, in
// an elastic job, by column), and read back as untrusted text like every record.
#include "ddprun/records/records.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "record_json.hpp"

namespace ddprun {

using nlohmann::json;
using wire::add_fingerprint;
using wire::FieldReader;
using wire::k_max_int;
using wire::k_max_message_bytes;
using wire::parse_object;
using wire::read_fingerprint;
using wire::string_field;
using wire::truncated;

namespace wire {

std::string membership_json(int round, const std::vector<NodeInfo>& nodes,
                            const Fingerprint& fingerprint, int restarts,
                            const std::string& change) {
    json membership = {{"kind", "membership"},
                       {"round", round},
                       {"restarts", restarts},
                       {"change", truncated(change, k_max_message_bytes)},
                       {"master_addr", nodes.front().addr},
                       {"master_port", nodes.front().master_port}};
    add_fingerprint(membership, fingerprint);
    if (!fingerprint.elastic()) {
        // Every agent reads it: what it needs (its ranks' offset and the world size)
        // is the workers per node, as runs of equal counts, [[8, 1024]] for 1024
        // nodes of 8. A record that grows with the number of nodes would make a
        // join's bytes grow as its square (docs/scale.md).
        json runs = json::array();
        for (const auto& node : nodes) {
            if (!runs.empty() && runs.back()[0] == node.nproc)
                runs.back()[1] = runs.back()[1].get<int>() + 1;
            else
                runs.push_back({node.nproc, 1});
        }
        membership["nproc_runs"] = std::move(runs);
        return membership.dump();
    }
    // An elastic job's agents find their node rank by their id: by column, not a
    // record per node, to keep its size and the work to parse it small.
    json nproc = json::array(), hosts = json::array(), pids = json::array(),
         agent_ids = json::array();
    for (const auto& node : nodes) {
        nproc.push_back(node.nproc);
        hosts.push_back(node.host);
        pids.push_back(node.pid);
        agent_ids.push_back(node.agent_id);
    }
    membership["nproc"] = std::move(nproc);
    membership["host"] = std::move(hosts);
    membership["pid"] = std::move(pids);
    membership["agent_id"] = std::move(agent_ids);
    return membership.dump();
}

}  // namespace wire

namespace {

// A fixed-size membership's runs of workers per node ([[nproc, nodes], ...]): how
// many nodes they list, and, when that is `nnodes`, each node's workers.
struct NprocRuns {
    std::int64_t nodes = 0;
    std::vector<int> nproc;
};
std::expected<NprocRuns, std::string> nproc_from_runs(const json& runs, int nnodes) {
    NprocRuns read;
    for (const json& run : runs) {
        if (!run.is_array() || run.size() != 2 || !run[0].is_number_integer() ||
            !run[1].is_number_integer())
            return std::unexpected(
                "field 'nproc_runs' holds something other than pairs of "
                "integers");
        const auto workers = run[0].get<std::int64_t>();
        const auto count = run[1].get<std::int64_t>();
        if (workers < 1 || workers > k_max_int || count < 1 || count > k_max_int)
            return std::unexpected(
                fmt::format("field 'nproc_runs' holds {}, out of range", run.dump()));
        read.nodes += count;  // no overflow: at most 2^31 runs of 2^31 nodes
    }
    if (read.nodes != nnodes) return read;
    read.nproc.reserve(static_cast<std::size_t>(nnodes));
    for (const json& run : runs)
        read.nproc.insert(read.nproc.end(), run[1].get<std::size_t>(), run[0].get<int>());
    return read;
}

}  // namespace

std::expected<RoundMembership, Error> parse_round_result(std::string_view text,
                                                         const std::string& result_key,
                                                         const std::string& run_id, int round,
                                                         const NodeInfo& me) {
    using wire::malformed;
    auto object = parse_object(text);
    if (!object) return std::unexpected(rendezvous_error(malformed(result_key, object.error())));
    const json& result = *object;
    if (auto foreign = wire::other_run(result, result_key, run_id))
        return std::unexpected(rendezvous_error(*foreign));
    std::string kind = string_field(result, "kind");
    if (kind == "abort") {
        Error error;
        FieldReader read(result);
        read.line("message", error.message);
        read.integer("exit_code", error.exit_code, 0, 255);
        if (!read.ok())
            return std::unexpected(rendezvous_error(malformed(result_key, read.error())));
        return std::unexpected(error);
    }
    const Fingerprint& mine_fp = me.fingerprint;
    const bool elastic = mine_fp.elastic();
    const char* const listing = elastic ? "nproc" : "nproc_runs";
    if (kind != "membership" || !result.contains(listing) || !result[listing].is_array()) {
        return std::unexpected(
            rendezvous_error(malformed(result_key, "neither a membership nor an abort")));
    }
    Fingerprint fingerprint;
    RoundMembership membership;
    membership.round = round;
    membership.node_rank = me.node_rank;
    FieldReader read(result);
    read_fingerprint(read, fingerprint);
    read.text("master_addr", membership.master_addr);
    read.integer("master_port", membership.master_port, 0, 65535);
    membership.restart_count = fixed_size_restarts(round);
    if (read.has("restarts")) read.integer("restarts", membership.restart_count, 0, k_max_int);
    read.text("change", membership.change);
    wire::to_one_line(membership.change);
    if (!read.ok()) return std::unexpected(rendezvous_error(malformed(result_key, read.error())));
    if (!elastic) {
        auto runs = nproc_from_runs(result["nproc_runs"], mine_fp.nnodes);
        if (!runs) return std::unexpected(rendezvous_error(malformed(result_key, runs.error())));
        if (runs->nodes != mine_fp.nnodes) {
            return std::unexpected(rendezvous_error(wire::nnodes_mismatch(
                std::to_string(runs->nodes), std::to_string(mine_fp.nnodes), me.node_rank)));
        }
        membership.nproc_per_node = std::move(runs->nproc);
        return membership;
    }
    const std::size_t listed = result["nproc"].size();
    if (listed < static_cast<std::size_t>(mine_fp.min()) ||
        listed > static_cast<std::size_t>(mine_fp.nnodes)) {
        return std::unexpected(rendezvous_error(
            malformed(result_key, fmt::format("it lists {} nodes, outside --nnodes={}", listed,
                                              nnodes_text(mine_fp.min(), mine_fp.nnodes)))));
    }
    std::vector<std::string> hosts, agent_ids;
    std::vector<std::int64_t> pids;
    read.integers("nproc", membership.nproc_per_node, listed, 1, k_max_int);
    read.texts("host", hosts, listed);
    read.integers("pid", pids, listed, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.texts("agent_id", agent_ids, listed);
    if (!read.ok()) return std::unexpected(rendezvous_error(malformed(result_key, read.error())));
    // Ranks are the leader's to assign: this agent is wherever its id is listed.
    auto it = std::find(agent_ids.begin(), agent_ids.end(), me.agent_id);
    if (it == agent_ids.end()) {
        return std::unexpected(
            rendezvous_error(fmt::format("rendezvous: round {} went ahead without this agent ({})",
                                         round, wire::describe_agent(me.host, me.pid))));
    }
    membership.node_rank = static_cast<int>(it - agent_ids.begin());
    return membership;
}

}  // namespace ddprun
