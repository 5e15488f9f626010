// The tcsh completion from the option table (see cli_docs.hpp). tcsh has no
// completion functions, only the rules of one `complete` command, tried in
// order; they are built by the same loops over k_options as the bash and zsh
// completions (cli_completion.cpp), so they cannot offer a flag the parser
// does not know. A file of its own: tcsh's rules share nothing with bash's
// script or zsh's _arguments specs beyond value_completion().

#include <fmt/format.h>

#include <string_view>

#include "cli_docs.hpp"

namespace ddprun::cli {
namespace {

std::string joined(const std::vector<std::string>& words) {
    std::string out;
    for (const std::string& word : words) out += (out.empty() ? "" : " ") + word;
    return out;
}

// One rule, KIND/PATTERN/LIST/, single-quoted for the `complete` command. The
// delimiter is the first of "/@%" that neither part holds (tcsh takes any).
std::string rule(char kind, std::string_view pattern, std::string_view list) {
    char delimiter = '/';
    for (char candidate : std::string_view("/@%")) {
        delimiter = candidate;
        if (pattern.find(candidate) == std::string_view::npos &&
            list.find(candidate) == std::string_view::npos)
            break;
    }
    std::string text = fmt::format("{0}{1}{2}{1}{3}{1}", kind, delimiter, pattern, list);
    std::string quoted = "'";
    for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
}

// What tcsh offers as an option's value: a list of words, files or
// directories; for free text nothing, but list-choices (^D) shows the value's
// name ("x:").
std::string value_list(const OptionSpec& spec) {
    ValueCompletion values = value_completion(spec);
    switch (values.kind) {
        case ValueCompletion::Kind::Choices:
            return "(" + joined(values.choices) + ")";
        case ValueCompletion::Kind::File:
            return "f";
        case ValueCompletion::Kind::Directory:
            return "d";
        case ValueCompletion::Kind::Signals:
            return "(" + joined(handled_signal_names()) + ")";
        case ValueCompletion::Kind::None:
            break;
    }
    return "x:" + std::string(spec.value_name);
}

// An sh script that succeeds while the word being completed (the last one of
// $COMMAND_LINE, the line as typed, which tcsh sets for a `...` list) comes
// before the program: tcsh's own patterns see one word back (n/), two (N/) or
// a fixed position (p/), and where the program starts depends on which
// options took the next word as their value. "--flag=value" and "-rV" are one
// word; the program, or "--", ends ddprun's options.
std::string before_program_script(const std::vector<std::string>& flags) {
    return fmt::format(
        "set -f; set -- $COMMAND_LINE; shift; while [ $# -gt 1 ]; do case $1 in --) exit 1;; "
        "--*=*) k=1;; --*|-?) case \" {} \" in *\" $1 \"*) k=1;; *) k=2;; esac;; -*) k=1;; "
        "*) exit 1;; esac; [ $# -gt $k ] || exit 1; shift $k; done",
        joined(flags));
}

}  // namespace

std::string tcsh_completion() {
    std::vector<std::string> options, flags;
    // tcsh uses the first rule that matches: the more specific ones first.
    std::vector<std::string> after_comma, next_word, after_equals;
    for (const OptionSpec& spec : k_options) {
        std::vector<std::string> names = spellings(spec);
        options.insert(options.end(), names.begin(), names.end());
        if (is_flag(spec)) {
            flags.insert(flags.end(), names.begin(), names.end());
            continue;
        }
        std::string list = value_list(spec);
        // "SIGTERM,SIGU": the item after the last comma; as the next word,
        // any word of signal names does (n/ would see only the whole word).
        bool signals = value_completion(spec).kind == ValueCompletion::Kind::Signals;
        if (signals && after_comma.empty()) after_comma.push_back(rule('c', "SIG*,", list));
        for (const std::string& name : names) {
            next_word.push_back(rule('n', name, list));
            if (!name.starts_with("--")) continue;  // "-rV": tcsh cannot split it
            after_equals.push_back(rule('c', name + "=", list));
            if (signals) after_comma.push_back(rule('c', name + "=*,", list));
        }
    }
    std::string rules;
    for (const auto* group : {&after_comma, &next_word, &after_equals})
        for (const std::string& text : *group) rules += "    " + text + " \\\n";
    return fmt::format(
        R"(# tcsh completion for ddprun(1)
# Generated from ddprun's option table by tools/generate_docs.cpp; do not edit.
# tcsh reads no directory of completions: source this file from ~/.tcshrc,
#   source /usr/share/ddprun/completion/ddprun.tcsh
#
# tcsh uses the first rule whose pattern matches the line: a signal name after
# a comma, an option's value (the word after it, or after "="), ddprun's
# options, and files for any other word. What tcsh cannot do as bash and zsh do:
#  - see where the program starts, which depends on the options that took a
#    value: only the options' rule knows, from $COMMAND_LINE (the whole line,
#    its quotes removed) read by sh; the value rules still apply after the
#    program ("./train.py --log_dir " offers directories);
#  - offer two kinds of list in one place: the program completes as a file
#    (train.py, ./train), not as a command on $PATH, and its arguments as
#    files, not as that command's own completion;
#  - complete a short option's attached value ("-r0") or a long option's
#    unique prefix ("--nproc=").

set _ddprun_options = ({options})
set _ddprun_before_program = '{script}'

complete ddprun \
{rules}    'C@-@`sh -c "$_ddprun_before_program" && echo $_ddprun_options`@' \
    'p/*/f/'
)",
        fmt::arg("options", joined(options)), fmt::arg("script", before_program_script(flags)),
        fmt::arg("rules", rules));
}

}  // namespace ddprun::cli
