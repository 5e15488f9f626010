// The one-line messages the rendezvous says about records and nodes: values
// quoted and shortened, node lists as ranges, and what differs between nodes
// that must run the same job. Declared in wire.hpp.
#include <algorithm>
#include <functional>
#include <utility>

#include <fmt/format.h>

#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "record_json.hpp"

namespace ddprun::wire {

namespace {

// Values quoted in a one-line message.
constexpr std::size_t k_max_quoted_bytes = 80;
// Node lists in a one-line message, as ranges: "0-3, 7".
constexpr std::size_t k_max_listed_ranges = 16;

}  // namespace

std::string quote_value(std::string_view text) {
    std::string one_line(text);
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    return "'" + truncated(one_line, k_max_quoted_bytes) + "'";
}

std::string describe_nodes(std::vector<int> ranks) {
    return describe_numbers(std::move(ranks), "node", "nodes");
}

std::string describe_numbers(std::vector<int> ranks, std::string_view one, std::string_view many) {
    std::sort(ranks.begin(), ranks.end());
    std::string text = fmt::format("{} ", ranks.size() == 1 ? one : many);
    std::size_t listed = 0;
    for (std::size_t i = 0; i < ranks.size();) {
        std::size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
        if (listed == k_max_listed_ranges) {
            text += fmt::format(", ... ({} in all)", ranks.size());
            break;
        }
        if (listed > 0) text += ", ";
        text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
        ++listed;
        i = j + 1;
    }
    return text;
}

std::string describe_agent(const std::string& host, std::int64_t pid) {
    return fmt::format("{} (agent pid {})", host.empty() ? "?" : host, pid);
}

std::string malformed(const std::string& key, const std::string& why) {
    return fmt::format("rendezvous: malformed record under '{}': {}", key, why);
}

// ---------------------------------------------------------------------------
// Checking that the nodes agree

namespace {

// One field of the fingerprint, as text for messages.
struct FingerprintField {
    const char* name;
    std::function<std::string(const Fingerprint&)> value;
};

const std::vector<FingerprintField>& fingerprint_fields() {
    static const std::vector<FingerprintField> fields = {
        {"nnodes", [](const Fingerprint& f) { return nnodes_text(f.min(), f.nnodes); }},
        {"last_call_timeout",
         [](const Fingerprint& f) { return fmt::format("{} ms", f.last_call_ms); }},
        {"program and arguments", [](const Fingerprint& f) { return quote_value(f.program); }},
        {"max_restarts", [](const Fingerprint& f) { return std::to_string(f.max_restarts); }},
        {"run id", [](const Fingerprint& f) { return quote_value(f.run_id); }},
        {"ddprun version", [](const Fingerprint& f) { return quote_value(f.version); }},
        {"who hosts the workers' store (set TORCH_DISABLE_SHARE_RDZV_TCP_STORE alike)",
         [](const Fingerprint& f) {
             return std::string(f.agent_store ? "node 0's agent" : "rank 0");
         }},
    };
    return fields;
}

}  // namespace

std::string fingerprint_mismatch(const std::vector<NodeInfo>& nodes) {
    std::string message;
    for (const auto& field : fingerprint_fields()) {
        std::vector<std::pair<std::string, std::vector<int>>> groups;
        for (const auto& node : nodes) {
            std::string value = field.value(node.fingerprint);
            auto it = std::find_if(groups.begin(), groups.end(),
                                   [&](const auto& group) { return group.first == value; });
            if (it == groups.end())
                groups.push_back({value, {node.node_rank}});
            else
                it->second.push_back(node.node_rank);
        }
        if (groups.size() < 2) continue;
        message += message.empty() ? "" : "; ";
        message += fmt::format("{} differ:", field.name);
        for (std::size_t i = 0; i < groups.size(); ++i) {
            message += fmt::format("{} {} on {}", i == 0 ? "" : ",", groups[i].first,
                                   describe_nodes(groups[i].second));
        }
    }
    return message;
}

std::string fingerprint_conflict(const Fingerprint& job, const Fingerprint& theirs) {
    std::string message;
    for (const auto& field : fingerprint_fields()) {
        std::string expected = field.value(job), got = field.value(theirs);
        if (expected == got) continue;
        message += fmt::format("{}{} differ: {} on node 0, {} on this node",
                               message.empty() ? "" : "; ", field.name, expected, got);
    }
    return message;
}

std::string nnodes_mismatch(const std::string& node_zero_nnodes, const std::string& their_nnodes,
                            int their_rank) {
    return fmt::format(
        "rendezvous: the nodes must run the same job, but nnodes differ: {} on node 0, {} on {}",
        node_zero_nnodes, their_nnodes,
        their_rank < 0 ? std::string("this node") : fmt::format("node {}", their_rank));
}

}  // namespace ddprun::wire
