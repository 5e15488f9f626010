// The lines a --duplicate-*-filters stream copies (see duplicate_filter.hpp). On LogMux's
// path for every tee'd stream when filters are given, so a chunk is not split into lines
// to be tested one by one: each needle is searched for in the chunk's whole lines at once
// (memchr-driven), and only the lines that hold a hit are looked at. A chunk with no
// match costs one search per needle.
#include "ddprun/workers/duplicate_filter.hpp"

#include <algorithm>

namespace ddprun {

namespace {

constexpr std::size_t npos = std::string_view::npos;

// Where `needle` first occurs in `text` at or after `from` within one line (its only
// '\n', if any, is its last byte, the line's own), or npos.
std::size_t find_in_a_line(std::string_view text, std::string_view needle, std::size_t from) {
    for (;;) {
        const std::size_t hit = text.find(needle, from);
        if (hit >= text.size()) return npos;  // an empty needle finds the end: no line there
        if (needle.empty()) return hit;
        const std::size_t nl = text.find('\n', hit);
        if (nl == npos || nl + 1 >= hit + needle.size()) return hit;
        from = hit + 1;
    }
}

}  // namespace

DuplicateFilter::DuplicateFilter(std::shared_ptr<const Needles> needles, std::size_t max_line_bytes)
    : m_needles(std::move(needles)), m_max_line_bytes(max_line_bytes), m_hits(m_needles->size()) {}

bool DuplicateFilter::matches(std::string_view line) const {
    return std::any_of(m_needles->begin(), m_needles->end(), [line](const std::string& needle) {
        return find_in_a_line(line, needle, 0) != npos;
    });
}

std::size_t DuplicateFilter::next_hit(std::string_view text, std::size_t from) {
    std::size_t first = npos;
    for (std::size_t i = 0; i < m_hits.size(); ++i) {
        // A hit still ahead stays valid; one behind `from` was in a line already copied.
        if (m_hits[i] != npos && m_hits[i] < from)
            m_hits[i] = find_in_a_line(text, (*m_needles)[i], from);
        first = std::min(first, m_hits[i]);
    }
    return first;
}

void DuplicateFilter::copy_lines(std::string_view text, std::string_view prefix, std::string& out) {
    if (text.empty()) return;
    for (std::size_t i = 0; i < m_hits.size(); ++i)
        m_hits[i] = find_in_a_line(text, (*m_needles)[i], 0);
    // `from` is always a line's start, so the line of a hit at or after it starts there
    // or later.
    for (std::size_t from = 0, hit; (hit = next_hit(text, from)) != npos;) {
        const std::size_t start = hit == 0 ? 0 : text.rfind('\n', hit - 1) + 1;  // npos + 1: 0
        const std::size_t end = text.find('\n', hit) + 1;  // text ends with a '\n'
        out.append(prefix);
        out.append(text.substr(start, end - start));
        from = end;
    }
}

void DuplicateFilter::continue_line(std::string_view piece, std::string_view prefix,
                                    std::string& out) {
    const bool ends = !piece.empty() && piece.back() == '\n';
    switch (m_state) {
        case State::Copying:
            out.append(piece);
            break;
        case State::Skipping:
            break;
        case State::Collecting:
            m_line.append(piece);
            if (ends) {
                if (matches(m_line)) out.append(prefix).append(m_line);
                m_line.clear();
            } else if (m_line.size() > m_max_line_bytes) {
                if (matches(m_line)) {
                    out.append(prefix).append(m_line);
                    m_state = State::Copying;
                } else {
                    m_state = State::Skipping;
                }
                m_line.clear();
            }
            return;
    }
    if (ends) m_state = State::Collecting;
}

void DuplicateFilter::feed(std::string_view chunk, std::string_view prefix, std::string& out) {
    if (!m_line.empty() || m_state != State::Collecting) {  // a line begun before
        const std::size_t nl = chunk.find('\n');
        if (nl == npos) return continue_line(chunk, prefix, out);
        continue_line(chunk.substr(0, nl + 1), prefix, out);
        chunk.remove_prefix(nl + 1);
    }
    const std::size_t last_nl = chunk.rfind('\n');
    const std::size_t whole = last_nl == npos ? 0 : last_nl + 1;
    copy_lines(chunk.substr(0, whole), prefix, out);
    if (whole < chunk.size()) continue_line(chunk.substr(whole), prefix, out);
}

void DuplicateFilter::finish(std::string_view prefix, std::string& out) {
    if (m_state == State::Copying)
        out.append("\n");
    else if (m_state == State::Collecting && !m_line.empty() && matches(m_line))
        out.append(prefix).append(m_line).append("\n");
    m_state = State::Collecting;
    m_line.clear();
}

std::optional<std::string> duplicate_filter_pattern(std::string_view needle) {
    const bool at_end = !needle.empty() && needle.back() == '\n';
    if (at_end) needle.remove_suffix(1);
    if (needle.find('\n') != npos) return std::nullopt;
    std::string pattern;
    pattern.reserve(needle.size() * 2 + 1);
    for (const char c : needle) {
        if (std::string_view("^$\\.*+?()[]{}|").find(c) != npos) pattern.push_back('\\');
        pattern.push_back(c);
    }
    if (at_end) pattern.push_back('$');
    return pattern;
}

}  // namespace ddprun
