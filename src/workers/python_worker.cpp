// What asking a Python worker for its tracebacks needs (see stacks.hpp):
// knowing that it is CPython, whose faulthandler prints them on SIGABRT, and
// keeping that SIGABRT from writing a core file of a worker we are stopping.
#include <sys/resource.h>

#include <cctype>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "ddprun/hang/stacks.hpp"

namespace ddprun {

bool is_python_executable(std::string_view path) {
    constexpr std::string_view k_deleted = " (deleted)";
    if (path.ends_with(k_deleted)) path.remove_suffix(k_deleted.size());
    std::size_t slash = path.rfind('/');
    std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
    if (!name.starts_with("python")) return false;
    name.remove_prefix(6);
    // python3.11d: a debug build.
    if (name.ends_with('d')) name.remove_suffix(1);
    for (char c : name)
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
    return true;
}

bool is_python(pid_t pid) {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec);
    return !ec && is_python_executable(exe.string());
}

Status disable_core_dumps(pid_t pid) {
    rlimit none{0, 0};
    if (::prlimit(pid, RLIMIT_CORE, &none, nullptr) != 0)
        return std::unexpected(system_error(fmt::format("prlimit({}, RLIMIT_CORE, 0)", pid)));
    return {};
}

}  // namespace ddprun
