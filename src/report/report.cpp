// Turns how workers ended into the one summary a user reads when a job fails.
// Worker-provided text (error messages, stderr) is untrusted here: it may be
// huge or full of terminal escapes, and none of that may garble the user's
// terminal.
#include "ddprun/report/report.hpp"

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/report/known_errors.hpp"

#include <algorithm>
#include <csignal>
#include <ctime>
#include <iterator>
#include <utility>

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace ddprun {

namespace {

// An error message is shown in a box: its first lines say what happened, the
// traceback is in the stderr tail.
constexpr std::size_t k_max_message_lines = 4;
constexpr std::size_t k_max_message_bytes = 500;
// A progress bar or a dumped tensor can make one stderr line megabytes long.
constexpr std::size_t k_max_quoted_line_bytes = 500;
constexpr std::size_t k_max_host_bytes = 100;
constexpr std::size_t k_max_tail_lines = 50;
// With thousands of ranks the box must stay readable; the root cause matters,
// the long list of workers ddprun stopped much less.
constexpr std::size_t k_max_other_failures = 32;
constexpr std::size_t k_box_width = 72;
constexpr std::size_t k_tab_width = 4;
constexpr std::string_view k_truncated = " [...]";

bool is_blank(std::string_view text) {
    return trim(text).empty();
}

// Length of the valid UTF-8 sequence at text[pos] and its code point; 0 when
// the bytes there are not valid UTF-8 (overlong, surrogate, truncated, ...).
std::size_t utf8_sequence(std::string_view text, std::size_t pos, char32_t& code_point) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[pos + i]); };
    const unsigned char lead = byte(0);
    std::size_t length = 0;
    char32_t min = 0;
    if (lead < 0x80) {
        code_point = lead;
        return 1;
    }
    if ((lead & 0xE0) == 0xC0) {
        length = 2;
        min = 0x80;
        code_point = lead & 0x1Fu;
    } else if ((lead & 0xF0) == 0xE0) {
        length = 3;
        min = 0x800;
        code_point = lead & 0x0Fu;
    } else if ((lead & 0xF8) == 0xF0) {
        length = 4;
        min = 0x10000;
        code_point = lead & 0x07u;
    } else {
        return 0;
    }
    if (pos + length > text.size()) return 0;
    for (std::size_t i = 1; i < length; ++i) {
        if ((byte(i) & 0xC0) != 0x80) return 0;
        code_point = (code_point << 6) | (byte(i) & 0x3Fu);
    }
    if (code_point < min || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF))
        return 0;
    return length;
}

// Worker text made safe for a terminal: control characters (C0, DEL, C1) and
// invalid UTF-8 become '?', tabs become spaces, a carriage return keeps only
// what a terminal would have shown last, and long lines are cut.
std::string printable(std::string_view line, std::size_t max_bytes) {
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
    if (const auto cr = line.rfind('\r'); cr != std::string_view::npos) line.remove_prefix(cr + 1);

    std::string out;
    std::size_t column = 0;
    std::size_t pos = 0;
    while (pos < line.size() && out.size() < max_bytes) {
        char32_t code_point = 0;
        const std::size_t length = utf8_sequence(line, pos, code_point);
        if (code_point == U'\t' && length == 1) {
            const std::size_t spaces = k_tab_width - column % k_tab_width;
            out.append(spaces, ' ');
            column += spaces;
        } else if (length == 0 || code_point < 0x20 || (code_point >= 0x7F && code_point < 0xA0)) {
            out += '?';
            ++column;
        } else {
            out.append(line.substr(pos, length));
            ++column;
        }
        pos += length == 0 ? 1 : length;
    }
    out.resize(trim_right(out).size());
    if (pos < line.size()) out += k_truncated;
    return out;
}

void append_line(std::string& out, std::string_view line) {
    out += trim_right(line);
    out += '\n';
}

