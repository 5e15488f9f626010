// Reads the CPU and NUMA topology from sysfs (see topology.hpp). No libnuma
// or hwloc: the few files needed are plain text, and a fake tree in a temp dir
// is then all a test needs to be any machine.
#include "ddprun/devices/topology.hpp"
#include "ddprun/base/text.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace ddprun {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_file(const fs::path& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::optional<int> read_int(const fs::path& path) {
    auto text = read_file(path);
    if (!text) return std::nullopt;
    auto value = to_integer(*text);
    if (!value || *value < INT_MIN || *value > INT_MAX) return std::nullopt;
    return static_cast<int>(*value);
}

// The number in a sysfs entry name such as "node3" or "cpu17".
std::optional<int> numbered(const std::string& name, std::string_view prefix) {
    if (!name.starts_with(prefix) || name.size() == prefix.size()) return std::nullopt;
    std::string_view digits = std::string_view(name).substr(prefix.size());
    if (!std::all_of(digits.begin(), digits.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        return std::nullopt;
    auto value = to_integer(digits);
    if (!value || *value > INT_MAX) return std::nullopt;
    return static_cast<int>(*value);
}

// The lowest CPU sharing `cpu_dir`'s last-level cache: among its
// cache/index<K> entries, the highest level whose type is Data or Unified
// (an instruction cache shares nothing worth binding to), the first index of
// that level when there are several, as torch's
// _get_logical_cpus_sharing_same_max_level_cache_as does. Nullopt when sysfs
// lists no such cache (VMs and some containers have no cache/ at all).
std::optional<int> last_level_cache_of(const fs::path& cpu_dir) {
    std::map<int, fs::path> indices;  // by K, so ties between equal levels are stable
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(cpu_dir / "cache", ec))
        if (auto k = numbered(entry.path().filename().string(), "index"))
            indices.emplace(*k, entry.path());
    int best_level = INT_MIN;
    std::optional<int> lowest;
    for (const auto& [k, dir] : indices) {
        auto type = read_file(dir / "type");
        if (!type || (trim(*type) != "Data" && trim(*type) != "Unified")) continue;
        auto level = read_int(dir / "level");
        if (!level || *level <= best_level) continue;
        auto shared = read_file(dir / "shared_cpu_list");
        auto list = shared ? parse_cpu_list(*shared) : std::nullopt;
        if (!list || list->empty()) continue;
        best_level = *level;
        lowest = list->front();
    }
    return lowest;
}

}  // namespace

Topology read_topology(const std::string& sysfs_root) {
    Topology topology;
    topology.sysfs_root = sysfs_root;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(sysfs_root + "/devices/system/node", ec)) {
        auto id = numbered(entry.path().filename().string(), "node");
        if (!id) continue;
        auto text = read_file(entry.path() / "cpulist");
        auto cpus = text ? parse_cpu_list(*text) : std::nullopt;
        topology.nodes.push_back({*id, cpus.value_or(std::vector<int>{})});
    }
    std::sort(topology.nodes.begin(), topology.nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });

    for (const auto& entry : fs::directory_iterator(sysfs_root + "/devices/system/cpu", ec)) {
        auto cpu = numbered(entry.path().filename().string(), "cpu");
        if (!cpu) continue;
        fs::path dir = entry.path() / "topology";
        if (auto package = read_int(dir / "physical_package_id")) topology.socket[*cpu] = *package;
        // core_cpus_list is the newer name of thread_siblings_list.
        auto siblings = read_file(dir / "core_cpus_list");
        if (!siblings) siblings = read_file(dir / "thread_siblings_list");
        auto list = siblings ? parse_cpu_list(*siblings) : std::nullopt;
        if (list && !list->empty()) topology.core[*cpu] = list->front();
        if (auto cache = last_level_cache_of(entry.path()))
            topology.last_level_cache[*cpu] = *cache;
    }
    return topology;
}

