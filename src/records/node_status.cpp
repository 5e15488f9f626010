// NodeStatus's wire format (see node_status.hpp): one JSON object per node, its
// ranks and, on node 0's, the job's size, its stop and its stragglers.
#include "ddprun/records/node_status.hpp"

#include <cmath>

#include "ddprun/records/wire.hpp"
#include "record_json.hpp"

namespace ddprun {

using nlohmann::json;
using namespace wire;

namespace {

// More ranks than this on one node are not ours (a node has a few GPUs).
constexpr std::size_t k_max_status_ranks = 4096;
constexpr double k_max_rate = 1e9;

// Rates are steps per second: three decimals say all a person or a median needs.
double rounded(double rate) {
    return std::round(rate * 1000) / 1000;
}

template <class T, class ReadItem>
std::optional<std::string> read_list(const json& object, const char* field, std::vector<T>& out,
                                     ReadItem read_item) {
    auto it = object.find(field);
    if (it == object.end()) return std::nullopt;  // node 0's fields are on node 0's only
    if (!it->is_array() || it->size() > k_max_status_ranks)
        return fmt::format("field '{}' is not a list of at most {}", field, k_max_status_ranks);
    for (const json& item : *it) {
        if (!item.is_object()) return fmt::format("an item of '{}' is not an object", field);
        FieldReader read(item);
        T value;
        read_item(read, value);
        if (!read.ok()) return fmt::format("an item of '{}': {}", field, read.error());
        out.push_back(std::move(value));
    }
    return std::nullopt;
}

}  // namespace

std::string to_json(const NodeStatus& s, const std::string& run_id) {
    json ranks = json::array();
    for (const RankStatus& r : s.ranks)
        ranks.push_back({{"rank", r.rank},
                         {"beats", r.beats},
                         {"silent_ms", r.silent_ms},
                         {"rate", r.rate < 0 ? -1.0 : rounded(r.rate)}});
    json object = {{"run_id", run_id},
                   {"node_rank", s.node_rank},
                   {"round", s.round},
                   {"restarts", s.restarts},
                   {"state", s.state},
                   {"host", s.host},
                   {"addr", s.addr},
                   {"pid", s.pid},
                   {"first_rank", s.first_rank},
                   {"nproc", s.nproc},
                   {"workers_alive", s.workers_alive},
                   {"time_ms", s.time_ms},
                   {"ranks", std::move(ranks)}};
    if (s.nnodes > 0) {
        auto list = [](const std::vector<Straggler>& stragglers) {
            json out = json::array();
            for (const Straggler& g : stragglers)
                out.push_back({{"rank", g.rank},
                               {"node_rank", g.node_rank},
                               {"rate", rounded(g.rate)},
                               {"median", rounded(g.median)},
                               {"time_ms", g.time_ms},
                               {"recovered", g.recovered},
                               {"seq", g.seq}});
            return out;
        };
        object["nnodes"] = s.nnodes;
        object["world_size"] = s.world_size;
        object["max_restarts"] = s.max_restarts;
        object["exit_code"] = s.exit_code;
        object["stop"] = s.stop;
        object["stragglers"] = list(s.stragglers);
        object["straggler_news"] = list(s.straggler_news);
    }
    return object.dump();
}

std::expected<NodeStatus, std::string> parse_node_status(std::string_view text,
                                                         const std::string& run_id) {
    auto object = parse_object(text);
    if (!object) return std::unexpected(object.error());
    if (auto foreign = other_run(*object, "status", run_id)) return std::unexpected(*foreign);
    NodeStatus s;
    FieldReader read(*object);
    read.integer("node_rank", s.node_rank, 0, k_max_int);
    read.integer("round", s.round, 0, k_max_int);
    read.integer("restarts", s.restarts, 0, k_max_int);
    read.text("state", s.state, 64);
    read.text("host", s.host, 256);
    read.text("addr", s.addr, 256);
    read.integer("pid", s.pid, std::int64_t{0}, std::int64_t{INT64_MAX});
    read.integer("first_rank", s.first_rank, 0, k_max_int);
    read.integer("nproc", s.nproc, 0, k_max_int);
    read.integer("workers_alive", s.workers_alive, 0, k_max_int);
    read.integer("time_ms", s.time_ms, std::int64_t{0}, std::int64_t{INT64_MAX});
    if (read.ok() && read.has("nnodes")) {
        read.integer("nnodes", s.nnodes, 1, k_max_int);
        read.integer("world_size", s.world_size, 0, k_max_int);
        read.integer("max_restarts", s.max_restarts, 0, k_max_int);
        read.integer("exit_code", s.exit_code, -1, 255);
        read.text("stop", s.stop);
    }
    if (!read.ok()) return std::unexpected(read.error());
    for (std::string* field : {&s.state, &s.host, &s.addr, &s.stop}) to_one_line(*field);
    auto why = read_list(*object, "ranks", s.ranks, [](FieldReader& r, RankStatus& rank) {
        r.integer("rank", rank.rank, 0, k_max_int);
        r.integer("beats", rank.beats, std::int64_t{0}, std::int64_t{INT64_MAX});
        r.integer("silent_ms", rank.silent_ms, std::int64_t{-1}, std::int64_t{INT64_MAX});
        r.number("rate", rank.rate, -1, k_max_rate);
    });
    auto straggler = [](FieldReader& r, Straggler& g) {
        r.integer("rank", g.rank, 0, k_max_int);
        r.integer("node_rank", g.node_rank, 0, k_max_int);
        r.number("rate", g.rate, 0, k_max_rate);
        r.number("median", g.median, 0, k_max_rate);
        r.integer("time_ms", g.time_ms, std::int64_t{0}, std::int64_t{INT64_MAX});
        r.boolean("recovered", g.recovered);
        r.integer("seq", g.seq, 0, k_max_int);
    };
    if (!why && s.nnodes > 0) why = read_list(*object, "stragglers", s.stragglers, straggler);
    if (!why && s.nnodes > 0)
        why = read_list(*object, "straggler_news", s.straggler_news, straggler);
    if (why) return std::unexpected(*why);
    return s;
}

}  // namespace ddprun
