// The records agents exchange through the rendezvous store (records.hpp) and
// those only the protocol reads (wire.hpp): how each is written
// and read. Anything read from the store may have been written by another
// version, a stray client or by hand, so it is parsed as untrusted text
// (record_json.hpp); the messages about it are worded in record_messages.cpp,
// and the round's result (the membership) is in round_result.cpp.
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
using wire::k_max_record_bytes;
using wire::k_max_tail_line_bytes;
using wire::k_max_tail_lines;
using wire::node_from;
using wire::node_json;
using wire::parse_object;
using wire::read_fingerprint;
using wire::string_field;
using wire::truncated;

namespace wire {

// ---------------------------------------------------------------------------
// The records' fields

void add_fingerprint(json& object, const Fingerprint& fingerprint) {
    object["nnodes"] = fingerprint.nnodes;
    object["min_nnodes"] = fingerprint.min_nnodes;
    object["last_call_ms"] = fingerprint.last_call_ms;
    object["program"] = fingerprint.program;
    object["max_restarts"] = fingerprint.max_restarts;
    object["run_id"] = fingerprint.run_id;
    object["version"] = fingerprint.version;
    object["agent_store"] = fingerprint.agent_store;
}

void read_fingerprint(FieldReader& read, Fingerprint& fingerprint) {
    read.integer("nnodes", fingerprint.nnodes, 1, k_max_int);
    // Absent from a fixed-size job's records before elastic jobs existed.
    if (read.has("min_nnodes")) read.integer("min_nnodes", fingerprint.min_nnodes, 0, k_max_int);
    if (read.has("last_call_ms"))
        read.integer("last_call_ms", fingerprint.last_call_ms, std::int64_t{0},
                     std::int64_t{INT64_MAX});
    read.text("program", fingerprint.program, k_max_record_bytes);
    read.integer("max_restarts", fingerprint.max_restarts, 0, k_max_int);
    read.text("run_id", fingerprint.run_id);
    read.text("version", fingerprint.version);
    if (read.has("agent_store")) read.boolean("agent_store", fingerprint.agent_store);
}

}  // namespace wire

namespace wire {

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
    read.integer("node_rank", info.node_rank, -1, k_max_int);  // -1: to be assigned
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

}  // namespace wire

namespace {

constexpr std::pair<FailureKind, std::string_view> k_failure_kinds[] = {
    {FailureKind::Worker, "worker"},        {FailureKind::NodeLost, "node_lost"},
    {FailureKind::Signal, "signal"},        {FailureKind::Mismatch, "mismatch"},
    {FailureKind::StoreLost, "store_lost"}, {FailureKind::Hang, "hang"},
};

json failure_json(const FailureRecord& record) {
    std::size_t first = record.stderr_tail.size() > k_max_tail_lines
                            ? record.stderr_tail.size() - k_max_tail_lines
                            : 0;
    json tail = json::array();
    for (std::size_t i = first; i < record.stderr_tail.size(); ++i)
        tail.push_back(truncated(record.stderr_tail[i], k_max_tail_line_bytes));
    json report_lines = json::array();
    for (const auto& line : record.report_lines)
        report_lines.push_back(truncated(line, k_max_tail_line_bytes));
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
                {"stderr_tail", std::move(tail)},
                {"stopped", record.stopped_by_ddprun},
                {"oom", truncated(record.oom, k_max_message_bytes)},
                {"report_lines", report_lines},
                {"report_lines_total", record.report_lines_total}};
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
    read.boolean("stopped", record.stopped_by_ddprun);
    // An older agent writes none of these.
    if (read.has("oom")) read.text("oom", record.oom);
    if (read.has("report_lines")) read.lines("report_lines", record.report_lines);
    if (read.has("report_lines_total"))
        read.integer("report_lines_total", record.report_lines_total, std::int64_t{0},
                     std::int64_t{INT64_MAX});
    if (!read.ok()) return std::unexpected(read.error());
    auto it = std::find_if(std::begin(k_failure_kinds), std::end(k_failure_kinds),
                           [&](const auto& entry) { return entry.second == kind; });
    if (it == std::end(k_failure_kinds))
        return std::unexpected("field 'kind' is " + wire::quote_value(kind) +
                               ", not a known failure kind");
    record.kind = it->first;
    return record;
}

}  // namespace

// ---------------------------------------------------------------------------
// The records only the protocol reads

