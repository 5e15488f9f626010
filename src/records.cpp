// The records agents exchange through the rendezvous store (records.hpp) and
// those only the protocol reads (records_internal.hpp): how each is written
// and read, and the one-line messages that say what is wrong with one.
// Anything read from the store may have been written by another version, a
// stray client or by hand, so it is parsed as untrusted text.
#include "ddprun/records.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/text.hpp"
#include "records_internal.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// A membership of thousands of nodes is a few MiB; past this it is not ours.
constexpr std::size_t k_max_record_bytes = 64 * 1024 * 1024;
// Our records are three levels deep; the limit keeps hostile text from
// costing stack in the recursive parser.
constexpr int k_max_json_depth = 16;
constexpr std::size_t k_max_tail_lines = 20;
constexpr std::size_t k_max_tail_line_bytes = 500;
constexpr std::size_t k_max_message_bytes = 4000;
// Values quoted in a one-line message.
constexpr std::size_t k_max_quoted_bytes = 80;
// Node lists in a one-line message, as ranges: "0-3, 7".
constexpr std::size_t k_max_listed_ranges = 16;

std::string truncated(std::string_view text, std::size_t limit) {
    if (text.size() <= limit) return std::string(text);
    return std::string(text.substr(0, limit)) + "...";
}

}  // namespace

// ---------------------------------------------------------------------------
// Messages

namespace detail {

std::string quote_value(std::string_view text) {
    std::string one_line(text);
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    return "'" + truncated(one_line, k_max_quoted_bytes) + "'";
}

std::string describe_nodes(std::vector<int> ranks) {
    std::sort(ranks.begin(), ranks.end());
    std::string text = ranks.size() == 1 ? "node " : "nodes ";
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

}  // namespace detail

namespace {

// ---------------------------------------------------------------------------
// Parsing untrusted JSON

std::expected<json, std::string> parse_object(std::string_view text) {
    if (text.empty()) return std::unexpected(std::string("empty record"));
    if (text.size() > k_max_record_bytes)
        return std::unexpected(fmt::format("record of {} bytes is too large", text.size()));
    if (!json_nesting_within(text, k_max_json_depth))
        return std::unexpected(std::string("nested too deeply"));
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded()) return std::unexpected("not JSON: " + detail::quote_value(text));
    if (!value.is_object())
        return std::unexpected("not a JSON object: " + detail::quote_value(text));
    return value;
}

// json::value() throws when the field has another type; this does not.
std::string string_field(const json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end() || !it->is_string()) return {};
    return it->get<std::string>();
}

// Reads fields of one object, remembering the first problem.
class FieldReader {
  public:
    explicit FieldReader(const json& object) : m_object(object) {}

    template <class Int>
    void integer(const char* name, Int& out, Int min, Int max) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_number_integer()) return fail(name, "is not an integer");
        std::int64_t value = 0;
        if (field->is_number_unsigned()) {
            auto u = field->get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) return fail(name, "is out of range");
            value = static_cast<std::int64_t>(u);
        } else {
            value = field->get<std::int64_t>();
        }
        if (value < static_cast<std::int64_t>(min) || value > static_cast<std::int64_t>(max))
            return fail(name, fmt::format("is {}, out of range", value));
        out = static_cast<Int>(value);
    }

    void text(const char* name, std::string& out, std::size_t limit = k_max_message_bytes) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_string()) return fail(name, "is not a string");
        out = truncated(field->get_ref<const std::string&>(), limit);
    }

    // A message ddprun prints as its one-line error: control characters (a
    // newline from a stray writer) become spaces, and it must say something.
    void line(const char* name, std::string& out) {
        text(name, out);
        if (!ok()) return;
        std::replace_if(
            out.begin(), out.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }, ' ');
        if (out.find_first_not_of(' ') == std::string::npos) fail(name, "is empty");
    }

    void lines(const char* name, std::vector<std::string>& out) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_array()) return fail(name, "is not a list");
        out.clear();
        std::size_t first = field->size() > k_max_tail_lines ? field->size() - k_max_tail_lines : 0;
        for (std::size_t i = first; i < field->size(); ++i) {
            const json& line = (*field)[i];
            if (!line.is_string()) return fail(name, "holds something other than strings");
            out.push_back(truncated(line.get_ref<const std::string&>(), k_max_tail_line_bytes));
        }
    }

    // A list of exactly `count` integers in [min, max].
    template <class Int>
    void integers(const char* name, std::vector<Int>& out, std::size_t count, Int min, Int max) {
        const json* field = list(name, count);
        if (field == nullptr) return;
        out.clear();
        out.reserve(count);
        for (const json& item : *field) {
            if (!item.is_number_integer()) return fail(name, "holds something other than integers");
            bool too_large = item.is_number_unsigned() &&
                             item.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX);
            auto value = too_large ? INT64_MAX : item.get<std::int64_t>();
            if (too_large || value < static_cast<std::int64_t>(min) ||
                value > static_cast<std::int64_t>(max))
                return fail(name, fmt::format("holds {}, out of range", item.dump()));
            out.push_back(static_cast<Int>(value));
        }
    }

    // A list of exactly `count` strings.
    void texts(const char* name, std::vector<std::string>& out, std::size_t count) {
        const json* field = list(name, count);
        if (field == nullptr) return;
        out.clear();
        out.reserve(count);
        for (const json& item : *field) {
            if (!item.is_string()) return fail(name, "holds something other than strings");
            out.push_back(truncated(item.get_ref<const std::string&>(), k_max_message_bytes));
        }
    }

    const json* find(const char* name) {
        if (!m_error.empty()) return nullptr;
        auto it = m_object.find(name);
        if (it == m_object.end()) {
            fail(name, "is missing");
            return nullptr;
        }
        return &*it;
    }

    bool ok() const { return m_error.empty(); }
    const std::string& error() const { return m_error; }

  private:
    const json* list(const char* name, std::size_t count) {
        const json* field = find(name);
        if (field == nullptr) return nullptr;
        if (!field->is_array()) {
            fail(name, "is not a list");
            return nullptr;
        }
        if (field->size() != count) {
            fail(name, fmt::format("lists {} nodes, not {}", field->size(), count));
            return nullptr;
        }
        return field;
    }

    void fail(const char* name, const std::string& why) {
        if (m_error.empty()) m_error = fmt::format("field '{}' {}", name, why);
    }

    const json& m_object;
    std::string m_error;
};

