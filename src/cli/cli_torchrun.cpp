// torchrun 2.x's options that name what ddprun does its own way (see
// config_builder.hpp): each is read in torchrun's syntax and becomes the
// ddprun setting that does the same, so that a launch line from a torchrun 2.14
// recipe starts unchanged.
//
// Why this file exists: these options come from torchrun's Python design (a
// template of Python's string.Template, a handler registry, a plugin entry
// point); mapping them in one place keeps cli.cpp about ddprun's own options
// and says, option by option, where ddprun differs and why.

#include <fmt/format.h>

#include <string>
#include <vector>

#include "cli_docs.hpp"
#include "config_builder.hpp"
#include "ddprun/base/prefix_template.hpp"
#include "ddprun/base/python_template.hpp"
#include "ddprun/base/text.hpp"

namespace ddprun::cli {
namespace {

// torchrun's macros (torch/distributed/elastic/agent/server/local_elastic_agent.py) as
// --log-prefix placeholders; {host} is --local_addr when given, else the host name.
std::optional<std::string> prefix_placeholder(std::string_view name) {
    if (name == "rank") return "{rank}";
    if (name == "local_rank") return "{local_rank}";
    if (name == "role_name") return "{role}";
    if (name == "hostname") return "{host}";
    return std::nullopt;
}

std::string doubled_braces(std::string_view text) {
    std::string out;
    for (char c : text) out.append(c == '{' || c == '}' ? 2 : 1, c);
    return out;
}

// torchrun's comma_separated_list: items split at commas, ",," is a comma in an item.
std::vector<std::string> comma_separated_list(const std::string& value) {
    std::vector<std::string> items(1);
    for (std::size_t i = 0; i < value.size(); ++i) {
        if (value[i] != ',') {
            items.back() += value[i];
        } else if (i + 1 < value.size() && value[i + 1] == ',') {
            items.back() += ',';
            ++i;
        } else {
            items.emplace_back();
        }
    }
    return items;
}

Parsed<std::vector<std::string>> parse_filters(const Setting& s) {
    std::vector<std::string> filters = comma_separated_list(s.value);
    // An empty item would match every line: torchrun's `needle in line` does, but
    // "a," is far more likely a slip than a wish to copy everything.
    for (const std::string& filter : filters)
        if (filter.empty())
            return std::unexpected(
                s.error_hint("an empty filter would copy every line",
                             "drop the stray comma; write ,, for a comma inside a filter"));
    return filters;
}

}  // namespace

void resolve_torchrun_options(ConfigBuilder& b, LaunchConfig& config) {
    // torchrun: `args.log_line_prefix_template or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`, so
    // an empty one is no template at all.
    if (const Setting* tmpl = b.find("log_line_prefix_template"); tmpl && !tmpl->value.empty()) {
        if (const Setting* own = b.find("log-prefix"))
            return b.fail(tmpl->error_hint(fmt::format("conflicts with {}", own->shown()),
                                           "give the prefix one way"));
        // Unknown names stay as written, as Template.safe_substitute leaves them, and
        // braces are doubled: the result is always a valid --log-prefix.
        config.log_prefix =
            substitute_python_template(tmpl->value, prefix_placeholder, doubled_braces);
    }
    b.set("duplicate_stdout_filters", config.duplicate_stdout_filters, parse_filters);
    b.set("duplicate_stderr_filters", config.duplicate_stderr_filters, parse_filters);

    // torch 2.14 registers three handlers (torch/distributed/elastic/events/handlers.py):
    // two discard the events, "console" writes each to stderr.
    if (const Setting* handler = b.find("event_log_handler")) {
        std::string name = lower(handler->value);
        if (name == "console") {
            if (const Setting* own = b.find("event-log"))
                return b.fail(handler->error_hint(fmt::format("conflicts with {}", own->shown()),
                                                  "events go to one place; drop one of them"));
            config.event_log = "/dev/stderr";
        } else if (name != "null" && name != "dynamic_rendezvous") {
            return b.fail(handler->error_hint(
                "not a handler torchrun 2.14 registers (null, console, dynamic_rendezvous)",
                "ddprun cannot load Python handlers; --event-log PATH appends every event as a "
                "JSON line, docs/events.md"));
        }
    }
    // A LogsSpecs is a Python class found through an entry point; torch's own is "default".
    if (const Setting* specs = b.find("logs_specs"); specs && specs->value != "default")
        b.fail(specs->error_hint(
            "a torchrun.logs_specs plugin is Python, which ddprun does not run (it has no "
            "Python in the launcher)",
            "drop it for torchrun's default layout, <log_dir>/<run_id>/attempt_N/<local_rank>/, "
            "and move or read the files from there"));
}

std::expected<std::string, Error> completion_script(const std::string& given) {
    const std::string shell = lower(trim(given));
    if (shell == "bash") return bash_completion();
    if (shell == "zsh") return zsh_completion();
    if (shell == "tcsh") return tcsh_completion();
    return std::unexpected(usage_error(fmt::format(
        "--print-completion={}: no completion for that shell (use bash, zsh or tcsh)", given)));
}

}  // namespace ddprun::cli
