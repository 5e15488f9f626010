// The rendezvous protocol (see rendezvous.hpp). Two ideas carry it:
//  - Agreement comes from first-writer-wins compare_set on single keys (a
//    rank's claim, the round's result, the round's stop), so every agent reads
//    the same outcome however the races go.
//  - Waiting costs one store operation: joiners count with add(), the last one
//    marks the round complete, node 0 reads the records once and publishes the
//    whole membership (or why the round failed) as one record that everyone
//    waits for and reads with one get.
// Anything read from the store may have been written by another version, a
// stray client or by hand, so it is parsed as untrusted text.
#include "ddprun/rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ddprun {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

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

std::string quote_value(std::string_view text) {
    std::string one_line(text);
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    return "'" + truncated(one_line, k_max_quoted_bytes) + "'";
}

// "node 2", "nodes 0-3, 7"
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

std::string seconds_text(milliseconds timeout) {
    if (timeout.count() % 1000 == 0) return fmt::format("{}s", timeout.count() / 1000);
    return fmt::format("{}ms", timeout.count());
}

// Thrown out of the waits of a join when its deadline passes, as opposed to a
// single store operation timing out.
struct JoinTimedOut {};

void wait_until(Store& store, const std::vector<std::string>& keys, Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    try {
        store.wait(keys, std::max(left, milliseconds(1)));
    } catch (const StoreError& error) {
        if (error.kind() == StoreError::Kind::Timeout) throw JoinTimedOut{};
        throw;
    }
}

// ---------------------------------------------------------------------------
// Parsing untrusted JSON

bool nesting_within_limit(std::string_view text) {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > k_max_json_depth) return false;
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
    return true;
}

std::expected<json, std::string> parse_object(std::string_view text) {
    if (text.empty()) return std::unexpected(std::string("empty record"));
    if (text.size() > k_max_record_bytes)
        return std::unexpected(fmt::format("record of {} bytes is too large", text.size()));
    if (!nesting_within_limit(text)) return std::unexpected(std::string("nested too deeply"));
    json value = json::parse(text, nullptr, false);
    if (value.is_discarded()) return std::unexpected("not JSON: " + quote_value(text));
    if (!value.is_object()) return std::unexpected("not a JSON object: " + quote_value(text));
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
        return std::unexpected("field 'kind' is " + quote_value(kind) +
                               ", not a known failure kind");
    record.kind = it->first;
    return record;
}

std::string abort_json(const std::string& message, int exit_code) {
    return json{{"kind", "abort"},
                {"message", truncated(message, k_max_message_bytes)},
                {"exit_code", exit_code}}
        .dump();
}

std::string malformed(const std::string& key, const std::string& why) {
    return fmt::format("rendezvous: malformed record under '{}': {}", key, why);
}

// ---------------------------------------------------------------------------
// Checking that the nodes agree

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

// Empty when every node agrees; else one line per differing field, joined:
// "program and arguments differ: './a' on nodes 0-2, './b' on node 3".
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

// Said by whichever node notices first, with only two nodes' values at hand.
std::string nnodes_mismatch(int node_zero_nnodes, int their_nnodes, int their_rank) {
    return fmt::format(
        "rendezvous: the nodes must run the same job, but nnodes differ: {} on node "
        "0, {} on node {}",
        node_zero_nnodes, their_nnodes, their_rank);
}

std::string describe_agent(const std::string& host, std::int64_t pid) {
    return fmt::format("{} (agent pid {})", host.empty() ? "?" : host, pid);
}

std::string make_agent_id() {
    std::random_device device;
    std::uint64_t random = (std::uint64_t{device()} << 32) | device();
    return fmt::format("{}-{:016x}", ::getpid(), random);
}

}  // namespace

// ---------------------------------------------------------------------------
// Records

