// The records of an elastic job's event queue and of the leader's answers
// (wire.hpp, elastic.hpp): written and read here, as untrusted
// text like every record (record_json.hpp).
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddprun/records/wire.hpp"
#include "records/record_json.hpp"

namespace ddprun::wire {

using nlohmann::json;

namespace {

constexpr std::pair<ElasticEvent::Kind, std::string_view> k_event_kinds[] = {
    {ElasticEvent::Kind::Join, "join"},
    {ElasticEvent::Kind::Leave, "leave"},
    {ElasticEvent::Kind::Close, "close"},
    {ElasticEvent::Kind::Lost, "lost"},
};
constexpr std::pair<ElasticAnswer::Kind, std::string_view> k_answer_kinds[] = {
    {ElasticAnswer::Kind::Round, "round"},
    {ElasticAnswer::Kind::Spare, "spare"},
    {ElasticAnswer::Kind::Finished, "finished"},
    {ElasticAnswer::Kind::Refused, "refused"},
};

template <class Kind, std::size_t N>
std::string_view kind_name(const std::pair<Kind, std::string_view> (&kinds)[N], Kind kind) {
    for (const auto& [value, name] : kinds)
        if (value == kind) return name;
    return kinds[0].second;
}

template <class Kind, std::size_t N>
std::optional<Kind> kind_named(const std::pair<Kind, std::string_view> (&kinds)[N],
                               std::string_view name) {
    for (const auto& [value, text] : kinds)
        if (text == name) return value;
    return std::nullopt;
}

}  // namespace

std::string join_event_json(int agent, int answer, const NodeInfo& node) {
    return json{{"kind", "join"}, {"agent", agent}, {"answer", answer}, {"node", node_json(node)}}
        .dump();
}

std::string leave_event_json(int agent, const std::string& why) {
    return json{
        {"kind", "leave"}, {"agent", agent}, {"message", truncated(why, k_max_message_bytes)}}
        .dump();
}

std::string lost_event_json(int agent, const std::string& why) {
    return json{
        {"kind", "lost"}, {"agent", agent}, {"message", truncated(why, k_max_message_bytes)}}
        .dump();
}

std::string close_event_json(int agent, int exit_code, const std::string& message) {
    return json{{"kind", "close"},
                {"agent", agent},
                {"exit_code", exit_code},
                {"message", truncated(message, k_max_message_bytes)}}
        .dump();
}

std::expected<ElasticEvent, std::string> parse_event(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    ElasticEvent event;
    auto kind = kind_named(k_event_kinds, string_field(*object, "kind"));
    if (!kind)
        return std::unexpected("field 'kind' is " + quote_value(string_field(*object, "kind")));
    event.kind = *kind;
    FieldReader read(*object);
    read.integer("agent", event.agent, 0, k_max_int);
    if (event.kind == ElasticEvent::Kind::Join) {
        read.integer("answer", event.answer, 0, k_max_int);
        if (!object->contains("node"))
            return std::unexpected(std::string("field 'node' is missing"));
        auto node = node_from((*object)["node"]);
        if (!node) return std::unexpected(node.error());
        event.node = std::move(*node);
    } else {
        read.line("message", event.message);
        if (event.kind == ElasticEvent::Kind::Close)
            read.integer("exit_code", event.exit_code, 0, 255);
    }
    if (!read.ok()) return std::unexpected(read.error());
    return event;
}

std::string answer_json(const ElasticAnswer& answer) {
    return json{{"kind", kind_name(k_answer_kinds, answer.kind)},
                {"round", answer.round},
                {"message", truncated(answer.message, k_max_message_bytes)},
                {"exit_code", answer.exit_code}}
        .dump();
}

std::expected<ElasticAnswer, std::string> parse_answer(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    ElasticAnswer answer;
    auto kind = kind_named(k_answer_kinds, string_field(*object, "kind"));
    if (!kind)
        return std::unexpected("field 'kind' is " + quote_value(string_field(*object, "kind")));
    answer.kind = *kind;
    FieldReader read(*object);
    read.integer("round", answer.round, 0, k_max_int);
    read.text("message", answer.message);
    to_one_line(answer.message);
    read.integer("exit_code", answer.exit_code, 0, 255);
    if (!read.ok()) return std::unexpected(read.error());
    return answer;
}

std::string state_json(const ElasticState& state) {
    json members = json::array();
    for (const auto& [agent, node] : state.members)
        members.push_back({{"agent", agent}, {"node", node_json(node)}});
    return json{{"round", state.round}, {"restarts", state.restarts}, {"members", members}}.dump();
}

std::expected<ElasticState, std::string> parse_state(std::string_view text) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    ElasticState state;
    FieldReader read(*object);
    read.integer("round", state.round, 0, k_max_int);
    read.integer("restarts", state.restarts, 0, k_max_int);
    if (!read.ok()) return std::unexpected(read.error());
    if (!object->contains("members") || !(*object)["members"].is_array())
        return std::unexpected(std::string("field 'members' is not a list"));
    for (const json& member : (*object)["members"]) {
        if (!member.is_object() || !member.contains("node"))
            return std::unexpected(std::string("a member has no 'node'"));
        int agent = -1;
        FieldReader member_read(member);
        member_read.integer("agent", agent, 0, k_max_int);
        if (!member_read.ok()) return std::unexpected(member_read.error());
        auto node = node_from(member["node"]);
        if (!node) return std::unexpected(node.error());
        state.members.emplace_back(agent, std::move(*node));
    }
    return state;
}

}  // namespace ddprun::wire
