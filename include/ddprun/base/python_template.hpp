// Python's string.Template, as torchrun applies it: to the program's arguments
// (`${local_rank}`, torch.distributed.elastic.utils.macros) and to
// --log-line-prefix-template (`${rank}`, `${hostname}`, ...). Pure.
//
// Why this file exists: a launch line copied from torchrun must mean the same
// under ddprun, and Template.safe_substitute has rules of its own: `$$` is one
// `$`, `$name` and `${name}` are placeholders (a name is [_A-Za-z][_A-Za-z0-9]*),
// and whatever it cannot substitute (an unknown name, a lone `$`) stays as written.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// What a placeholder's name stands for; nullopt leaves it as written.
using TemplateLookup = std::function<std::optional<std::string>(std::string_view name)>;
// How the text between placeholders is written out (e.g. with braces doubled).
using TemplateLiteral = std::function<std::string(std::string_view text)>;

// `text` with its placeholders substituted as Template(text).safe_substitute does;
// `literal` (if given) rewrites every stretch of text that is not a substitution.
std::string substitute_python_template(std::string_view text, const TemplateLookup& lookup,
                                       const TemplateLiteral& literal = {});

// Whether `text` has anything substitute_python_template would change: a `$`.
inline bool has_template_delimiter(std::string_view text) {
    return text.find('$') != std::string_view::npos;
}

}  // namespace ddprun
