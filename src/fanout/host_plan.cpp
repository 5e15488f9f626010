// The host list of a fanned-out job (--hosts, --hostfile) and DeepSpeed's
// --include/--exclude over it. Why strict: every host named here gets an ssh
// session and an agent, so a typo must stop the launch with the line or entry
// that holds it, not start a job on the wrong machines or with the wrong
// number of workers.

#include "ddprun/fanout/host_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "ddprun/base/text.hpp"
#include "ddprun/scheduler/hostlist.hpp"

namespace ddprun {
namespace {

using Failure = std::unexpected<std::string>;
using Hosts = std::vector<PlannedHost>;

// Hostname limit of DNS (RFC 1035): anything longer is not a host.
constexpr std::size_t k_max_host_name = 253;
// Quoted input is cut to this many characters: a message stays one short line.
constexpr std::size_t k_max_quoted = 80;

std::string quoted(std::string_view text) {
    return ddprun::quoted(text, k_max_quoted);
}

bool is_host_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
}

// A slot count as written after "host:" or "slots=": the problem, or the count.
std::expected<int, std::string> parse_slots(std::string_view text) {
    auto value = to_integer(text);
    if (!value) return Failure("slots is not a number");
    if (*value < 1) return Failure("slots must be at least 1");
    if (*value > k_max_host_slots)
        return Failure(fmt::format("slots is more than {}", k_max_host_slots));
    return static_cast<int>(*value);
}

// --hosts splits at commas outside brackets: "gpu[01,03]:4,login" is two entries.
std::vector<std::string_view> split_entries(std::string_view value) {
    std::vector<std::string_view> entries;
    std::size_t start = 0;
    int depth = 0;
    for (std::size_t i = 0; i <= value.size(); ++i) {
        if (i == value.size() || (value[i] == ',' && depth == 0)) {
            entries.push_back(value.substr(start, i - start));
            start = i + 1;
        } else if (value[i] == '[') {
            ++depth;
        } else if (value[i] == ']' && depth > 0) {
            --depth;
        }
    }
    return entries;
}

}  // namespace

std::string check_host_name(std::string_view name) {
    if (name.empty()) return "empty host name";
    if (name.size() > k_max_host_name)
        return fmt::format("host name {} is longer than {} characters", quoted(name),
                           k_max_host_name);
    auto bad = std::ranges::find_if_not(name, is_host_char);
    if (bad != name.end())
        return fmt::format(
            "host name {} has {}, which no host name has (use letters, digits, '-', '.', '_')",
            quoted(name), quoted(std::string_view(&*bad, 1)));
    if (name.front() == '-')
        return fmt::format("host name {} starts with '-' (ssh would read it as an option)",
                           quoted(name));
    return {};
}

std::expected<Hosts, std::string> parse_hosts_flag(std::string_view value) {
    if (trim(value).empty())
        return Failure("--hosts is empty (write HOST[:SLOTS],..., e.g. gpu1:8,gpu2:8)");
    Hosts hosts;
    std::map<std::string, std::size_t, std::less<>> entry_of;  // host -> its entry (1-based)
    std::size_t number = 0;
    for (std::string_view entry : split_entries(value)) {
        ++number;
        auto fail = [&](std::string_view problem) {
            return Failure(fmt::format("--hosts entry {} {}: {}", number, quoted(entry), problem));
        };
        if (entry.empty()) return fail("empty entry (a stray comma?)");
        // The slot count follows the last ':' that is not inside brackets.
        std::optional<int> slots;
        std::string_view names = entry;
        auto colon = entry.rfind(':');
        if (colon != std::string_view::npos && entry.find(']', colon) == std::string_view::npos) {
            auto parsed = parse_slots(entry.substr(colon + 1));
            if (!parsed) return fail(parsed.error() + " (write HOST:SLOTS, e.g. gpu1:8)");
            slots = *parsed;
            names = entry.substr(0, colon);
        }
        if (names.empty()) return fail("empty host name (write HOST:SLOTS, e.g. gpu1:8)");
        auto expanded = expand_hostlist(names);
        if (!expanded) return fail(expanded.error());
        for (std::string& name : *expanded) {
            if (auto bad = check_host_name(name); !bad.empty()) return fail(bad);
            auto [it, fresh] = entry_of.emplace(name, number);
            if (!fresh)
                return fail(fmt::format("host {} is already in entry {} (list each host once)",
                                        quoted(name), it->second));
            hosts.push_back({std::move(name), slots, {}});
        }
    }
    return hosts;
}