std::string_view to_string(FailureKind kind) {
    for (const auto& [value, name] : k_failure_kinds)
        if (value == kind) return name;
    return "worker";
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

// ---------------------------------------------------------------------------
// Rendezvous

Rendezvous::Rendezvous(Store& store, std::string run_id)
    : m_store(store), m_run_id(std::move(run_id)), m_agent_id(make_agent_id()) {}

std::string Rendezvous::key(int round, std::string_view name) const {
    return fmt::format("ddprun/{}/r{}/{}", m_run_id, round, name);
}

std::expected<RoundMembership, RendezvousError> Rendezvous::join(int round, NodeInfo me,
                                                                 bool is_store_host,
                                                                 milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    const int nnodes = me.fingerprint.nnodes;
    me.agent_id = m_agent_id;
    try {
        if (me.node_rank < 0) {
            if (is_store_host) {
                me.node_rank = 0;
            } else {
                std::int64_t assigned = m_store.add(key(round, "assign"), 1);
                if (assigned >= nnodes) {
                    return std::unexpected(RendezvousError{fmt::format(
                        "rendezvous: more agents than --nnodes={} joined round {} of run {}; "
                        "this one ({}) is one too many",
                        nnodes, round, quote_value(m_run_id), describe_agent(me.host, me.pid))});
                }
                me.node_rank = static_cast<int>(assigned);
            }
        }
        if (me.node_rank >= nnodes) {
            return std::unexpected(RendezvousError{
                fmt::format("rendezvous: --node_rank={} is out of range for --nnodes={}",
                            me.node_rank, nnodes)});
        }

        const std::string claim_key = key(round, fmt::format("claim/{}", me.node_rank));
        const std::string claim =
            json{{"agent_id", m_agent_id}, {"host", me.host}, {"pid", me.pid}}.dump();
        std::string holder = m_store.compare_set(claim_key, "", claim);
        if (holder != claim) {
            std::string other = "an unreadable claim";
            if (auto object = parse_object(holder)) {
                NodeInfo rival;
                FieldReader read(*object);
                read.text("host", rival.host);
                read.integer("pid", rival.pid, std::int64_t{0}, std::int64_t{INT64_MAX});
                if (read.ok()) other = describe_agent(rival.host, rival.pid);
            }
            std::string message = fmt::format(
                "rendezvous: node rank {} is claimed by two agents, {} and {}: give each node "
                "its own --node_rank (0 to {}) or omit it to assign ranks in join order",
                me.node_rank, other, describe_agent(me.host, me.pid), nnodes - 1);
            std::string result = abort_join(round, message, exit_code::kRendezvous, nnodes);
            // If the round was already complete, only this agent is wrong;
            // else every agent reports the abort that won (this one, usually).
            auto object = parse_object(result);
            if (object && string_field(*object, "kind") == "membership")
                return std::unexpected(RendezvousError{message});
            return read_result(round, me);
        }

        m_store.set(key(round, fmt::format("info/{}", me.node_rank)), to_json(me));
        // The others read node 0's record under "zero", which an abort sets empty: they
        // must not wait for a node 0 that will never join.
        if (me.node_rank == 0) m_store.set(key(round, "zero"), to_json(me));
        // Node 0 waits for "joined/<its nnodes>": it learns that enough agents
        // joined even when they disagree on how many are enough.
        std::int64_t joined = m_store.add(key(round, "joined"), 1);
        m_store.set(key(round, fmt::format("joined/{}", joined)),
                    json{{"node_rank", me.node_rank}, {"nnodes", nnodes}}.dump());
        if (me.node_rank == 0) {
            if (auto error = collect(round, me, deadline)) {
                abort_join(round, error->message, error->exit_code, nnodes);
            }
        } else {
            check_node_zero(round, me, deadline);
        }
        wait_until(m_store, {key(round, "result")}, deadline);
        return read_result(round, me);
    } catch (const JoinTimedOut&) {
        try {
            return join_timed_out(round, me, timeout);
        } catch (const StoreError& error) {
            return std::unexpected(RendezvousError{fmt::format(
                "rendezvous timed out after {} ({})", seconds_text(timeout), error.what())});
        }
    } catch (const StoreError& error) {
        RendezvousError failed{fmt::format("rendezvous failed: {}", error.what())};
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

// Node 0 checks the records once everyone has joined and publishes the
// membership. Returns why the round cannot start, if it cannot.
std::optional<RendezvousError> Rendezvous::collect(int round, const NodeInfo& me,
                                                   Clock::time_point deadline) {
    const int nnodes = me.fingerprint.nnodes;
    const std::string complete_key = key(round, fmt::format("joined/{}", nnodes));
    wait_until(m_store, {complete_key}, deadline);
    if (m_store.check({key(round, "result")})) return std::nullopt;  // aborted meanwhile

    auto complete = parse_object(m_store.get(complete_key));
    if (!complete) return RendezvousError{malformed(complete_key, complete.error())};
    int their_nnodes = nnodes;
    int their_rank = 0;
    FieldReader read(*complete);
    read.integer("nnodes", their_nnodes, 1, k_max_int);
    read.integer("node_rank", their_rank, -1, k_max_int);
    if (!read.ok()) return RendezvousError{malformed(complete_key, read.error())};
    if (their_nnodes != nnodes) {
        return RendezvousError{nnodes_mismatch(nnodes, their_nnodes, their_rank)};
    }

    std::vector<std::string> info_keys;
    for (int rank = 0; rank < nnodes; ++rank)
        info_keys.push_back(key(round, fmt::format("info/{}", rank)));
    wait_until(m_store, info_keys, deadline);

    std::vector<NodeInfo> nodes;
    nodes.reserve(static_cast<std::size_t>(nnodes));
    for (int rank = 0; rank < nnodes; ++rank) {
        const std::string& info_key = info_keys[static_cast<std::size_t>(rank)];
        auto info = parse_node_info(m_store.get(info_key));
        if (!info) return RendezvousError{malformed(info_key, info.error())};
        if (info->node_rank != rank) {
            return RendezvousError{malformed(
                info_key, fmt::format("it is the record of node rank {}", info->node_rank))};
        }
        nodes.push_back(std::move(*info));
    }
    if (std::string mismatch = fingerprint_mismatch(nodes); !mismatch.empty())
        return RendezvousError{"rendezvous: the nodes must run the same job, but " + mismatch};

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
    add_fingerprint(membership, me.fingerprint);
    m_store.compare_set(key(round, "result"), "", membership.dump());
    return std::nullopt;
}

// Node 0 waits for as many agents as it expects: if this agent expects a
// different number, one of the two would wait forever. Node 0 checks the rest.
void Rendezvous::check_node_zero(int round, const NodeInfo& me, Clock::time_point deadline) {
    const std::string zero_key = key(round, "zero");
    wait_until(m_store, {zero_key}, deadline);
    std::string record = m_store.get(zero_key);
    if (record.empty()) return;  // aborted, maybe before node 0 joined
    auto zero = parse_node_info(record);
    if (!zero) {
        abort_join(round, malformed(zero_key, zero.error()), exit_code::kRendezvous,
                   me.fingerprint.nnodes);
    } else if (zero->fingerprint.nnodes != me.fingerprint.nnodes) {
        abort_join(round,
                   nnodes_mismatch(zero->fingerprint.nnodes, me.fingerprint.nnodes, me.node_rank),
                   exit_code::kRendezvous, zero->fingerprint.nnodes);
    }
}

// Ends the join for every agent still in it; returns the round's result,
// which is this abort unless something was published first.
std::string Rendezvous::abort_join(int round, const std::string& message, int exit_code,
                                   int nnodes) {
    std::string result =
        m_store.compare_set(key(round, "result"), "", abort_json(message, exit_code));
    // Node 0 may be waiting for the others to join, the others for node 0, rather than
    // for the result.
    m_store.set(key(round, fmt::format("joined/{}", nnodes)),
                json{{"node_rank", -1}, {"nnodes", nnodes}}.dump());
    m_store.set(key(round, "zero"), "");
    return result;
}

std::expected<RoundMembership, RendezvousError> Rendezvous::read_result(int round,
                                                                        const NodeInfo& me) {
    const std::string result_key = key(round, "result");
    return parse_round_result(m_store.get(result_key), result_key, round, me);
}

std::expected<RoundMembership, RendezvousError> parse_round_result(std::string_view text,
                                                                   const std::string& result_key,
                                                                   int round, const NodeInfo& me) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(RendezvousError{malformed(result_key, object.error())});
    const json& result = *object;
    std::string kind = string_field(result, "kind");
    if (kind == "abort") {
        RendezvousError error;
        FieldReader read(result);
        read.text("message", error.message);
        read.integer("exit_code", error.exit_code, 0, 255);
        if (!read.ok())
            return std::unexpected(RendezvousError{malformed(result_key, read.error())});
        return std::unexpected(error);
    }
    if (kind != "membership" || !result.contains("nproc") || !result["nproc"].is_array()) {
        return std::unexpected(
            RendezvousError{malformed(result_key, "neither a membership nor an abort")});
    }
    const std::size_t listed = result["nproc"].size();
    if (listed != static_cast<std::size_t>(me.fingerprint.nnodes)) {
        return std::unexpected(RendezvousError{
            nnodes_mismatch(static_cast<int>(listed), me.fingerprint.nnodes, me.node_rank)});
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
    if (!read.ok()) return std::unexpected(RendezvousError{malformed(result_key, read.error())});
    const auto mine = static_cast<std::size_t>(me.node_rank);
    if (agent_ids[mine] != me.agent_id) {
        return std::unexpected(RendezvousError{
            fmt::format("rendezvous: round {} went ahead with another agent as node {} ({})", round,
                        me.node_rank, describe_agent(membership.hosts[mine], pids[mine]))});
    }
    return membership;
}

std::expected<RoundMembership, RendezvousError> Rendezvous::join_timed_out(int round,
                                                                           const NodeInfo& me,
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
                  seconds_text(timeout), nnodes)
            : fmt::format("rendezvous timed out after {}: {} never joined ({} of {} joined)",
                          seconds_text(timeout), describe_nodes(missing),
                          nnodes - static_cast<int>(missing.size()), nnodes);
    // Stop the agents that are still waiting, with the same line; or learn
    // that the round completed after all.
    abort_join(round, message, exit_code::kRendezvous, nnodes);
    return read_result(round, me);
}

void Rendezvous::abort(int round, int nnodes, const std::string& message, int exit_code) {
    abort_join(round, message, exit_code, nnodes);
    m_store.compare_set(key(round, "stop"), "", abort_json(message, exit_code));
}

StopEvent Rendezvous::publish_failure(int round, const FailureRecord& record) {
    std::string stop = json{{"kind", "failure"}, {"failure", failure_json(record)}}.dump();
    return read_stop(round, m_store.compare_set(key(round, "stop"), "", stop));
}

bool Rendezvous::publish_finished(int round, int nnodes) {
    if (m_store.add(key(round, "finished"), 1) != nnodes) return false;
    m_store.compare_set(key(round, "stop"), "", json{{"kind", "done"}}.dump());
    return true;
}

StopEvent Rendezvous::wait_stop(int round, milliseconds timeout) noexcept {
    const std::string stop_key = key(round, "stop");
    StopEvent event;
    try {
        m_store.wait({stop_key}, timeout);
        return read_stop(round, m_store.get(stop_key));
    } catch (const StoreError& error) {
        event.kind = error.kind() == StoreError::Kind::Timeout ? StopEvent::Kind::Timeout
                                                               : StopEvent::Kind::StoreLost;
        event.message = error.what();
    } catch (const std::exception& error) {
        event.kind = StopEvent::Kind::StoreLost;
        event.message = fmt::format("rendezvous: {}", error.what());
    }
    if (event.kind == StopEvent::Kind::StoreLost) event.exit_code = exit_code::kRendezvous;
    return event;
}

StopEvent Rendezvous::read_stop(int round, const std::string& text) const {
    const std::string stop_key = key(round, "stop");
    StopEvent event;
    event.kind = StopEvent::Kind::Abort;
    event.exit_code = exit_code::kRendezvous;
    auto object = parse_object(text);
    if (!object) {
        event.message = malformed(stop_key, object.error());
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
            event.message = malformed(stop_key, failure.error());
        } else {
            event.kind = StopEvent::Kind::Failure;
            event.failure = std::move(*failure);
            event.exit_code = event.failure.exit_code;
        }
    } else if (kind == "abort") {
        FieldReader read(*object);
        read.text("message", event.message);
        read.integer("exit_code", event.exit_code, 0, 255);
        if (!read.ok()) {
            event.message = malformed(stop_key, read.error());
            event.exit_code = exit_code::kRendezvous;
        }
    } else {
        event.message = malformed(stop_key, "field 'kind' is " + quote_value(kind));
    }
    return event;
}

void Rendezvous::acknowledge(int round, int node_rank, int nnodes) {
    m_store.set(key(round, fmt::format("ack/{}", node_rank)), "1");
    if (m_store.add(key(round, "acks"), 1) == nnodes) m_store.set(key(round, "acked"), "1");
}

std::vector<int> Rendezvous::wait_acknowledged(int round, int nnodes, milliseconds timeout) {
    try {
        m_store.wait({key(round, "acked")}, timeout);
        return {};
    } catch (const StoreError& error) {
        if (error.kind() != StoreError::Kind::Timeout) throw;
    }
    std::vector<int> missing;
    for (int rank = 0; rank < nnodes; ++rank)
        if (!m_store.check({key(round, fmt::format("ack/{}", rank))})) missing.push_back(rank);
    return missing;
}

void Rendezvous::beat(int round, int node_rank, std::int64_t seq) {
    m_store.set(key(round, fmt::format("hb/{}", node_rank)), std::to_string(seq));
}

namespace {
std::optional<std::int64_t> parse_seq(const std::string& text) {
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}
}  // namespace

std::optional<std::int64_t> Rendezvous::read_heartbeat(int round, int node_rank) {
    std::string hb_key = key(round, fmt::format("hb/{}", node_rank));
    if (!m_store.check({hb_key})) return std::nullopt;
    return parse_seq(m_store.get(hb_key));
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
            seqs.push_back(parse_seq(m_store.get(hb_key)));
        else
            seqs.push_back(std::nullopt);
    }
    return seqs;
}

// ---------------------------------------------------------------------------
// HeartbeatMonitor

HeartbeatMonitor::HeartbeatMonitor(const std::vector<int>& nodes, milliseconds timeout,
                                   Clock::time_point start)
    : m_timeout(timeout) {
    for (int node : nodes) m_nodes[node] = Seen{std::nullopt, start};
}

void HeartbeatMonitor::observe(int node, std::optional<std::int64_t> seq, Clock::time_point now) {
    auto [it, inserted] = m_nodes.try_emplace(node, Seen{seq, now});
    if (inserted) return;
    if (seq && seq != it->second.seq) it->second = Seen{seq, now};
}

std::vector<int> HeartbeatMonitor::stale(Clock::time_point now) const {
    std::vector<int> nodes;
    for (const auto& [node, seen] : m_nodes)
        if (now - seen.changed >= m_timeout) nodes.push_back(node);
    return nodes;
}

}  // namespace ddprun