// UTC, to the millisecond: nodes may sit in different time zones and
// failures within one second still need ordering.
std::string format_time(std::chrono::system_clock::time_point time) {
    using namespace std::chrono;
    const auto seconds = floor<std::chrono::seconds>(time);
    const auto millis = duration_cast<milliseconds>(time - seconds).count();
    const std::time_t as_time_t = system_clock::to_time_t(seconds);
    std::tm tm{};
    if (gmtime_r(&as_time_t, &tm) == nullptr) return "?";
    return fmt::format("{:%Y-%m-%d %H:%M:%S}.{:03} UTC", tm, millis);
}

bool has_time(const WorkerOutcome& outcome) {
    return outcome.time != std::chrono::system_clock::time_point{};
}

std::string describe_worker(const WorkerOutcome& outcome) {
    std::string out = fmt::format("rank {} (local_rank {}, node {}", outcome.rank,
                                  outcome.local_rank, outcome.node_rank);
    if (!outcome.host.empty())
        out += fmt::format(", host {}", printable(outcome.host, k_max_host_bytes));
    if (outcome.pid != 0) out += fmt::format(", pid {}", outcome.pid);
    out += ')';
    return out;
}

std::string describe_end(const WorkerOutcome& outcome) {
    if (!outcome.oom.empty())
        return fmt::format("{}, killed by the kernel's OOM killer", signal_name(outcome.signal));
    return outcome.signal != 0 ? signal_name(outcome.signal)
                               : fmt::format("exit code {}", outcome.exit_code);
}

void append_root_cause(std::string& out, const WorkerOutcome& root) {
    constexpr std::string_view indent = "             ";  // lines up with the labels' values
    if (root.stopped_by_ddprun) {
        // Every failure was ddprun's doing (e.g. it was interrupted): say so
        // rather than blame a worker.
        append_line(out,
                    fmt::format("first failure: {}, stopped by ddprun", describe_worker(root)));
    } else {
        append_line(out, fmt::format("root cause: {}", describe_worker(root)));
    }
    if (root.signal != 0) {
        append_line(out, fmt::format("  signal:    {} (exit code {})", signal_name(root.signal),
                                     exit_code_of(root)));
        if (!root.oom.empty()) append_line(out, fmt::format("  cause:     {}", root.oom));
    } else {
        append_line(out, fmt::format("  exit code: {}", root.exit_code));
    }
    if (has_time(root)) append_line(out, fmt::format("  time:      {}", format_time(root.time)));
    if (!is_blank(root.error_message)) {
        std::string_view label = "  error:     ";
        std::string_view rest = trim_right(root.error_message);
        for (std::size_t lines = 0; !rest.empty() && lines < k_max_message_lines; ++lines) {
            const auto end = std::min(rest.find('\n'), rest.size());
            append_line(out, fmt::format("{}{}", label,
                                         printable(rest.substr(0, end), k_max_message_bytes)));
            rest = end < rest.size() ? rest.substr(end + 1) : std::string_view{};
            label = indent;
        }
        if (!is_blank(rest)) append_line(out, fmt::format("{}{}", indent, k_truncated.substr(1)));
    }
    if (!root.report_lines.empty()) {
        append_line(out, root.report_lines.size() == root.report_lines_total
                             ? fmt::format("  stderr lines matching --report-lines ({}):",
                                           root.report_lines_total)
                             : fmt::format("  stderr lines matching --report-lines (the last {} "
                                           "of {}):",
                                           root.report_lines.size(), root.report_lines_total));
        for (const auto& line : root.report_lines)
            append_line(out, fmt::format("    | {}", printable(line, k_max_quoted_line_bytes)));
    }
    if (!root.stderr_tail.empty()) {
        const std::size_t shown = std::min(root.stderr_tail.size(), k_max_tail_lines);
        append_line(out, shown == 1 ? std::string("  last line of stderr:")
                                    : fmt::format("  last {} lines of stderr:", shown));
        for (auto it = root.stderr_tail.end() - static_cast<std::ptrdiff_t>(shown);
             it != root.stderr_tail.end(); ++it) {
            append_line(out, fmt::format("    | {}", printable(*it, k_max_quoted_line_bytes)));
        }
    }
    if (auto fix = known_error_fix(root.error_message, root.stderr_tail))
        append_line(out, fmt::format("  fix:       {}", *fix));
}

