// The lifeline's protocol (see lifeline.hpp): lines in, messages out.
#include "ddprun/fanout/lifeline.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"

namespace ddprun {
namespace {

constexpr std::string_view k_signal_word = "signal ";
constexpr int k_max_signal = 64;  // SIGRTMAX on Linux
// A warning quotes this much of a bad line.
constexpr std::size_t k_max_shown = 80;

// The line fit to quote in a one-line warning: unprintable bytes escaped, long lines cut.
std::string shown(std::string_view line, std::size_t length) {
    std::string out = quoted(line, k_max_shown, length);
    if (length > k_max_shown) out += fmt::format(" ({} bytes)", length);
    return out;
}

LifelineMessage bad(std::string_view line, std::size_t length) {
    // A secret line that reached the reader (an agent without the marker) is never echoed.
    if (line.starts_with("secret "))
        return {LifelineMessage::Kind::Bad, 0, "'secret ...' (a job secret, not shown)"};
    return {LifelineMessage::Kind::Bad, 0, shown(line, length)};
}

}  // namespace

LifelineMessage parse_lifeline_line(std::string_view line) {
    const std::size_t length = line.size();
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (!line.starts_with(k_signal_word)) return bad(line, length);
    std::string_view number = line.substr(k_signal_word.size());
    // Digits only: to_integer would take blanks and a sign too.
    const bool digits = !number.empty() && number.size() <= 2 &&
                        std::all_of(number.begin(), number.end(), [](char c) {
                            return std::isdigit(static_cast<unsigned char>(c));
                        });
    auto value = digits ? to_integer(number) : std::nullopt;
    if (!value || *value < 1 || *value > k_max_signal) return bad(line, length);
    return {LifelineMessage::Kind::Signal, static_cast<int>(*value), {}};
}

std::vector<LifelineMessage> LifelineReader::feed(std::string_view bytes) {
    std::vector<LifelineMessage> messages;
    while (!bytes.empty()) {
        const std::size_t newline = bytes.find('\n');
        const std::string_view part = bytes.substr(0, newline);
        if (m_too_long) {
            m_dropped += part.size();
        } else if (m_line.size() + part.size() > k_lifeline_max_line) {
            // Kept: the start, for the warning; the rest is counted, not stored.
            m_too_long = true;
            m_dropped = m_line.size() + part.size();
            m_line.append(part.substr(0, k_max_shown));
        } else {
            m_line.append(part);
        }
        if (newline == std::string_view::npos) break;
        messages.push_back(m_too_long ? bad(m_line, m_dropped) : parse_lifeline_line(m_line));
        m_line.clear();
        m_too_long = false;
        m_dropped = 0;
        bytes.remove_prefix(newline + 1);
    }
    return messages;
}

}  // namespace ddprun