namespace wire {

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

std::string abort_json(const std::string& message, int exit_code, const std::string& run_id) {
    return json{{"kind", "abort"},
                {"run_id", run_id},
                {"message", truncated(message, k_max_message_bytes)},
                {"exit_code", exit_code}}
        .dump();
}

bool is_membership(std::string_view text) {
    auto object = parse_object(text);
    return object && string_field(*object, "kind") == "membership";
}

std::string failure_stop_json(const FailureRecord& record, const std::string& run_id) {
    return json{{"kind", "failure"}, {"run_id", run_id}, {"failure", failure_json(record)}}.dump();
}

std::string done_stop_json(const std::string& run_id) {
    return json{{"kind", "done"}, {"run_id", run_id}}.dump();
}

std::string reform_stop_json(const std::string& message, const std::string& run_id) {
    return json{{"kind", "reform"},
                {"run_id", run_id},
                {"message", truncated(message, k_max_message_bytes)}}
        .dump();
}

std::string outcomes_json(const std::vector<FailureRecord>& records, const std::string& run_id) {
    json list = json::array();
    for (std::size_t i = 0; i < records.size() && i < k_max_node_outcomes; ++i) {
        FailureRecord brief = records[i];
        brief.stderr_tail.clear();
        brief.message.clear();
        list.push_back(failure_json(brief));
    }
    return json{{"run_id", run_id}, {"workers", std::move(list)}}.dump();
}

// Why a record is not this run's, if it is not (see parse_stop in wire.hpp).
std::optional<std::string> other_run(const json& object, const std::string& key,
                                     const std::string& run_id) {
    std::string written_for = string_field(object, "run_id");
    if (written_for == run_id) return std::nullopt;
    return malformed(key, written_for.empty()
                              ? std::string("field 'run_id' is missing")
                              : fmt::format("it is run {}'s, not this run's ({})",
                                            quote_value(written_for), quote_value(run_id)));
}

namespace {

// A node's list record, {"run_id": ..., "<field>": [...]} of at most
// k_max_node_outcomes items, each read by `read_item` (an item or why not).
template <class T, class ReadItem>
std::expected<std::vector<T>, std::string> parse_node_list(std::string_view text,
                                                           const std::string& key,
                                                           const std::string& run_id,
                                                           const char* field, ReadItem read_item) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(malformed(key, object.error()));
    if (auto foreign = other_run(*object, key, run_id)) return std::unexpected(*foreign);
    auto it = object->find(field);
    if (it == object->end() || !it->is_array() || it->size() > k_max_node_outcomes)
        return std::unexpected(malformed(key, fmt::format("field '{}' is not a list of at most {}",
                                                          field, k_max_node_outcomes)));
    std::vector<T> items;
    for (const json& item : *it) {
        std::expected<T, std::string> read = read_item(item);
        if (!read) return std::unexpected(malformed(key, read.error()));
        items.push_back(std::move(*read));
    }
    return items;
}

}  // namespace

std::expected<std::vector<FailureRecord>, std::string> parse_outcomes(std::string_view text,
                                                                      const std::string& key,
                                                                      const std::string& run_id) {
    return parse_node_list<FailureRecord>(text, key, run_id, "workers",
                                          [](const json& item) { return failure_from(item); });
}

std::string progress_json(const std::vector<RankProgress>& ranks, const std::string& run_id) {
    json list = json::array();
    for (std::size_t i = 0; i < ranks.size() && i < k_max_node_outcomes; ++i) {
        const RankProgress& r = ranks[i];
        list.push_back({{"rank", r.rank},
                        {"node_rank", r.node_rank},
                        {"silent_ms", r.silent_ms},
                        {"running_ms", r.running_ms},
                        {"label", truncated(r.label, k_max_tail_line_bytes)},
                        {"hung", r.hung}});
    }
    return json{{"run_id", run_id}, {"ranks", std::move(list)}}.dump();
}

std::expected<std::vector<RankProgress>, std::string> parse_progress(std::string_view text,
                                                                     const std::string& key,
                                                                     const std::string& run_id) {
    return parse_node_list<RankProgress>(
        text, key, run_id, "ranks",
        [](const json& item) -> std::expected<RankProgress, std::string> {
            if (!item.is_object()) return std::unexpected("a rank is not an object");
            RankProgress r;
            FieldReader read(item);
            read.integer("rank", r.rank, 0, k_max_int);
            read.integer("node_rank", r.node_rank, 0, k_max_int);
            read.integer("silent_ms", r.silent_ms, std::int64_t{-1}, std::int64_t{INT64_MAX});
            read.integer("running_ms", r.running_ms, std::int64_t{0}, std::int64_t{INT64_MAX});
            read.text("label", r.label, k_max_tail_line_bytes);
            to_one_line(r.label);
            read.boolean("hung", r.hung);
            if (!read.ok()) return std::unexpected(read.error());
            return r;
        });
}

StopEvent parse_stop(std::string_view text, const std::string& key, const std::string& run_id) {
    StopEvent event;
    event.kind = StopEvent::Kind::Abort;
    event.exit_code = exit_code::kRendezvous;
    auto object = parse_object(text);
    if (!object) {
        event.message = malformed(key, object.error());
        return event;
    }
    if (auto foreign = other_run(*object, key, run_id)) {
        event.message = *foreign;
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
    } else if (kind == "reform") {
        FieldReader read(*object);
        read.line("message", event.message);
        if (read.ok()) {
            event.kind = StopEvent::Kind::Reform;
            event.exit_code = 0;
        } else {
            event.message = malformed(key, read.error());
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

}  // namespace wire

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

}  // namespace ddprun
