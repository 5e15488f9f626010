// Workers in uninterruptible sleep (uninterruptible.hpp): torch's variable read
// as torch reads it, the /proc/PID/stat state letter, and the dwell per pid.
#include "ddprun/hang/uninterruptible.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <set>

#include <fmt/format.h>

namespace ddprun {

namespace {

using namespace std::chrono_literals;

// A value that could never fire: torch waits for it, ddprun leaves the check off.
constexpr double k_longest_seconds = 1e9;

bool is_blank(char c) {
    return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_digit(char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Python's float(text) for the ASCII texts an environment holds; empty where
// float() would raise ValueError.
std::optional<double> python_float(std::string_view text) {
    while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
    // PEP 515: an underscore only between two digits.
    std::string number;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '_') {
            number += text[i];
            continue;
        }
        if (i == 0 || i + 1 == text.size() || !is_digit(text[i - 1]) || !is_digit(text[i + 1]))
            return std::nullopt;
    }
    // from_chars takes '-' but not '+', and also takes "nan(chars)", which float() does not.
    std::string_view rest = number;
    if (rest.starts_with('+')) {
        rest.remove_prefix(1);
        if (rest.starts_with('-')) return std::nullopt;
    }
    if (rest.empty() || rest.find('(') != std::string_view::npos) return std::nullopt;
    double value = 0;
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    // Out of range: float() gives inf (or 0) where from_chars gives up; either is off here.
    if (error == std::errc::result_out_of_range && end == rest.data() + rest.size()) return 0.0;
    if (error != std::errc() || end != rest.data() + rest.size()) return std::nullopt;
    return value;
}

}  // namespace

UninterruptibleSetting uninterruptible_setting(const Environment& env) {
    UninterruptibleSetting setting;
    const auto found = env.find(std::string(k_uninterruptible_variable));
    if (found == env.end() || found->second.empty()) return setting;
    setting.value = found->second;
    const std::optional<double> seconds = python_float(found->second);
    if (!seconds) {
        setting.warning = fmt::format(
            "{}={}: not a number of seconds, so the uninterruptible-sleep check is off (as "
            "under torchrun); set it to a positive number of seconds, e.g. 300, to turn it on",
            k_uninterruptible_variable, found->second);
        return setting;
    }
    // NaN fails both comparisons: off, as max(0.0, nan) is 0.0 in torch.
    if (!(*seconds > 0 && *seconds <= k_longest_seconds)) return setting;
    const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(*seconds));
    setting.timeout = std::max(timeout, std::chrono::steady_clock::duration(1));
    return setting;
}

std::chrono::steady_clock::duration uninterruptible_look_period(
    std::chrono::steady_clock::duration timeout) {
    return std::clamp<std::chrono::steady_clock::duration>(timeout / 4, 10ms, 1s);
}

std::optional<char> proc_stat_state(std::string_view stat) {
    const std::size_t close = stat.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view rest = stat.substr(close + 1);
    while (!rest.empty() && is_blank(rest.front())) rest.remove_prefix(1);
    if (rest.empty()) return std::nullopt;
    return rest.front();
}

std::optional<char> read_proc_state(pid_t pid) {
    // One line; a process gone between the open and the read gives none.
    std::ifstream file(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(file, line)) return std::nullopt;
    return proc_stat_state(line);
}

UninterruptibleWatch::Looked UninterruptibleWatch::look(const std::vector<Seen>& seen,
                                                        Clock::time_point now) {
    std::set<pid_t> running;
    for (const auto& s : seen) running.insert(s.pid);
    std::erase_if(m_first_seen, [&](const auto& entry) { return !running.contains(entry.first); });
    Looked looked;
    for (const auto& s : seen) {
        if (!s.state) continue;  // unreadable: neither in D nor out of it
        if (*s.state != 'D') {
            m_first_seen.erase(s.pid);
            continue;
        }
        const auto [at, entered] = m_first_seen.try_emplace(s.pid, now);
        if (entered) looked.entered.push_back(s.pid);
        const Clock::duration dwell = now - at->second;
        if (dwell >= m_timeout) looked.stuck.push_back({s.pid, dwell});
    }
    return looked;
}

}  // namespace ddprun