std::expected<Hosts, std::string> parse_hostfile(std::string_view text) {
    Hosts hosts;
    std::map<std::string, std::size_t, std::less<>> line_of;  // host -> its line
    std::size_t number = 0;
    while (!text.empty()) {
        ++number;
        auto end = text.find('\n');
        std::string_view line = text.substr(0, end);
        text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
        line = trim(line.substr(0, line.find('#')));
        if (line.empty()) continue;
        auto fail = [&](std::string_view problem, std::string_view hint) {
            return Failure(
                fmt::format("hostfile line {}: {}: {} ({})", number, quoted(line), problem, hint));
        };

        std::vector<std::string_view> words;
        for (std::string_view rest = line; !rest.empty(); rest = trim(rest)) {
            auto space =
                std::ranges::find_if(rest, [](unsigned char c) { return std::isspace(c) != 0; });
            auto length = static_cast<std::size_t>(space - rest.begin());
            words.push_back(rest.substr(0, length));
            rest.remove_prefix(length);
        }
        std::string_view name = words[0];
        std::optional<int> slots;
        if (auto colon = name.find(':'); colon != std::string_view::npos) {  // horovodrun
            auto parsed = parse_slots(name.substr(colon + 1));
            if (!parsed) return fail(parsed.error(), "write 'host:N' or 'host slots=N'");
            slots = *parsed;
            name = name.substr(0, colon);
        }
        if (auto bad = check_host_name(name); !bad.empty())
            return fail(bad, "one host per line: 'host slots=N'");
        for (std::size_t i = 1; i < words.size(); ++i) {
            auto eq = words[i].find('=');
            if (eq == std::string_view::npos)
                return fail(fmt::format("{} is not key=value", quoted(words[i])),
                            "one host per line: 'host slots=N'");
            std::string_view key = words[i].substr(0, eq);
            std::string_view value = words[i].substr(eq + 1);
            // Open MPI's max_slots caps oversubscription, which ddprun never
            // does: checked as a number (so the file is not wrong for mpirun
            // either) and otherwise ignored. Any other key is refused: a
            // misspelled "slot=8" ignored would start the wrong number of
            // workers without a word.
            if (key == "slots" || key == "max_slots" || key == "max-slots") {
                auto parsed = parse_slots(value);
                if (!parsed) {
                    std::string problem = parsed.error();
                    if (key != "slots") problem.replace(0, 5, std::string(key));
                    return fail(problem, "write 'host slots=N'");
                }
                if (key != "slots") continue;
                if (slots) return fail("slots given twice", "write 'host slots=N' once");
                slots = *parsed;
            } else {
                return fail(fmt::format("unknown key {}", quoted(key)),
                            "write 'host slots=N'; Open MPI's max_slots=M is also read");
            }
        }
        auto [it, fresh] = line_of.emplace(std::string(name), number);
        if (!fresh)
            return fail(fmt::format("host {} is already on line {}", quoted(name), it->second),
                        "list each host once");
        hosts.push_back({std::string(name), slots, {}});
    }
    if (hosts.empty())
        return Failure(
            "the hostfile lists no host (write one 'host slots=N' per line; '#' starts a "
            "comment)");
    return hosts;
}

