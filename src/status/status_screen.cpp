// `ddprun status`'s screen and JSON (see status.hpp): pure functions of one look.
#include <algorithm>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/rendezvous/straggler.hpp"
#include "ddprun/status/status.hpp"

namespace ddprun {
namespace {

using nlohmann::json;

// A rank silent this long, and for ten of the median's steps, is marked.
constexpr std::int64_t k_silent_ms = 10000;

std::string clock_text(std::int64_t ms) {
    std::time_t seconds = static_cast<std::time_t>(ms / 1000);
    std::tm utc{};
    ::gmtime_r(&seconds, &utc);
    char text[32];
    std::strftime(text, sizeof text, "%H:%M:%S", &utc);
    return text;
}

std::string ranks_text(int first, int count) {
    if (count <= 0) return "-";
    return count == 1 ? std::to_string(first) : fmt::format("{}-{}", first, first + count - 1);
}

// One rank, with its node, as both views show it.
struct RankRow {
    RankStatus rank;
    int node_rank = 0;
    std::vector<std::string> marks;  // "straggler", "slow", "silent"
};

// The job-wide picture of the ranks: the median, and each rank's marks.
struct RankTable {
    double median = -1;
    std::vector<RankRow> rows;
};

RankTable rank_table(const JobView& view, double fraction) {
    RankTable table;
    std::vector<double> rates;
    for (const auto& node : view.nodes) {
        if (!node || !view.zero || node->round != view.zero->round) continue;
        for (const RankStatus& rank : node->ranks) {
            table.rows.push_back({rank, node->node_rank, {}});
            rates.push_back(rank.rate);
        }
    }
    table.median = median_rate(rates);
    for (RankRow& row : table.rows) {
        const bool named = std::ranges::any_of(
            view.zero->stragglers, [&](const Straggler& g) { return g.rank == row.rank.rank; });
        if (named)
            row.marks.push_back("straggler");
        else if (table.median > 0 && row.rank.rate >= 0 && row.rank.rate < fraction * table.median)
            row.marks.push_back("slow");
        const std::int64_t step_ms =
            table.median > 0 ? static_cast<std::int64_t>(10000 / table.median) : 0;
        if (row.rank.silent_ms >= std::max(k_silent_ms, step_ms)) row.marks.push_back("silent");
    }
    std::ranges::sort(table.rows, {}, [](const RankRow& row) { return row.rank.rank; });
    return table;
}

// "running round 2", "stopping round 0: rank 3 failed (exit code 1)", ...
std::string state_text(const JobView& view) {
    if (!view.zero) {
        if (view.joining_nnodes == 0) return "forming its first round (elastic)";
        return fmt::format("joining round 0: {} of {} nodes", view.joined.size(),
                           view.joining_nnodes);
    }
    const NodeStatus& zero = *view.zero;
    if (zero.exit_code == 0 && zero.state != "running")
        return fmt::format("finished with code 0 ({}; the agents are leaving)", zero.stop);
    if (zero.exit_code > 0)
        return fmt::format("stopping round {}: {} (exit code {})", zero.round, zero.stop,
                           zero.exit_code);
    if (zero.state == "between_rounds") return fmt::format("between rounds (after {})", zero.round);
    return fmt::format("{} round {}", zero.state, zero.round);
}

std::string heartbeat_text(const JobView& view, const NodeStatus& node) {
    return duration_text(
               std::chrono::milliseconds(std::max<std::int64_t>(0, view.now_ms - node.time_ms))) +
           " ago";
}

}  // namespace

std::string render_status(const JobView& view, double fraction) {
    std::string out =
        fmt::format("job '{}' ({}), at {} UTC\n", view.run_id, view.where, clock_text(view.now_ms));
    out += fmt::format("state:      {}\n", state_text(view));
    if (!view.zero) {
        if (!view.joined.empty()) {
            out += fmt::format("\n{:<5} {:<24} {:>10}  {}\n", "node", "host", "agent pid", "nproc");
            for (const NodeInfo& node : view.joined)
                out += fmt::format("{:<5} {:<24} {:>10}  {}\n", node.node_rank, node.host, node.pid,
                                   node.nproc);
        }
        return out;
    }
    const NodeStatus& zero = *view.zero;
    out += fmt::format("restarts:   {} of {}\n", zero.restarts, zero.max_restarts);
    out += fmt::format("nodes:      {} (world size {})\n", zero.nnodes, zero.world_size);
    out += zero.stragglers.empty() ? "stragglers: none\n" : "stragglers:\n";
    for (const Straggler& g : zero.stragglers)
        out += fmt::format(
            "  rank {} (node {}): {:.1f} steps/s against a median of {:.1f}, "
            "since {} UTC\n",
            g.rank, g.node_rank, g.rate, g.median, clock_text(g.time_ms));
    out += fmt::format("\n{:<5} {:<24} {:>10}  {:<9} {:<8} {:<15} {}\n", "node", "host",
                       "agent pid", "ranks", "workers", "state", "heartbeat");
    for (std::size_t n = 0; n < view.nodes.size(); ++n) {
        const auto& node = view.nodes[n];
        if (!node) {
            out += fmt::format("{:<5} (no status record yet)\n", n);
            continue;
        }
        std::string state = node->state;
        if (node->round != zero.round) state = fmt::format("round {}?", node->round);
        out += fmt::format("{:<5} {:<24} {:>10}  {:<9} {:<8} {:<15} {}\n", n,
                           node->addr.empty() || node->addr == node->host
                               ? node->host
                               : fmt::format("{} ({})", node->host, node->addr),
                           node->pid, ranks_text(node->first_rank, node->nproc),
                           fmt::format("{}/{}", node->workers_alive, node->nproc), state,
                           heartbeat_text(view, *node));
    }
    const RankTable table = rank_table(view, fraction);
    if (table.rows.empty()) return out;
    out += fmt::format(
        "\n{:<6} {:<5} {:>8}  {:>10}  {:>8}{}\n", "rank", "node", "steps", "last step", "steps/s",
        table.median > 0 ? fmt::format("  (median {:.1f})", table.median) : std::string());
    for (const RankRow& row : table.rows) {
        std::string marks;
        for (const std::string& mark : row.marks) marks += (marks.empty() ? "" : ", ") + mark;
        std::string line = fmt::format(
            "{:<6} {:<5} {:>8}  {:>10}  {:>8}  {}", row.rank.rank, row.node_rank, row.rank.beats,
            row.rank.silent_ms < 0 ? "-"
                                   : duration_text(std::chrono::milliseconds(row.rank.silent_ms)),
            row.rank.rate < 0 ? "-" : fmt::format("{:.1f}", row.rank.rate), marks);
        out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
    }
    return out;
}

std::string status_json(const JobView& view, double fraction) {
    json out = {{"run_id", view.run_id}, {"store", view.where}, {"time_ms", view.now_ms}};
    if (!view.zero) {
        out["state"] = view.joining_nnodes == 0 ? "forming" : "joining";
        out["round"] = 0;
        out["nnodes"] = view.joining_nnodes;
        json joined = json::array();
        for (const NodeInfo& node : view.joined)
            joined.push_back({{"node_rank", node.node_rank},
                              {"host", node.host},
                              {"pid", node.pid},
                              {"nproc", node.nproc}});
        out["joined"] = std::move(joined);
        return out.dump();
    }
    const NodeStatus& zero = *view.zero;
    out["state"] = zero.state;
    out["summary"] = state_text(view);
    out["round"] = zero.round;
    out["restarts"] = zero.restarts;
    out["max_restarts"] = zero.max_restarts;
    out["nnodes"] = zero.nnodes;
    out["world_size"] = zero.world_size;
    out["exit_code"] = zero.exit_code < 0 ? json(nullptr) : json(zero.exit_code);
    out["stop"] = zero.stop;
    json stragglers = json::array();
    for (const Straggler& g : zero.stragglers)
        stragglers.push_back({{"rank", g.rank},
                              {"node_rank", g.node_rank},
                              {"steps_per_second", g.rate},
                              {"median", g.median},
                              {"since_ms", g.time_ms}});
    out["stragglers"] = std::move(stragglers);
    json nodes = json::array();
    for (std::size_t n = 0; n < view.nodes.size(); ++n) {
        const auto& node = view.nodes[n];
        if (!node) {
            nodes.push_back({{"node_rank", n}, {"status", nullptr}});
            continue;
        }
        nodes.push_back(
            {{"node_rank", n},
             {"host", node->host},
             {"addr", node->addr},
             {"pid", node->pid},
             {"round", node->round},
             {"restarts", node->restarts},
             {"state", node->state},
             {"first_rank", node->first_rank},
             {"nproc", node->nproc},
             {"workers_alive", node->workers_alive},
             {"heartbeat_age_ms", std::max<std::int64_t>(0, view.now_ms - node->time_ms)}});
    }
    out["nodes"] = std::move(nodes);
    const RankTable table = rank_table(view, fraction);
    out["median_steps_per_second"] = table.median > 0 ? json(table.median) : json(nullptr);
    json ranks = json::array();
    for (const RankRow& row : table.rows)
        ranks.push_back(
            {{"rank", row.rank.rank},
             {"node_rank", row.node_rank},
             {"steps", row.rank.beats},
             {"last_step_age_ms",
              row.rank.silent_ms < 0 ? json(nullptr) : json(row.rank.silent_ms)},
             {"steps_per_second", row.rank.rate < 0 ? json(nullptr) : json(row.rank.rate)},
             {"marks", row.marks}});
    out["ranks"] = std::move(ranks);
    return out.dump();
}

}  // namespace ddprun