std::string normalize_pci_bus_id(std::string_view bus_id) {
    std::string lower;
    for (char c : trim(bus_id))
        lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // [domain:]bus:device.function, all hex.
    std::string_view text = lower;
    auto dot = text.rfind('.');
    auto last_colon = text.rfind(':');
    if (dot == std::string_view::npos || last_colon == std::string_view::npos || dot < last_colon)
        return lower;
    std::string_view head = text.substr(0, last_colon);
    auto first_colon = head.rfind(':');
    std::string_view domain =
        first_colon == std::string_view::npos ? "0" : head.substr(0, first_colon);
    std::string_view bus =
        first_colon == std::string_view::npos ? head : head.substr(first_colon + 1);
    auto d = to_integer(domain, 16);
    auto b = to_integer(bus, 16);
    auto s = to_integer(text.substr(last_colon + 1, dot - last_colon - 1), 16);
    auto f = to_integer(text.substr(dot + 1), 16);
    if (!d || !b || !s || !f || *d < 0 || *b < 0 || *b > 0xff || *s < 0 || *s > 0x1f || *f < 0 ||
        *f > 7)
        return lower;
    return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", *d, *b, *s, *f);
}

std::expected<int, std::string> pci_numa_node(const std::string& bus_id, const Topology& topology) {
    std::string bus = normalize_pci_bus_id(bus_id);
    fs::path device = fs::path(topology.sysfs_root) / "bus/pci/devices" / bus;
    std::error_code ec;
    if (!fs::exists(device, ec))
        return std::unexpected(
            fmt::format("no PCI device {} under {}/bus/pci/devices", bus, topology.sysfs_root));
    auto node = read_int(device / "numa_node");
    if (!node)
        return std::unexpected(fmt::format("cannot read the NUMA node of PCI device {} ({})", bus,
                                           (device / "numa_node").string()));
    if (*node >= 0) return *node;
    if (topology.nodes.size() == 1) return topology.nodes.front().id;
    return std::unexpected(fmt::format(
        "the kernel does not know the NUMA node of PCI device {} ({} says {}: the firmware gives "
        "no locality for it)",
        bus, (device / "numa_node").string(), *node));
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
    std::set<int> cpus;
    text = trim(text);
    if (text.empty()) return std::vector<int>{};
    bool parsed = for_each_id_range(text, [&cpus](long long first, long long last) {
        // A bound keeps a typo such as "0-99999999" from allocating gigabytes.
        constexpr long long k_max_cpu = 1 << 20;
        if (last > k_max_cpu) return false;
        for (long long cpu = first; cpu <= last; ++cpu) cpus.insert(static_cast<int>(cpu));
        return true;
    });
    if (!parsed) return std::nullopt;
    return std::vector<int>(cpus.begin(), cpus.end());
}

std::string format_cpu_list(const std::vector<int>& cpus) {
    std::string out;
    for (std::size_t i = 0; i < cpus.size();) {
        std::size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!out.empty()) out += ',';
        out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
        i = j + 1;
    }
    return out;
}

std::vector<int> allowed_cpus() {
    // Sized for machines beyond CPU_SETSIZE (1024 CPUs): grow until it fits.
    for (int count = CPU_SETSIZE;; count *= 2) {
        cpu_set_t* set = CPU_ALLOC(count);
        if (set == nullptr) return {};
        std::size_t size = CPU_ALLOC_SIZE(count);
        CPU_ZERO_S(size, set);
        if (::sched_getaffinity(0, size, set) == 0) {
            std::vector<int> cpus;
            for (int cpu = 0; cpu < count; ++cpu)
                if (CPU_ISSET_S(cpu, size, set)) cpus.push_back(cpu);
            CPU_FREE(set);
            return cpus;
        }
        CPU_FREE(set);
        if (errno != EINVAL || count > (1 << 20)) return {};
    }
}

}  // namespace ddprun
