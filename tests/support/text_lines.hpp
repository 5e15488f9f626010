// The lines of a text, for tests that check output line by line: split at '\n', a
// last line without one kept, no empty line after a final '\n' (std::getline's way).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

inline std::vector<std::string> lines_of(std::string_view text) {
    std::vector<std::string> lines;
    for (std::size_t start = 0; start < text.size();) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        lines.emplace_back(text.substr(start, end - start));
        start = end + 1;
    }
    return lines;
}

}  // namespace ddprun
