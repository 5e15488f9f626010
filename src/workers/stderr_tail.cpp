// The last lines of a worker's stderr (see stderr_tail.hpp). On LogMux's hot
// path: a chunk of many lines is scanned from its end, and only the lines that
// can survive in the ring are copied.
#include "ddprun/workers/stderr_tail.hpp"

#include <algorithm>

namespace ddprun {

StderrTail::StderrTail(std::size_t lines, std::size_t max_line_bytes)
    : m_ring(lines), m_max_line_bytes(max_line_bytes) {}

void StderrTail::feed(std::string_view chunk) {
    if (m_ring.empty()) return;
    std::size_t last_nl = chunk.rfind('\n');
    if (last_nl == std::string_view::npos) {
        append_to_current(chunk);
        return;
    }
    // Only the last ring-size lines of the chunk can survive: find where
    // they start and skip the rest (and the pending partial) unread.
    std::size_t begin = 0;
    std::size_t pos = last_nl;
    for (std::size_t found = 1; pos > 0; ++found) {
        std::size_t prev = chunk.rfind('\n', pos - 1);
        if (prev == std::string_view::npos) break;
        if (found == m_ring.size()) {
            begin = prev + 1;
            m_current.clear();
            m_cr_pending = false;
            break;
        }
        pos = prev;
    }
    while (begin <= last_nl) {
        std::size_t nl = chunk.find('\n', begin);
        append_to_current(chunk.substr(begin, nl - begin));
        m_cr_pending = false;  // it was the first half of a "\r\n"
        m_ring[m_next].swap(m_current);
        m_current.clear();
        m_next = (m_next + 1) % m_ring.size();
        m_count = std::min(m_count + 1, m_ring.size());
        begin = nl + 1;
    }
    append_to_current(chunk.substr(last_nl + 1));
}

std::vector<std::string> StderrTail::lines() const {
    std::string partial = m_current;
    std::size_t keep = std::min(m_count, m_ring.size() - (partial.empty() ? 0 : 1));
    std::vector<std::string> out;
    for (std::size_t i = keep; i > 0; --i) {
        out.push_back(m_ring[(m_next + m_ring.size() - i) % m_ring.size()]);
    }
    if (!partial.empty()) out.push_back(std::move(partial));
    return out;
}

void StderrTail::append_to_current(std::string_view text) {
    if (text.empty()) return;
    // More of the line after a '\r': the terminal drew it over what was there.
    if (m_cr_pending) m_current.clear();
    m_cr_pending = text.back() == '\r';
    if (m_cr_pending) text.remove_suffix(1);
    if (std::size_t cr = text.rfind('\r'); cr != std::string_view::npos) {
        m_current.clear();
        text.remove_prefix(cr + 1);
    }
    std::size_t room = m_max_line_bytes - std::min(m_current.size(), m_max_line_bytes);
    m_current.append(text.substr(0, room));
}

LineMatcher::LineMatcher(std::shared_ptr<const Patterns> patterns, std::size_t keep,
                         std::size_t max_line_bytes)
    : m_patterns(std::move(patterns)), m_keep(keep), m_max_line_bytes(max_line_bytes) {}

bool LineMatcher::wanted(std::string_view line) const {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return std::any_of(m_patterns->begin(), m_patterns->end(), [line](const std::regex& pattern) {
        return std::regex_search(line.begin(), line.end(), pattern);
    });
}

void LineMatcher::take(std::string_view line, Matches& into) const {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++into.total;
    if (into.lines.size() == m_keep) into.lines.erase(into.lines.begin());
    into.lines.emplace_back(line.substr(0, m_max_line_bytes));
}

void LineMatcher::feed(std::string_view chunk) {
    while (!chunk.empty()) {
        const std::size_t nl = chunk.find('\n');
        const std::string_view piece = chunk.substr(0, nl);
        // A line of megabytes (a dumped tensor) is matched on its first part.
        if (m_current.size() < m_max_line_bytes * 4)
            m_current.append(piece.substr(0, m_max_line_bytes * 4 - m_current.size()));
        if (nl == std::string_view::npos) return;
        if (wanted(m_current)) take(m_current, m_matches);
        m_current.clear();
        chunk.remove_prefix(nl + 1);
    }
}

LineMatcher::Matches LineMatcher::matches() const {
    Matches out = m_matches;
    if (!m_current.empty() && wanted(m_current)) take(m_current, out);
    return out;
}

}  // namespace ddprun