void append_other_failures(std::string& out, const std::vector<WorkerOutcome>& outcomes,
                           std::size_t root) {
    std::vector<const WorkerOutcome*> others;
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
        if (i != root && outcomes[i].failed()) others.push_back(&outcomes[i]);
    }
    if (others.empty()) return;
    // Failures of their own first, in the order they happened; then the
    // workers ddprun stopped, by rank.
    std::ranges::stable_sort(others, [](const WorkerOutcome* a, const WorkerOutcome* b) {
        if (a->stopped_by_ddprun != b->stopped_by_ddprun) return !a->stopped_by_ddprun;
        if (!a->stopped_by_ddprun && a->time != b->time) return a->time < b->time;
        return a->rank < b->rank;
    });

    append_line(out, std::string(k_box_width, '-'));
    append_line(out, fmt::format("other failures ({}):", others.size()));
    const std::size_t shown = std::min(others.size(), k_max_other_failures);
    for (std::size_t i = 0; i < shown; ++i) {
        const WorkerOutcome& other = *others[i];
        std::string line = fmt::format("  {}: {}", describe_worker(other), describe_end(other));
        if (other.stopped_by_ddprun) {
            line += " (stopped by ddprun)";
        } else if (has_time(other)) {
            line += fmt::format(" at {}", format_time(other.time));
        }
        append_line(out, line);
    }
    if (shown < others.size()) {
        const auto stopped = std::ranges::count_if(
            others.begin() + static_cast<std::ptrdiff_t>(shown), others.end(),
            [](const WorkerOutcome* other) { return other->stopped_by_ddprun; });
        append_line(out, fmt::format("  ... and {} more ({} stopped by ddprun)",
                                     others.size() - shown, stopped));
    }
}

}  // namespace

int exit_code_of(const WorkerOutcome& outcome) {
    return outcome.signal != 0 ? exit_code::kSignalBase + outcome.signal : outcome.exit_code;
}

std::optional<std::size_t> root_cause(const std::vector<WorkerOutcome>& outcomes) {
    // Ties in time go to the lower rank, so every node names the same worker.
    const auto earlier = [&](std::size_t a, std::size_t b) {
        if (outcomes[a].time != outcomes[b].time) return outcomes[a].time < outcomes[b].time;
        return outcomes[a].rank < outcomes[b].rank;
    };
    std::optional<std::size_t> own_failure;
    std::optional<std::size_t> any_failure;
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
        if (!outcomes[i].failed()) continue;
        if (!any_failure || earlier(i, *any_failure)) any_failure = i;
        if (!outcomes[i].stopped_by_ddprun && (!own_failure || earlier(i, *own_failure)))
            own_failure = i;
    }
    return own_failure ? own_failure : any_failure;
}

std::string format_hang_summary(const std::string& title, int exit_code, const std::string& cause,
                                const std::string& picture,
                                const std::vector<std::string>& rank_lines) {
    const std::string rule(k_box_width, '=');
    std::string out;
    append_line(out, rule);
    append_line(out, fmt::format("{} (exit code {})", title, exit_code));
    append_line(out, std::string(k_box_width, '-'));
    append_line(out, "root cause: " + cause);
    if (!picture.empty()) append_line(out, "every rank: " + picture);
    for (const auto& line : rank_lines) append_line(out, "  " + line);
    append_line(out, rule);
    return out;
}

std::string format_summary(const std::string& title, const std::vector<WorkerOutcome>& outcomes,
                           std::size_t root, std::optional<int> exit_code) {
    const std::string rule(k_box_width, '=');
    std::string out;
    append_line(out, rule);
    if (root >= outcomes.size()) {
        // A caller bug, but the user still deserves a box rather than a crash.
        append_line(out, title);
        append_line(out, rule);
        return out;
    }
    append_line(out, fmt::format("{} (exit code {})", title,
                                 exit_code.value_or(exit_code_of(outcomes[root]))));
    append_line(out, std::string(k_box_width, '-'));
    append_root_cause(out, outcomes[root]);
    append_other_failures(out, outcomes, root);
    append_line(out, rule);
    return out;
}

}  // namespace ddprun
