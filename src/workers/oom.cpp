// The kernel's OOM killer, told from another SIGKILL (see oom.hpp).
#include "ddprun/workers/oom.hpp"

#include <charconv>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"

namespace ddprun {
namespace {

std::optional<std::string> read_small_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    while (true) {
        const auto at = text.find(separator);
        parts.push_back(text.substr(0, at));
        if (at == std::string_view::npos) return parts;
        text.remove_prefix(at + 1);
    }
}

// mountinfo escapes blanks and backslashes in paths as \ooo.
std::string unescaped(std::string_view field) {
    std::string out;
    for (std::size_t i = 0; i < field.size(); ++i) {
        if (field[i] == '\\' && i + 3 < field.size()) {
            int value = 0;
            auto [end, ec] = std::from_chars(field.data() + i + 1, field.data() + i + 4, value, 8);
            if (ec == std::errc{} && end == field.data() + i + 4) {
                out += static_cast<char>(value);
                i += 3;
                continue;
            }
        }
        out += field[i];
    }
    return out;
}

struct Mount {
    std::string root;   // the hierarchy's path that is mounted
    std::string point;  // where
};

// The mount of the v1 hierarchy with the memory controller (version 1) or of
// the v2 hierarchy (version 2).
std::optional<Mount> find_mount(std::string_view mountinfo, int version) {
    for (std::string_view line : split(mountinfo, '\n')) {
        const auto dash = line.find(" - ");
        if (dash == std::string_view::npos) continue;
        const auto fields = split(line.substr(0, dash), ' ');
        const auto tail = split(line.substr(dash + 3), ' ');
        if (fields.size() < 5 || tail.size() < 3) continue;
        const bool match = version == 2 ? tail[0] == "cgroup2" : tail[0] == "cgroup" && [&] {
            for (auto option : split(tail[2], ','))
                if (option == "memory") return true;
            return false;
        }();
        if (match) return Mount{unescaped(fields[3]), unescaped(fields[4])};
    }
    return std::nullopt;
}

std::optional<MemoryCgroup> in_mount(int version, std::string name, const Mount& mount) {
    std::string relative;
    if (mount.root == "/")
        relative = name;
    else if (name == mount.root)
        relative = "/";
    else if (name.starts_with(mount.root + "/"))
        relative = name.substr(mount.root.size());
    else
        return std::nullopt;  // a cgroup outside what is mounted here
    MemoryCgroup cgroup;
    cgroup.version = version;
    cgroup.name = std::move(name);
    cgroup.mount = mount.point;
    cgroup.dir = relative == "/" ? mount.point : mount.point + relative;
    return cgroup;
}

// A limit file's value in bytes; nullopt for none ("max", or v1's page-rounded
// LONG_MAX).
std::optional<std::uint64_t> limit_of(const MemoryCgroup& cgroup, const std::string& dir) {
    const auto text =
        read_small_file(dir + (cgroup.version == 2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (!text) return std::nullopt;
    const auto value = to_integer(trim(*text));
    if (!value || *value <= 0 || *value >= (1LL << 62)) return std::nullopt;
    return static_cast<std::uint64_t>(*value);
}

std::string bytes_text(std::uint64_t bytes) {
    constexpr std::uint64_t kib = 1024, mib = kib * 1024, gib = mib * 1024;
    auto in = [bytes](std::uint64_t unit, const char* name) {
        return bytes % unit == 0
                   ? fmt::format("{} {}", bytes / unit, name)
                   : fmt::format("{:.1f} {}",
                                 static_cast<double>(bytes) / static_cast<double>(unit), name);
    };
    if (bytes >= gib) return in(gib, "GiB");
    if (bytes >= mib) return in(mib, "MiB");
    if (bytes >= kib) return in(kib, "KiB");
    return fmt::format("{} bytes", bytes);
}

std::optional<std::uint64_t> oom_kills(const MemoryCgroup& cgroup) {
    const auto text = read_small_file(
        cgroup.dir + (cgroup.version == 2 ? "/memory.events" : "/memory.oom_control"));
    return text ? parse_oom_kills(*text) : std::nullopt;
}

}  // namespace

std::optional<MemoryCgroup> parse_memory_cgroup(std::string_view proc_cgroup,
                                                std::string_view mountinfo) {
    std::optional<std::string> v1, v2;
    for (std::string_view line : split(proc_cgroup, '\n')) {
        // "4:memory:/path", "0::/path"; the path may hold ':'.
        const auto first = line.find(':');
        const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
        if (second == std::string_view::npos) continue;
        const std::string_view id = line.substr(0, first);
        const std::string_view controllers = line.substr(first + 1, second - first - 1);
        std::string path(line.substr(second + 1));
        if (id == "0" && controllers.empty())
            v2 = std::move(path);
        else
            for (auto controller : split(controllers, ','))
                if (controller == "memory") v1 = path;
    }
    if (v1)
        if (auto mount = find_mount(mountinfo, 1)) return in_mount(1, *v1, *mount);
    if (v2)
        if (auto mount = find_mount(mountinfo, 2)) return in_mount(2, *v2, *mount);
    return std::nullopt;
}

std::optional<std::uint64_t> parse_oom_kills(std::string_view text) {
    for (std::string_view line : split(text, '\n')) {
        if (!line.starts_with("oom_kill ")) continue;
        const auto value = to_integer(line.substr(9));
        if (!value || *value < 0) return std::nullopt;
        return static_cast<std::uint64_t>(*value);
    }
    return std::nullopt;
}

std::string describe_memory_limit(const MemoryCgroup& cgroup) {
    std::string dir = cgroup.dir;
    std::string name = cgroup.name;
    while (true) {
        if (auto limit = limit_of(cgroup, dir))
            return fmt::format("{}: limit {}{}", cgroup.name, bytes_text(*limit),
                               name == cgroup.name ? "" : " (of " + name + ")");
        if (dir.size() <= cgroup.mount.size() || name == "/" || name.empty()) break;
        dir.erase(dir.rfind('/'));
        name.erase(name.rfind('/'));
        if (name.empty()) name = "/";
    }
    return cgroup.name + ": no limit";
}

void OomWatch::arm() {
    m_told = 0;
    m_cgroup.reset();
    const auto proc_cgroup = read_small_file("/proc/self/cgroup");
    const auto mountinfo = read_small_file("/proc/self/mountinfo");
    if (!proc_cgroup || !mountinfo) return;
    auto cgroup = parse_memory_cgroup(*proc_cgroup, *mountinfo);
    if (!cgroup) return;
    const auto kills = oom_kills(*cgroup);
    if (!kills) return;  // no counter (a kernel before 4.13, a v2 cgroup without memory)
    m_baseline = *kills;
    m_cgroup = std::move(cgroup);
}

std::optional<std::string> OomWatch::explain_sigkill() {
    if (!m_cgroup) return std::nullopt;
    const auto kills = oom_kills(*m_cgroup);
    if (!kills || *kills < m_baseline || *kills - m_baseline <= m_told) return std::nullopt;
    ++m_told;
    return "killed by the kernel's OOM killer (memory cgroup " + describe_memory_limit(*m_cgroup) +
           ")";
}

}  // namespace ddprun
