// The prefix template of worker output lines (see prefix_template.hpp): one
// walk over the template serves both the check at the command line and the
// expansion, so the two can never disagree on what a placeholder is.
#include "ddprun/base/prefix_template.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace ddprun {

namespace {

constexpr std::array<std::string_view, 6> k_placeholders{"rank", "local_rank", "node_rank",
                                                         "role", "round",      "host"};

// Walks a prefix template once: on_text gets literal text, on_placeholder the
// name inside each "{name}". A stray brace is passed on as text. Returns the
// first problem found, or "".
template <typename OnText, typename OnPlaceholder>
std::string parse_prefix(std::string_view tmpl, OnText&& on_text, OnPlaceholder&& on_placeholder) {
    std::string error;
    std::size_t i = 0;
    while (i < tmpl.size()) {
        std::size_t brace = tmpl.find_first_of("{}", i);
        on_text(tmpl.substr(i, brace - i));
        if (brace == std::string_view::npos) break;
        char c = tmpl[brace];
        if (brace + 1 < tmpl.size() && tmpl[brace + 1] == c) {  // "{{" or "}}"
            on_text(tmpl.substr(brace, 1));
            i = brace + 2;
            continue;
        }
        std::size_t close = c == '{' ? tmpl.find_first_of("{}", brace + 1) : brace;
        if (close == brace || close == std::string_view::npos || tmpl[close] != '}') {
            if (error.empty()) {
                error = std::string("unmatched '") + c + "' at character " +
                        std::to_string(brace + 1) + " (write " + c + c + " for a literal brace)";
            }
            on_text(tmpl.substr(brace, 1));
            i = brace + 1;
            continue;
        }
        on_placeholder(tmpl.substr(brace + 1, close - brace - 1));
        i = close + 1;
    }
    return error;
}

}  // namespace

namespace {

std::string expand(const std::string& tmpl, const StreamSource& source, const std::string* ranks,
                   const std::string* local_ranks) {
    std::string out;
    parse_prefix(
        tmpl, [&](std::string_view text) { out += text; },
        [&](std::string_view name) {
            if (name == "rank") {
                out += ranks != nullptr ? *ranks : std::to_string(source.rank);
            } else if (name == "local_rank") {
                out += local_ranks != nullptr ? *local_ranks : std::to_string(source.local_rank);
            } else if (name == "node_rank") {
                out += std::to_string(source.node_rank);
            } else if (name == "role") {
                out += source.role;
            } else if (name == "round") {
                out += std::to_string(source.round);
            } else if (name == "host") {
                out += source.host;
            } else {
                out += '{';
                out += name;
                out += '}';
            }
        });
    return out;
}

}  // namespace

std::string expand_prefix(const std::string& tmpl, const StreamSource& source) {
    return expand(tmpl, source, nullptr, nullptr);
}

std::string expand_group_prefix(const std::string& tmpl, const StreamSource& source,
                                const std::string& ranks, const std::string& local_ranks) {
    return expand(tmpl, source, &ranks, &local_ranks);
}

std::string rank_runs(std::vector<int> numbers) {
    std::sort(numbers.begin(), numbers.end());
    numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
    std::string text;
    for (std::size_t i = 0; i < numbers.size();) {
        std::size_t j = i;
        while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
        if (!text.empty()) text += ',';
        text += j == i ? std::to_string(numbers[i])
                       : std::to_string(numbers[i]) + "-" + std::to_string(numbers[j]);
        i = j + 1;
    }
    return text;
}

Status validate_prefix_template(const std::string& tmpl) {
    std::string unknown;
    std::string error = parse_prefix(
        tmpl, [](std::string_view) {},
        [&](std::string_view name) {
            bool known = std::find(k_placeholders.begin(), k_placeholders.end(), name) !=
                         k_placeholders.end();
            if (!known && unknown.empty()) unknown = "{" + std::string(name) + "}";
        });
    if (!error.empty()) return std::unexpected(usage_error(std::move(error)));
    if (unknown.empty()) return {};
    return std::unexpected(usage_error(
        "unknown placeholder " + unknown +
        " (known: {rank}, {local_rank}, {node_rank}, {role}, {round}, {host}; {{ and }} are "
        "literal braces)"));
}

}  // namespace ddprun
