// Small text helpers shared by the parsers of outside input (command line,
// scheduler variables, sysfs files, JSON from files and the store).
// Header-only: each is a few lines.
#pragma once

#include <cctype>
#include <charconv>
#include <optional>
#include <string_view>

namespace ddprun {

inline std::string_view trim(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
    return text;
}

// The whole of `text` (surrounding blanks allowed) as an integer, else nullopt.
inline std::optional<long long> to_integer(std::string_view text, int base = 10) {
    text = trim(text);
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return value;
}

// False if JSON `text` nests arrays and objects deeper than `max_depth`: checked
// before a recursive parser sees hostile text. Brackets inside strings do not count.
inline bool json_nesting_within(std::string_view text, int max_depth) {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth) return false;
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
    return true;
}

}  // namespace ddprun
