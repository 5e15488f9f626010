// Small text helpers shared by the parsers of outside input (command line,
// scheduler variables, sysfs files, JSON from files and the store).
// Header-only: each is a few lines.
#pragma once

#include <cctype>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// `text` without its trailing blanks (what a line shows).
inline std::string_view trim_right(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
    return text;
}

inline std::string_view trim(std::string_view text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
    return trim_right(text);
}

// `text` in single quotes, fit for a one-line message: unprintable bytes as
// \xNN, and cut after `max` bytes with "..." when it was longer (`length`: how
// long the whole was, where `text` is already a part of it).
inline std::string quoted(std::string_view text, std::size_t max,
                          std::size_t length = std::string_view::npos) {
    if (length == std::string_view::npos) length = text.size();
    constexpr char digits[] = "0123456789abcdef";
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < max; ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (std::isprint(c))
            out += static_cast<char>(c);
        else
            out += {'\\', 'x', digits[c >> 4], digits[c & 15]};
    }
    return out + (length > max ? "...'" : "'");
}

// The whole of `text` (surrounding blanks allowed) as an integer, else nullopt.
inline std::optional<long long> to_integer(std::string_view text, int base = 10) {
    text = trim(text);
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return value;
}

// As to_integer, and a leading '+' as well ("+8"), as Python's int() reads
// torchrun's flags: for numbers a user typed. "+-8" and "+ 8" are not numbers.
inline std::optional<long long> to_flag_integer(std::string_view text) {
    text = trim(text);
    if (text.starts_with('+')) {
        text.remove_prefix(1);
        if (text.empty() || !std::isdigit(static_cast<unsigned char>(text.front())))
            return std::nullopt;
    }
    return to_integer(text);
}

// A yes/no word, as every switch of ddprun takes it: 1|true|yes|on and
// 0|false|no|off, in any case, blanks around allowed; else nullopt.
inline std::optional<bool> to_bool(std::string_view text) {
    text = trim(text);
    auto is = [text](std::string_view word) {
        if (text.size() != word.size()) return false;
        for (std::size_t i = 0; i < word.size(); ++i)
            if (std::tolower(static_cast<unsigned char>(text[i])) != word[i]) return false;
        return true;
    };
    if (is("1") || is("true") || is("yes") || is("on")) return true;
    if (is("0") || is("false") || is("no") || is("off")) return false;
    return std::nullopt;
}

// A list of ids and ranges, "0,2-5,7" (Linux cpulists, Slurm id lists): calls
// `range(first, last)` for each item in order. False if an item is not N or N-M
// with 0 <= N <= M, or `range` returns false.
template <class Range>
bool for_each_id_range(std::string_view text, Range&& range) {
    while (true) {
        auto comma = text.find(',');
        std::string_view item = trim(text.substr(0, comma));
        auto dash = item.find('-');
        auto first = to_integer(item.substr(0, dash));
        auto last = dash == std::string_view::npos ? first : to_integer(item.substr(dash + 1));
        if (!first || !last || *first < 0 || *last < *first || !range(*first, *last)) return false;
        if (comma == std::string_view::npos) return true;
        text.remove_prefix(comma + 1);
    }
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
