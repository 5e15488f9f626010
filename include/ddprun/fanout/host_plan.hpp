// Which hosts a fanned-out job runs on, and which of each host's slots
// (devices) it uses: the pure layer under `--hosts`, `--hostfile`, `--include`
// and `--exclude`. Why it exists: the front end starts one agent per
// host over ssh, and a host listed twice, a typo in a slot count or a filter
// naming a host that is not there must be refused before anything starts,
// with a message naming the line or the entry. No I/O: the caller reads the
// hostfile and passes its text.
#pragma once

#include <cstddef>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// The most slots (workers) one host may have: the same bound as
// --nproc_per_node, so a host's worker count is always a valid nproc.
constexpr int k_max_host_slots = 1 << 14;

// One host of the job, as listed and then as selected.
//   name:    a valid host name (letters, digits, '-', '.', '_'; see
//            check_host_name), unique in the plan.
//   slots:   the host's number of slots as listed ("gpu1:4", "gpu1 slots=4");
//            unset when the listing gave none: the caller applies
//            --nproc_per_node.
//   devices: empty: no --include/--exclude narrowed this host; it runs one
//            worker per slot (`slots`, else --nproc_per_node) on all its
//            devices. Otherwise exactly these local indexes, in this order:
//            the host runs devices.size() workers and worker i gets device
//            devices[i] (an index into the host's own device list, i.e. its
//            CUDA_VISIBLE_DEVICES entries or else its GPUs, which is what
//            DeepSpeed's slot numbers are). Never empty after a filter: a host
//            left with no slot is dropped from the plan.
struct PlannedHost {
    std::string name;
    std::optional<int> slots;
    std::vector<int> devices;

    bool operator==(const PlannedHost&) const = default;
};

// How many workers `host` runs: its devices if narrowed, else its slots, else
// `default_nproc` (--nproc_per_node).
inline int workers_on(const PlannedHost& host, int default_nproc) {
    if (!host.devices.empty()) return static_cast<int>(host.devices.size());
    return host.slots.value_or(default_nproc);
}

// "" if `name` can be a host name, else why not (one line, quoting the name
// with unprintable characters escaped). A host name is 1..253 characters of
// letters, digits, '-', '.' and '_', not starting with '-' (ssh would read it
// as an option). So neither "user@host" nor an IPv6 literal is one: '@' and
// ':' separate the parts of --hosts and --include; a Host alias in
// ~/.ssh/config gives a host its user or address.
std::string check_host_name(std::string_view name);

// The value of --hosts: comma-separated HOST[:SLOTS], where HOST may be a Slurm
// hostlist expression ("gpu[01-04]:8", "a,b:2"); a ":SLOTS" after a bracket
// expression applies to every host it expands to. Errors: one line naming the
// entry by number, e.g. "--hosts entry 2 'gpu1:x': slots is not a number
// (write HOST:SLOTS, e.g. gpu1:8)".
std::expected<std::vector<PlannedHost>, std::string> parse_hosts_flag(std::string_view value);

// The text of a hostfile: one host per line as `host slots=N` (DeepSpeed, Open
// MPI), `host:N` (horovodrun) or a bare `host`; '#' starts a comment (whole
// line or trailing); blank lines, surrounding whitespace and CRLF line endings
// are fine. Open MPI's `max_slots=M` (or `max-slots=M`) is checked and ignored
// (ddprun never oversubscribes); any other key is refused, because a misspelled
// `slot=8` ignored would start the wrong number of workers. Errors:
// "hostfile line N: '<line>': <problem> (<what to write>)".
std::expected<std::vector<PlannedHost>, std::string> parse_hostfile(std::string_view text);

// DeepSpeed's --include / --exclude applied to `hosts` (from the parsers
// above): NODE_SPEC[@NODE_SPEC...] with NODE_SPEC = NAME[:SLOT[,SLOT...]], e.g.
// "host1@host2:0,2" is all of host1 and slots 0 and 2 of host2. --include keeps
// only what it names, --exclude drops what it names; an empty string is no
// filter, and both at once is an error, as in DeepSpeed. Hosts keep the order
// of `hosts`. Included slots keep the order they were named in, repeats
// removed; a host named twice gets both lists (DeepSpeed keeps the last one).
// What --exclude leaves keeps the host's order. A name not in `hosts`, or a
// slot not below the host's slots, is an error naming it. Excluding single
// slots needs the host's slot count: where it is unset the caller fills in a
// numeric --nproc_per_node first, else this is an error saying so. Nothing
// left at all is an error.
std::expected<std::vector<PlannedHost>, std::string> select_hosts(std::vector<PlannedHost> hosts,
                                                                  std::string_view include,
                                                                  std::string_view exclude);

}  // namespace ddprun
