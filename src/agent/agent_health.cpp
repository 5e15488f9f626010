// --health-check (health_check.hpp): before each join the node runs its check,
// with its plan in the check's environment. A node that fails it stays out of
// the round: an elastic job goes on without it (Cluster::stay_out), a
// fixed-size job's join fails on every node at once, naming it; either way
// this node ends with kUnhealthy and the check's last lines.
#include <sys/wait.h>

#include "agent_impl.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/plan/rank_plan.hpp"

namespace ddprun {

std::string Agent::Impl::describe_node() const {
    return node_rank >= 0 ? fmt::format("node {} ({})", node_rank, ctx.host)
                          : fmt::format("the node on {}", ctx.host);
}

std::optional<int> Agent::Impl::check_health() {
    const LaunchConfig& config = ctx.config;
    if (config.health_check.empty()) return std::nullopt;
    NodePlan plan = node_plan(ctx);
    plan.restart_count = restart_count();
    // The node's rank where it is known before the join: the previous round's in a
    // fixed-size job, or given (--node_rank, a scheduler); an elastic job's leader numbers
    // the nodes anew for each round. Its ranks where the other nodes' sizes are known.
    if (!config.elastic() && last_round) {
        plan.node_rank = last_round->node_rank;
        const int first = rank_offset(last_round->nproc_per_node, last_round->node_rank);
        plan.ranks = {first, first + ctx.nproc - 1};
    } else if (!config.elastic() && node_rank >= 0) {
        plan.node_rank = node_rank;
        if (config.nnodes == 1) plan.ranks = {0, ctx.nproc - 1};
    }
    Environment env = ctx.env;
    for (auto& [name, value] : health_check_env(plan)) env[name] = std::move(value);

    std::optional<HealthCheckResult> result;
    phase = Phase::Checking;
    health_check.start(env, [&result](HealthCheckResult ended) { result = std::move(ended); });
    run_until([&] { return result || stop_signal; });
    phase = Phase::Done;
    if (!result) {  // stopped meanwhile: the others were told (on_stop_signal)
        health_check.cancel();
        return exit_code::kSignalBase + stop_signal;
    }

    const bool exited =
        result->kind == HealthCheckResult::Kind::Healthy ||
        (result->kind == HealthCheckResult::Kind::Failed && WIFEXITED(result->status));
    const std::string outcome = describe_check_end(*result, config.health_check_timeout);
    events.write("health_check", [&] {
        return health_check_event(
            round, result->healthy(), outcome,
            exited ? std::optional<int>(WEXITSTATUS(result->status)) : std::nullopt, result->took,
            result->last_lines);
    });
    if (result->healthy()) {
        spdlog::debug("health check passed in {}", duration_text(result->took));
        return std::nullopt;
    }
    const std::string verdict = fmt::format("{} is unhealthy: its --health-check `{}` {}",
                                            describe_node(), config.health_check, outcome);
    // The others get one line: the verdict and the check's last line (an elastic job's, in
    // its line about the membership, which names the node and not the command).
    const std::string last =
        result->last_lines.empty() ? std::string() : ": " + result->last_lines.back();
    left = cluster->stay_out(round, verdict + last, "its --health-check " + outcome + last,
                             exit_code::kUnhealthy);
    std::string lines;
    for (const std::string& line : result->last_lines) lines += "\n    | " + line;
    spdlog::error("{}{}{}", verdict,
                  left                 ? "; it leaves the job, which goes on without it"
                  : config.nnodes == 1 ? ""
                  : last_round         ? "; the job cannot restart without it"
                                       : "; the job cannot start without it",
                  lines.empty() ? std::string() : "; its last lines:" + lines);
    return exit_code::kUnhealthy;
}

}  // namespace ddprun
