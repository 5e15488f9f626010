// The settings of supervision beyond torchrun's: hangs, stragglers, restarts that make no
// progress, the nodes' health checks, and what the console keeps of a big or
// failed job (see config_builder.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "config_builder.hpp"

namespace ddprun::cli {

void resolve_supervision(ConfigBuilder& b, LaunchConfig& config) {
    auto to_ms = [](double secs) {
        return std::chrono::milliseconds(std::max<long long>(1, std::llround(secs * 1000)));
    };
    double hang_seconds = 0;
    b.set("hang-timeout", hang_seconds,
          [](const Setting& s) { return parse_seconds(s, true, "600"); });
    if (hang_seconds > 0) config.hang_timeout = to_ms(hang_seconds);
    double first_seconds = 0;
    b.set("hang-timeout-first", first_seconds,
          [](const Setting& s) { return parse_seconds(s, false, "1800"); });
    if (first_seconds > 0) {
        config.hang_timeout_first = to_ms(first_seconds);
        if (config.hang_timeout.count() == 0)
            b.fail(b.find("hang-timeout-first")
                       ->error_hint("needs --hang-timeout (the bound between beats)",
                                    "add --hang-timeout=SECS"));
    }
    b.set("straggler-fraction", config.straggler_fraction, parse_fraction);
    double straggler_seconds = 60;
    b.set("straggler-window", straggler_seconds,
          [](const Setting& s) { return parse_seconds(s, false, "60"); });
    config.straggler_window = to_ms(straggler_seconds);
    for (std::string_view name : {"straggler-fraction", "straggler-window"})
        if (b.find(name) != nullptr && config.hang_timeout.count() == 0)
            b.fail(b.find(name)->error_hint(
                "needs --hang-timeout (the ranks' step rates come from their progress beats)",
                "add --hang-timeout=SECS"));
    b.set("collapse-lines", config.collapse_lines, parse_switch);
    double collapse_seconds = 0.15;
    b.set("collapse-window", collapse_seconds,
          [](const Setting& s) { return parse_seconds(s, false, "0.5"); });
    if (collapse_seconds > 10)
        b.fail(b.find("collapse-window")->error("at most 10 s: every line waits this long", "0.5"));
    config.collapse_window = to_ms(collapse_seconds);
    if (b.find("collapse-window") != nullptr && !config.collapse_lines)
        b.fail(b.find("collapse-window")
                   ->error_hint("needs --collapse-lines", "add --collapse-lines"));
    b.set("max-no-progress-restarts", config.max_no_progress_restarts,
          [](const Setting& s) { return parse_int(s, 0, INT_MAX, "3"); });
    b.set("progress-file", config.progress_file,
          [](const Setting& s) { return parse_nonempty(s, "/ckpt/latest"); });
    if (!config.progress_file.empty() && config.max_no_progress_restarts == 0)
        b.fail(b.find("progress-file")
                   ->error_hint("needs --max-no-progress-restarts (what a change is progress for)",
                                "add --max-no-progress-restarts=N"));
    b.set("health-check", config.health_check,
          [](const Setting& s) { return parse_nonempty(s, "'nhc -t 60'"); });
    double check_seconds = 60;
    b.set("health-check-timeout", check_seconds,
          [](const Setting& s) { return parse_seconds(s, false, "60"); });
    config.health_check_timeout = to_ms(check_seconds);
    if (b.find("health-check-timeout") != nullptr && config.health_check.empty())
        b.fail(b.find("health-check-timeout")
                   ->error_hint("needs --health-check (the command it bounds)",
                                "add --health-check=CMD"));
}

// --report-lines REGEX, each given one (a flag, a job file's line, or
// DDPRUN_REPORT_LINES: one pattern), checked as the workers' lines will be matched.
void resolve_report_lines(const std::vector<std::string>& given, ConfigBuilder& b,
                          LaunchConfig& config) {
    const Setting* setting = b.find("report-lines");
    if (setting == nullptr) return;
    std::vector<std::string> patterns = given;
    if (patterns.empty()) patterns = {setting->value};  // the environment's
    for (const std::string& pattern : patterns) {
        Setting one = *setting;
        one.value = pattern;
        if (pattern.empty()) {
            b.fail(one.error("is empty", "'NCCL WARN|CUDA error'"));
            return;
        }
        try {
            (void)std::regex(pattern, std::regex::ECMAScript);
        } catch (const std::regex_error& error) {
            b.fail(one.error_hint(fmt::format("not a regular expression ({})", error.what()),
                                  "write an ECMAScript regex, e.g. 'NCCL WARN|CUDA error'"));
            return;
        }
    }
    config.report_lines = std::move(patterns);
}

}  // namespace ddprun::cli
