// Parsing torch's FileTimer requests and the timer rules (see file_timer_table.hpp).
#include "ddprun/hang/file_timer_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/base/text.hpp"

namespace ddprun {
namespace {

using nlohmann::json;

constexpr std::size_t k_max_line = k_file_timer_max_line;
// A request is a flat object; the bound keeps a hostile line from costing stack.
constexpr int k_max_json_depth = 4;
constexpr int k_max_signal = 64;  // SIGRTMAX on Linux
// Seconds since the epoch (the year 5138): past it a value is not a time but garbage.
constexpr double k_max_expiration = 1e11;

// A pid as JSON gives it, if it is a positive pid_t.
std::optional<pid_t> pid_from(const json& value) {
    if (value.is_number_unsigned()) {
        auto pid = value.get<std::uint64_t>();
        if (pid > 0 && pid <= static_cast<std::uint64_t>(std::numeric_limits<pid_t>::max()))
            return static_cast<pid_t>(pid);
    }
    return std::nullopt;
}

std::optional<int> signal_from(const json& value) {
    if (!value.is_number_integer()) return std::nullopt;
    if (value.is_number_unsigned()) {
        auto signal = value.get<std::uint64_t>();
        if (signal <= static_cast<std::uint64_t>(k_max_signal)) return static_cast<int>(signal);
        return std::nullopt;
    }
    auto signal = value.get<std::int64_t>();
    if (signal >= -k_max_signal && signal <= k_max_signal) return static_cast<int>(signal);
    return std::nullopt;
}

}  // namespace

std::expected<FileTimerRequest, std::string> parse_file_timer_request(std::string_view line) {
    if (line.size() > k_max_line)
        return std::unexpected(
            fmt::format("a line of {} bytes (at most {})", line.size(), k_max_line));
    if (!json_nesting_within(line, k_max_json_depth))
        return std::unexpected(std::string("nested too deep"));
    json value = json::parse(line, nullptr, false);
    if (value.is_discarded()) return std::unexpected(std::string("not JSON"));
    if (!value.is_object()) return std::unexpected(std::string("not a JSON object"));
    auto field = [&value](const char* name) -> const json* {
        auto it = value.find(name);
        return it == value.end() ? nullptr : &*it;
    };
    FileTimerRequest request;
    const json* pid = field("pid");
    if (!pid) return std::unexpected(std::string("no \"pid\""));
    auto pid_value = pid_from(*pid);
    if (!pid_value) return std::unexpected(fmt::format("\"pid\" {} is not a pid", pid->dump()));
    request.pid = *pid_value;

    const json* scope = field("scope_id");
    if (!scope || !scope->is_string())
        return std::unexpected(std::string("no \"scope_id\" string"));
    request.scope_id = scope->get<std::string>();

    const json* expiration = field("expiration_time");
    if (!expiration || !expiration->is_number())
        return std::unexpected(std::string("no \"expiration_time\" number"));
    request.expiration_time = expiration->get<double>();
    if (!std::isfinite(request.expiration_time) || request.expiration_time > k_max_expiration)
        return std::unexpected(
            fmt::format("\"expiration_time\" {} is not a time", expiration->dump()));

    const json* signal = field("signal");
    if (!signal) return std::unexpected(std::string("no \"signal\""));
    auto signal_value = signal_from(*signal);
    if (!signal_value)
        return std::unexpected(fmt::format("\"signal\" {} is not a signal number (at most {})",
                                           signal->dump(), k_max_signal));
    request.signal = *signal_value;
    return request;
}

bool FileTimerTable::apply(const FileTimerRequest& request, double now, std::size_t max_timers) {
    auto key = std::pair{request.pid, request.scope_id};
    if (request.is_release()) {
        m_timers.erase(key);
        return true;
    }
    auto it = m_timers.find(key);
    if (it == m_timers.end() && m_timers.size() >= max_timers) return false;
    const double left = request.expiration_time - now;
    m_timers[std::move(key)] =
        Timer{request.expiration_time, request.signal, left >= 0 ? left : -1};
    return true;
}

std::optional<double> FileTimerTable::next_expiration() const {
    std::optional<double> next;
    for (const auto& [key, timer] : m_timers)
        if (!next || timer.expiration_time < *next) next = timer.expiration_time;
    return next;
}

std::vector<FileTimerTable::Expiry> FileTimerTable::take_expired(double now) {
    std::map<pid_t, std::vector<std::pair<const std::string*, const Timer*>>> by_pid;
    for (const auto& [key, timer] : m_timers)
        if (timer.expiration_time <= now) by_pid[key.first].emplace_back(&key.second, &timer);
    std::vector<Expiry> expired;
    for (auto& [pid, timers] : by_pid) {
        std::stable_sort(timers.begin(), timers.end(), [](const auto& a, const auto& b) {
            return a.second->expiration_time < b.second->expiration_time;
        });
        auto chosen = std::find_if(timers.begin(), timers.end(),
                                   [](const auto& t) { return t.second->signal > 0; });
        if (chosen == timers.end()) chosen = timers.begin();
        expired.push_back(Expiry{pid, *chosen->first, std::max(chosen->second->signal, 0),
                                 chosen->second->set_for});
    }
    for (const auto& expiry : expired) forget(expiry.pid);
    return expired;
}

void FileTimerTable::forget(pid_t pid) {
    auto first = m_timers.lower_bound(std::pair{pid, std::string()});
    auto last = first;
    while (last != m_timers.end() && last->first.first == pid) ++last;
    m_timers.erase(first, last);
}

bool FileTimerTable::holds(pid_t pid) const {
    auto it = m_timers.lower_bound(std::pair{pid, std::string()});
    return it != m_timers.end() && it->first.first == pid;
}

std::vector<pid_t> FileTimerTable::pids() const {
    std::vector<pid_t> pids;
    for (const auto& [key, timer] : m_timers)
        if (pids.empty() || pids.back() != key.first) pids.push_back(key.first);
    return pids;
}

}  // namespace ddprun