// ---------------------------------------------------------------------------
// The records' fields

constexpr int k_max_int = 1 << 30;

void add_fingerprint(json& object, const Fingerprint& fingerprint) {
    object["nnodes"] = fingerprint.nnodes;
    object["program"] = fingerprint.program;
    object["max_restarts"] = fingerprint.max_restarts;
    object["run_id"] = fingerprint.run_id;
    object["version"] = fingerprint.version;
}

void read_fingerprint(FieldReader& read, Fingerprint& fingerprint) {
    read.integer("nnodes", fingerprint.nnodes, 1, k_max_int);
    read.text("program", fingerprint.program, k_max_record_bytes);
    read.integer("max_restarts", fingerprint.max_restarts, 0, k_max_int);
    read.text("run_id", fingerprint.run_id);
    read.text("version", fingerprint.version);
}

json node_json(const NodeInfo& info) {
    json object = {{"node_rank", info.node_rank},
                   {"host", info.host},
                   {"addr", info.addr},
                   {"nproc", info.nproc},
                   {"master_port", info.master_port},
                   {"pid", info.pid},
                   {"agent_id", info.agent_id}};
    add_fingerprint(object, info.fingerprint);
    return object;
}

std::expected<NodeInfo, std::string> node_from(const json& object) {
    if (!object.is_object()) return std::unexpected(std::string("a node record is not an object"));
    NodeInfo info;
    FieldReader read(object);
    read.integer("node_rank", info.node_rank, 0, k_max_int);
    read.text("host", info.host);
    read.text("addr", info.addr);
    read.integer("nproc", info.nproc, 1, k_max_int);
    read.integer("master_port", info.master_port, 0, 65535);
    read.integer("pid", info.pid, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.text("agent_id", info.agent_id);
    read_fingerprint(read, info.fingerprint);
    if (!read.ok()) return std::unexpected(read.error());
    return info;
}

constexpr std::pair<FailureKind, std::string_view> k_failure_kinds[] = {
    {FailureKind::Worker, "worker"},        {FailureKind::NodeLost, "node_lost"},
    {FailureKind::Signal, "signal"},        {FailureKind::Mismatch, "mismatch"},
    {FailureKind::StoreLost, "store_lost"},
};

json failure_json(const FailureRecord& record) {
    std::size_t first = record.stderr_tail.size() > k_max_tail_lines
                            ? record.stderr_tail.size() - k_max_tail_lines
                            : 0;
    json tail = json::array();
    for (std::size_t i = first; i < record.stderr_tail.size(); ++i)
        tail.push_back(truncated(record.stderr_tail[i], k_max_tail_line_bytes));
    return json{{"kind", to_string(record.kind)},
                {"node_rank", record.node_rank},
                {"host", record.host},
                {"rank", record.rank},
                {"local_rank", record.local_rank},
                {"pid", record.pid},
                {"exit_code", record.exit_code},
                {"signal", record.signal},
                {"time_ms", record.time_ms},
                {"message", truncated(record.message, k_max_message_bytes)},
                {"stderr_tail", std::move(tail)}};
}

std::expected<FailureRecord, std::string> failure_from(const json& object) {
    if (!object.is_object()) return std::unexpected(std::string("the failure is not an object"));
    FailureRecord record;
    FieldReader read(object);
    std::string kind;
    read.text("kind", kind);
    read.integer("node_rank", record.node_rank, 0, k_max_int);
    read.text("host", record.host);
    read.integer("rank", record.rank, -1, k_max_int);
    read.integer("local_rank", record.local_rank, -1, k_max_int);
    read.integer("pid", record.pid, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.integer("exit_code", record.exit_code, 0, 255);
    read.integer("signal", record.signal, 0, 128);
    read.integer("time_ms", record.time_ms, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.text("message", record.message);
    read.lines("stderr_tail", record.stderr_tail);
    if (!read.ok()) return std::unexpected(read.error());
    auto it = std::find_if(std::begin(k_failure_kinds), std::end(k_failure_kinds),
                           [&](const auto& entry) { return entry.second == kind; });
    if (it == std::end(k_failure_kinds))
        return std::unexpected("field 'kind' is " + detail::quote_value(kind) +
                               ", not a known failure kind");
    record.kind = it->first;
    return record;
}

}  // namespace

// ---------------------------------------------------------------------------
// Checking that the nodes agree

namespace detail {

namespace {

// One field of the fingerprint, as text for messages.
struct FingerprintField {
    const char* name;
    std::function<std::string(const Fingerprint&)> value;
};

const std::vector<FingerprintField>& fingerprint_fields() {
    static const std::vector<FingerprintField> fields = {
        {"nnodes", [](const Fingerprint& f) { return std::to_string(f.nnodes); }},
        {"program and arguments", [](const Fingerprint& f) { return quote_value(f.program); }},
        {"max_restarts", [](const Fingerprint& f) { return std::to_string(f.max_restarts); }},
        {"run id", [](const Fingerprint& f) { return quote_value(f.run_id); }},
        {"ddprun version", [](const Fingerprint& f) { return quote_value(f.version); }},
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

std::string nnodes_mismatch(int node_zero_nnodes, int their_nnodes, int their_rank) {
    return fmt::format(
        "rendezvous: the nodes must run the same job, but nnodes differ: {} on node "
        "0, {} on node {}",
        node_zero_nnodes, their_nnodes, their_rank);
}

// ---------------------------------------------------------------------------
// The records only the protocol reads

std::string claim_json(const std::string& agent_id, const std::string& host, std::int64_t pid) {
    return json{{"agent_id", agent_id}, {"host", host}, {"pid", pid}}.dump();
}

std::string describe_claim(std::string_view text) {
    if (auto object = parse_object(text)) {
        NodeInfo rival;
        FieldReader read(*object);
        read.text("host", rival.host);
        read.integer("pid", rival.pid, std::int64_t{0}, std::int64_t{INT64_MAX});
        if (read.ok()) return describe_agent(rival.host, rival.pid);
    }
    return "an unreadable claim";
}

std::string joined_json(int node_rank, int nnodes) {
    return json{{"node_rank", node_rank}, {"nnodes", nnodes}}.dump();
}

std::expected<JoinedRecord, std::string> parse_joined(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    JoinedRecord joined;
    FieldReader read(*object);
    read.integer("nnodes", joined.nnodes, 1, k_max_int);
    read.integer("node_rank", joined.node_rank, -1, k_max_int);
    if (!read.ok()) return std::unexpected(read.error());
    return joined;
}

std::string membership_json(int round, const std::vector<NodeInfo>& nodes,
                            const Fingerprint& fingerprint) {
    // By column, not a record per node: every agent reads it, so its size and the
    // work to parse it, which grow with the number of nodes, are kept small.
    json nproc = json::array(), hosts = json::array(), pids = json::array(),
         agent_ids = json::array();
    for (const auto& node : nodes) {
        nproc.push_back(node.nproc);
        hosts.push_back(node.host);
        pids.push_back(node.pid);
        agent_ids.push_back(node.agent_id);
    }
    json membership = {{"kind", "membership"},
                       {"round", round},
                       {"master_addr", nodes.front().addr},
                       {"master_port", nodes.front().master_port},
                       {"nproc", std::move(nproc)},
                       {"host", std::move(hosts)},
                       {"pid", std::move(pids)},
                       {"agent_id", std::move(agent_ids)}};
    add_fingerprint(membership, fingerprint);
    return membership.dump();
}

std::string abort_json(const std::string& message, int exit_code) {
    return json{{"kind", "abort"},
                {"message", truncated(message, k_max_message_bytes)},
                {"exit_code", exit_code}}
        .dump();
}

bool is_membership(std::string_view text) {
    auto object = parse_object(text);
    return object && string_field(*object, "kind") == "membership";
}

std::string failure_stop_json(const FailureRecord& record) {
    return json{{"kind", "failure"}, {"failure", failure_json(record)}}.dump();
}

std::string done_stop_json() {
    return json{{"kind", "done"}}.dump();
}

StopEvent parse_stop(std::string_view text, const std::string& key) {
    StopEvent event;
    event.kind = StopEvent::Kind::Abort;
    event.exit_code = exit_code::kRendezvous;
    auto object = parse_object(text);
    if (!object) {
        event.message = malformed(key, object.error());
        return event;
    }
    std::string kind = string_field(*object, "kind");
    if (kind == "done") {
        event.kind = StopEvent::Kind::Done;
        event.exit_code = 0;
    } else if (kind == "failure") {
        auto failure = object->contains("failure")
                           ? failure_from((*object)["failure"])
                           : std::expected<FailureRecord, std::string>(
                                 std::unexpect, "field 'failure' is missing");
        if (!failure) {
            event.message = malformed(key, failure.error());
        } else {
            event.kind = StopEvent::Kind::Failure;
            event.failure = std::move(*failure);
            event.exit_code = event.failure.exit_code;
        }
    } else if (kind == "abort") {
        FieldReader read(*object);
        read.line("message", event.message);
        read.integer("exit_code", event.exit_code, 0, 255);
        if (!read.ok()) {
            event.message = malformed(key, read.error());
            event.exit_code = exit_code::kRendezvous;
        }
    } else {
        event.message = malformed(key, "field 'kind' is " + quote_value(kind));
    }
    return event;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// The public records

std::string_view to_string(FailureKind kind) {
    for (const auto& [value, name] : k_failure_kinds)
        if (value == kind) return name;
    return "worker";
}

StopEvent store_lost(std::string message) {
    StopEvent event;
    event.kind = StopEvent::Kind::StoreLost;
    event.message = std::move(message);
    event.exit_code = exit_code::kRendezvous;
    return event;
}

std::string to_json(const NodeInfo& info) {
    return node_json(info).dump();
}

std::expected<NodeInfo, std::string> parse_node_info(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    return node_from(*object);
}

std::string to_json(const FailureRecord& record) {
    return failure_json(record).dump();
}

std::expected<FailureRecord, std::string> parse_failure_record(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    return failure_from(*object);
}

std::expected<RoundMembership, Error> parse_round_result(std::string_view text,
                                                         const std::string& result_key, int round,
                                                         const NodeInfo& me) {
    using detail::malformed;
    auto object = parse_object(text);
    if (!object) return std::unexpected(rendezvous_error(malformed(result_key, object.error())));
    const json& result = *object;
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
    if (kind != "membership" || !result.contains("nproc") || !result["nproc"].is_array()) {
        return std::unexpected(
            rendezvous_error(malformed(result_key, "neither a membership nor an abort")));
    }
    const std::size_t listed = result["nproc"].size();
    if (listed != static_cast<std::size_t>(me.fingerprint.nnodes)) {
        return std::unexpected(rendezvous_error(detail::nnodes_mismatch(
            static_cast<int>(listed), me.fingerprint.nnodes, me.node_rank)));
    }
    Fingerprint fingerprint;
    RoundMembership membership;
    membership.round = round;
    membership.node_rank = me.node_rank;
    std::vector<std::int64_t> pids;
    std::vector<std::string> agent_ids;
    FieldReader read(result);
    read_fingerprint(read, fingerprint);
    read.text("master_addr", membership.master_addr);
    read.integer("master_port", membership.master_port, 0, 65535);
    read.integers("nproc", membership.nproc_per_node, listed, 1, k_max_int);
    read.texts("host", membership.hosts, listed);
    read.integers("pid", pids, listed, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.texts("agent_id", agent_ids, listed);
    if (!read.ok()) return std::unexpected(rendezvous_error(malformed(result_key, read.error())));
    const auto mine = static_cast<std::size_t>(me.node_rank);
    if (agent_ids[mine] != me.agent_id) {
        return std::unexpected(rendezvous_error(
            fmt::format("rendezvous: round {} went ahead with another agent as node {} ({})", round,
                        me.node_rank, detail::describe_agent(membership.hosts[mine], pids[mine]))));
    }
    return membership;
}

}  // namespace ddprun