namespace {

// One NODE_SPEC of --include/--exclude: a host, and the slots it names (none:
// the whole host).
struct NodeSpec {
    std::string_view text;
    std::string_view name;
    std::vector<int> slots;
};

// The slots `host` has now: its devices if narrowed, else 0..slots-1; unset
// when neither is known.
std::optional<std::vector<int>> available(const PlannedHost& host) {
    if (!host.devices.empty()) return host.devices;
    if (!host.slots) return std::nullopt;
    std::vector<int> all(static_cast<std::size_t>(*host.slots));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    return all;
}

void add_once(std::vector<int>& slots, int slot) {
    if (std::ranges::find(slots, slot) == slots.end()) slots.push_back(slot);
}

// Parses `filter` (DeepSpeed's NODE_SPEC[@NODE_SPEC...]) against `hosts`:
// every name must be a host of the list, every slot one it has.
std::expected<std::vector<NodeSpec>, std::string> parse_filter(
    std::string_view flag, std::string_view filter, const Hosts& hosts,
    const std::map<std::string_view, std::size_t>& index) {
    std::vector<NodeSpec> specs;
    std::size_t start = 0;
    while (true) {
        auto at = filter.find('@', start);
        NodeSpec spec;
        spec.text = filter.substr(start, at == std::string_view::npos ? at : at - start);
        auto fail = [&](std::string_view problem) {
            return Failure(fmt::format("{} entry {}: {}", flag, quoted(spec.text), problem));
        };
        if (spec.text.empty())
            return Failure(
                fmt::format("{} {} has an empty entry (a stray '@'? write "
                            "host1@host2:0,2)",
                            flag, quoted(filter)));
        auto colon = spec.text.find(':');
        spec.name = spec.text.substr(0, colon);
        auto found = index.find(spec.name);
        if (found == index.end())
            return fail(fmt::format("host {} is not in the host list", quoted(spec.name)));
        if (colon != std::string_view::npos) {
            const PlannedHost& host = hosts[found->second];
            auto have = available(host);
            std::string_view list = spec.text.substr(colon + 1);
            for (std::size_t from = 0;;) {
                auto comma = list.find(',', from);
                std::string_view item =
                    list.substr(from, comma == std::string_view::npos ? comma : comma - from);
                auto slot = to_integer(item);
                if (!slot || *slot < 0 || item.find_first_not_of("0123456789 ") != item.npos)
                    return fail(fmt::format(
                        "slot {} is not a slot number (slots count from 0: write HOST:SLOT,SLOT, "
                        "e.g. {}:0,2)",
                        quoted(item), spec.name));
                if (have ? std::ranges::find(*have, *slot) == have->end()
                         : *slot >= k_max_host_slots)
                    return fail(fmt::format(
                        "host {} has no slot {}{}", spec.name, *slot,
                        host.slots ? fmt::format(" (its slots are 0-{})", *host.slots - 1)
                                   : std::string()));
                add_once(spec.slots, static_cast<int>(*slot));
                if (comma == std::string_view::npos) break;
                from = comma + 1;
            }
        }
        specs.push_back(std::move(spec));
        if (at == std::string_view::npos) return specs;
        start = at + 1;
    }
}

}  // namespace

std::expected<Hosts, std::string> select_hosts(Hosts hosts, std::string_view include,
                                               std::string_view exclude) {
    if (!include.empty() && !exclude.empty())
        return Failure(
            "--include and --exclude cannot be used together (keep one, as in DeepSpeed)");
    if (hosts.empty()) return Failure("no hosts to select from (give --hosts or --hostfile)");
    if (include.empty() && exclude.empty()) return hosts;
    const bool including = !include.empty();
    const std::string_view flag = including ? "--include" : "--exclude";
    const std::string_view filter = including ? include : exclude;

    std::map<std::string_view, std::size_t> index;
    for (std::size_t i = 0; i < hosts.size(); ++i) index.emplace(hosts[i].name, i);
    auto specs = parse_filter(flag, filter, hosts, index);
    if (!specs) return Failure(specs.error());

    // Per host: kept whole (nullopt) or narrowed to these slots; a host absent
    // from `picked` is dropped (include) or kept untouched (exclude).
    std::map<std::size_t, std::optional<std::vector<int>>> picked;
    for (const NodeSpec& spec : *specs) {
        std::size_t i = index.at(spec.name);
        if (including) {
            // DeepSpeed lets a later entry for the same host replace an earlier
            // one; naming a host twice here adds up instead, which is what
            // "host1:0@host1:1" can only mean. A whole host wins.
            auto [it, fresh] = picked.emplace(
                i, spec.slots.empty() ? std::nullopt : std::optional<std::vector<int>>(spec.slots));
            if (!fresh && it->second) {
                if (spec.slots.empty())
                    it->second.reset();
                else
                    for (int slot : spec.slots) add_once(*it->second, slot);
            }
            continue;
        }
        if (spec.slots.empty()) {
            picked[i] = std::vector<int>{};  // nothing left
            continue;
        }
        auto have = available(hosts[i]);
        if (!have)
            return Failure(fmt::format(
                "{} entry {}: host {} has no slot count to take slots from (give it one: "
                "{}:N in --hosts, '{} slots=N' in the hostfile, or a number for "
                "--nproc_per_node)",
                flag, quoted(spec.text), spec.name, spec.name, spec.name));
        auto [it, fresh] = picked.emplace(i, *have);
        if (!it->second) continue;
        std::erase_if(*it->second, [&](int slot) {
            return std::ranges::find(spec.slots, slot) != spec.slots.end();
        });
    }

    Hosts kept;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        auto it = picked.find(i);
        if (it == picked.end()) {
            if (!including) kept.push_back(std::move(hosts[i]));
            continue;
        }
        if (!it->second) {
            kept.push_back(std::move(hosts[i]));
        } else if (!it->second->empty()) {
            hosts[i].devices = std::move(*it->second);
            kept.push_back(std::move(hosts[i]));
        }
    }
    if (kept.empty())
        return Failure(
            fmt::format("{} {} leaves no host to run on (it names every slot of every host)", flag,
                        quoted(filter)));
    return kept;
}

}  // namespace ddprun
