// Slurm hostlist expansion ("node[01-04,07]" -> node01 node02 node03 node04
// node07). Why it exists: ddprun takes node 0's address from the first host of
// the step's node list, and a wrong first host means every node waits for a
// rendezvous that never comes. So the grammar is parsed strictly: anything
// Slurm would not write is refused with its position instead of guessed at.

#include "ddprun/scheduler/hostlist.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "ddprun/base/text.hpp"

namespace ddprun {
namespace {

using Failure = std::unexpected<std::string>;

// One "07" or "01-04" inside brackets: numbers keep the width of `first`'s text.
struct Range {
    unsigned long long first = 0;
    unsigned long long last = 0;
    std::size_t width = 0;

    unsigned long long size() const { return last - first + 1; }
};

std::string at(std::size_t index) {
    return fmt::format("at character {}", index + 1);
}

// Digits only, as Slurm writes them (no sign, no blanks), and at most 18.
std::optional<unsigned long long> to_number(std::string_view text) {
    if (text.empty() || text.size() > 18 ||
        !std::ranges::all_of(text, [](unsigned char c) { return std::isdigit(c); }))
        return std::nullopt;
    auto value = to_integer(text);
    if (!value) return std::nullopt;
    return static_cast<unsigned long long>(*value);
}

// `offset`: where `item` starts in the whole list, for the message.
std::expected<Range, std::string> parse_range(std::string_view item, std::size_t offset) {
    if (item.empty()) return Failure(fmt::format("empty entry in brackets {}", at(offset)));
    auto dash = item.find('-');
    std::string_view low = item.substr(0, dash);
    std::string_view high = dash == std::string_view::npos ? low : item.substr(dash + 1);
    auto first = to_number(low);
    auto last = to_number(high);
    if (!first || !last)
        return Failure(
            fmt::format("'{}' {} is not a number or a range like 01-04", item, at(offset)));
    if (*last < *first)
        return Failure(fmt::format("range '{}' {} goes backwards", item, at(offset)));
    return Range{*first, *last, low.size()};
}

// The inside of one bracket group, "01-04,07".
std::expected<std::vector<Range>, std::string> parse_group(std::string_view body,
                                                           std::size_t offset) {
    std::vector<Range> ranges;
    std::size_t start = 0;
    while (true) {
        auto comma = body.find(',', start);
        std::string_view item = body.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        auto range = parse_range(item, offset + start);
        if (!range) return Failure(range.error());
        ranges.push_back(*range);
        if (comma == std::string_view::npos) return ranges;
        start = comma + 1;
    }
}

std::string too_many() {
    return fmt::format("expands to more than {} hosts", k_max_hostlist_hosts);
}

// One name with its bracket groups, "rack[1-2]-node[01,03]", whose brackets
// the caller has checked to be balanced and not nested. `budget`: how many
// hosts it may still add to the list.
std::expected<std::vector<std::string>, std::string> expand_name(std::string_view name,
                                                                 std::size_t offset,
                                                                 std::size_t budget) {
    if (budget == 0) return Failure(too_many());
    std::vector<std::string> hosts{""};
    std::size_t i = 0;
    while (true) {
        auto open = name.find('[', i);
        std::string_view literal = name.substr(i, open == std::string_view::npos ? open : open - i);
        for (std::string& host : hosts) host += literal;
        if (open == std::string_view::npos) return hosts;
        auto close = name.find(']', open);
        auto ranges = parse_group(name.substr(open + 1, close - open - 1), offset + open + 1);
        if (!ranges) return Failure(ranges.error());

        // Counted before anything is built: "[1-99999999]" must not allocate.
        unsigned long long count = 0;
        for (const Range& range : *ranges) {
            if (range.size() > budget) return Failure(too_many());
            count += range.size();
        }
        if (count > budget / hosts.size()) return Failure(too_many());

        std::vector<std::string> next;
        next.reserve(hosts.size() * count);
        for (const std::string& host : hosts)
            for (const Range& range : *ranges)
                for (unsigned long long n = range.first;; ++n) {
                    next.push_back(fmt::format("{}{:0{}}", host, n, range.width));
                    if (n == range.last) break;
                }
        hosts = std::move(next);
        i = close + 1;
    }
}

}  // namespace

std::expected<std::vector<std::string>, std::string> expand_hostlist(std::string_view hostlist) {
    if (hostlist.empty()) return Failure("empty host list");
    std::vector<std::string> hosts;
    std::size_t name_start = 0;
    std::optional<std::size_t> open;  // the '[' not yet closed
    for (std::size_t i = 0; i <= hostlist.size(); ++i) {
        bool end = i == hostlist.size();
        if (end || (hostlist[i] == ',' && !open)) {
            if (open) return Failure(fmt::format("unclosed '[' {}", at(*open)));
            std::string_view name = hostlist.substr(name_start, i - name_start);
            if (name.empty())
                return Failure(end ? std::string("empty host name at the end (a trailing comma?)")
                                   : fmt::format("empty host name {} (a stray comma?)", at(i)));
            auto expanded = expand_name(name, name_start, k_max_hostlist_hosts - hosts.size());
            if (!expanded) return Failure(expanded.error());
            hosts.insert(hosts.end(), std::make_move_iterator(expanded->begin()),
                         std::make_move_iterator(expanded->end()));
            name_start = i + 1;
            continue;
        }
        char c = hostlist[i];
        if (c == '[') {
            if (open) return Failure(fmt::format("'[' inside brackets {}", at(i)));
            open = i;
        } else if (c == ']') {
            if (!open) return Failure(fmt::format("']' without '[' {}", at(i)));
            if (i == *open + 1) return Failure(fmt::format("empty brackets {}", at(*open)));
            open.reset();
        } else if (std::isspace(static_cast<unsigned char>(c))) {
            return Failure(fmt::format("whitespace {} (hosts are separated by commas)", at(i)));
        } else if (!std::isprint(static_cast<unsigned char>(c))) {
            return Failure(fmt::format("unexpected character {}", at(i)));
        }
    }
    return hosts;
}

}  // namespace ddprun
