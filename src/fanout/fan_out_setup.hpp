// The plan of `ddprun --hosts`, made before any host is contacted: which
// hosts, with how many workers and which environment each, under which run id
// and store (fan_out.hpp holds the plan's type and the pure rules; this reads
// the files they need). Used by fan_out_run.cpp only.
#pragma once

#include <expected>
#include <string>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/fanout/fan_out.hpp"

namespace ddprun {

// The launcher's failures before anything starts: one line, exit 2.
struct PlanError {
    int code = exit_code::kUsage;
    std::string message;
};

// The whole job's plan from the command line and this machine's files.
std::expected<FanOutPlan, PlanError> make_plan(const LaunchConfig& config, const Environment& env);

// What --dry-run prints: every host's command line.
std::string dry_run_text(const FanOutPlan& plan);

}  // namespace ddprun
