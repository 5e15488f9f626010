// Python's string.Template.safe_substitute (python_template.hpp), the one
// pattern torchrun uses: delimiter `$`, names [_a-z][_a-z0-9]* ignoring case.

#include "ddprun/base/python_template.hpp"

#include <cctype>

namespace ddprun {
namespace {

bool name_start(char c) {
    return c == '_' || std::isalpha(static_cast<unsigned char>(c));
}

bool name_char(char c) {
    return c == '_' || std::isalnum(static_cast<unsigned char>(c));
}

}  // namespace

std::string substitute_python_template(std::string_view text, const TemplateLookup& lookup,
                                       const TemplateLiteral& literal) {
    std::string out;
    std::string pending;  // literal text not yet written
    auto flush = [&] {
        out += literal ? literal(pending) : pending;
        pending.clear();
    };
    for (std::size_t i = 0; i < text.size();) {
        if (text[i] != '$') {
            pending += text[i++];
            continue;
        }
        if (i + 1 < text.size() && text[i + 1] == '$') {  // $$: one literal $
            pending += '$';
            i += 2;
            continue;
        }
        std::size_t start = i + 1;
        bool braced = start < text.size() && text[start] == '{';
        if (braced) ++start;
        std::size_t end = start;
        if (end < text.size() && name_start(text[end]))
            while (end < text.size() && name_char(text[end])) ++end;
        bool closed = !braced || (end < text.size() && text[end] == '}');
        std::size_t after = braced && closed ? end + 1 : end;
        std::optional<std::string> value;
        if (end > start && closed) value = lookup(text.substr(start, end - start));
        if (!value) {  // an unknown name or a lone $: left as written
            pending += text.substr(i, end > start && closed ? after - i : 1);
            i += end > start && closed ? after - i : 1;
            continue;
        }
        flush();
        out += *value;
        i = after;
    }
    flush();
    return out;
}

}  // namespace ddprun
