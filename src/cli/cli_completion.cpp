// The bash and zsh completions from the option table (see cli_docs.hpp): every
// flag they offer, and what each value may be, are loops over k_options, so a
// completion cannot offer a flag the parser does not know.

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <utility>

#include "cli_docs.hpp"
#include "cli_values.hpp"
#include "ddprun/base/signals.hpp"

namespace ddprun::cli {
namespace {
// Options that may be given more than once (cli.cpp counts -v, collects --env).
bool repeatable(const OptionSpec& spec) {
    return spec.name == "verbose" || collects_every_value(spec);
}

bool is_choice_word(std::string_view word) {
    if (word.empty() || !std::islower(static_cast<unsigned char>(word.front()))) return false;
    return std::all_of(word.begin(), word.end(), [](char c) {
        return std::islower(static_cast<unsigned char>(c)) ||
               std::isdigit(static_cast<unsigned char>(c)) || c == '-';
    });
}

std::string joined(const std::vector<std::string>& words) {
    std::string out;
    for (const std::string& word : words) out += (out.empty() ? "" : " ") + word;
    return out;
}

std::string case_pattern(const OptionSpec& spec) {
    std::string out;
    for (const std::string& spelling : spellings(spec)) out += (out.empty() ? "" : "|") + spelling;
    return out;
}

// Inside a zsh single-quoted _arguments spec: a quote ends the string, and
// brackets and colons delimit the spec's parts.
std::string zsh_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        if (c == '\'')
            out += "'\\''";
        else if (c == '[' || c == ']' || c == ':' || c == '\\')
            out += {'\\', c};
        else
            out += c;
    }
    return out;
}

std::string zsh_spec(const OptionSpec& spec) {
    std::vector<std::string> names = spellings(spec);
    // A value after "--flag=" or as the next word; after "-r" attached or next.
    auto with_value = [&spec](const std::string& name) {
        if (is_flag(spec)) return name;
        return name + (name.starts_with("--") ? "=" : "+");
    };
    std::string out;
    if (repeatable(spec))
        out += "'*'";
    else if (names.size() > 1)
        out += fmt::format("'({})'", joined(names));
    if (names.size() > 1) {
        std::string braced;
        for (const std::string& name : names)
            braced += (braced.empty() ? "" : ",") + with_value(name);
        out += "{" + braced + "}";
    } else {
        out += with_value(names.front());
    }
    std::string help = spec.help.empty() ? "accepted for compatibility" : std::string(spec.help);
    out += fmt::format("'[{}]", zsh_escape(help));
    if (!is_flag(spec)) {
        out += fmt::format(":{}:", zsh_escape(spec.value_name));
        ValueCompletion values = value_completion(spec);
        switch (values.kind) {
            case ValueCompletion::Kind::Choices:
                out += "(" + joined(values.choices) + ")";
                break;
            case ValueCompletion::Kind::File:
                out += "_files";
                break;
            case ValueCompletion::Kind::Directory:
                out += "_files -/";
                break;
            case ValueCompletion::Kind::Signals:
                out += "_sequence compadd - " + joined(handled_signal_names());
                break;
            case ValueCompletion::Kind::None:
                out += " ";
                break;
        }
    }
    return out + "'";
}

}  // namespace

ValueCompletion value_completion(const OptionSpec& spec) {
    ValueCompletion out;
    std::string_view value = spec.value_name;
    if (is_flag(spec)) return out;
    if (value == "DIR") {
        out.kind = ValueCompletion::Kind::Directory;
    } else if (value == "FILE" || value == "PATH") {
        out.kind = ValueCompletion::Kind::File;
    } else if (value.starts_with("SIG")) {
        out.kind = ValueCompletion::Kind::Signals;
    } else if (value.find('|') != std::string_view::npos) {
        while (true) {
            auto bar = value.find('|');
            std::string_view word = value.substr(0, bar);
            if (is_choice_word(word)) out.choices.emplace_back(word);
            if (bar == std::string_view::npos) break;
            value.remove_prefix(bar + 1);
        }
        if (!out.choices.empty()) out.kind = ValueCompletion::Kind::Choices;
    }
    return out;
}

std::vector<std::string> handled_signal_names() {
    std::vector<std::string> names;
    for (int signal = 1; signal < SIGRTMIN; ++signal) {
        if (signal == SIGKILL || signal == SIGSTOP || signal == SIGCHLD) continue;
        std::string name = signal_name(signal);
        if (name.starts_with("SIG") && std::find(names.begin(), names.end(), name) == names.end())
            names.push_back(std::move(name));
    }
    return names;
}

std::string bash_completion() {
    std::vector<std::string> options, flags;
    std::string value_cases;
    for (const OptionSpec& spec : k_options) {
        std::vector<std::string> names = spellings(spec);
        options.insert(options.end(), names.begin(), names.end());
        if (is_flag(spec)) {
            flags.insert(flags.end(), names.begin(), names.end());
            continue;
        }
        ValueCompletion values = value_completion(spec);
        std::string action;
        switch (values.kind) {
            case ValueCompletion::Kind::Choices:
                action = fmt::format("COMPREPLY=($(compgen -W \"{}\" -- \"$cur\"))",
                                     joined(values.choices));
                break;
            case ValueCompletion::Kind::File:
                action = "_filedir";
                break;
            case ValueCompletion::Kind::Directory:
                action = "_filedir -d";
                break;
            case ValueCompletion::Kind::Signals:
                action = "_ddprun_signals";
                break;
            case ValueCompletion::Kind::None:
                action = ":";
                break;  // free text: nothing to offer
        }
        value_cases +=
            fmt::format("        {})\n            {}\n            return\n            ;;\n",
                        case_pattern(spec), action);
    }
    return fmt::format(
        R"(# bash completion for ddprun(1)
# Generated from ddprun's option table by tools/generate_docs.cpp; do not edit.

_ddprun_options="{options}"
# Options that take no value: any other option's next word is its value.
_ddprun_flags=" {flags} "
_ddprun_signal_names="{signals}"

# A comma-separated list: complete its last item.
_ddprun_signals()
{{
    local prefix=
    [[ $cur == *,* ]] && prefix=${{cur%,*}},
    COMPREPLY=($(compgen -P "$prefix" -W "$_ddprun_signal_names" -- "${{cur##*,}}"))
}}

# The program is a command or a file (./train, train.py); after it, its
# arguments complete as for that command.
_ddprun_program()
{{
    if (($1 == cword)); then
        _filedir
        [[ $cur == */* ]] || COMPREPLY+=($(compgen -c -- "$cur"))
    else
        _command_offset "$1"
    fi
}}

_ddprun()
{{
    local cur prev words cword split
    _init_completion -s || return

    # The first word that is not an option (or the one after --) is the
    # program: everything from there on belongs to it.
    local i=1 word
    while ((i < cword)); do
        word=${{words[i]}}
        if [[ $word == -- ]]; then
            _ddprun_program $((i + 1))
            return
        elif [[ $word == --*=* || $word == -[!-]?* ]]; then
            ((i++))
        elif [[ $word == -* ]]; then
            if [[ $_ddprun_flags == *" $word "* ]]; then ((i++)); else ((i += 2)); fi
        else
            _ddprun_program "$i"
            return
        fi
    done

    case $prev in
{value_cases}    esac
    $split && return

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$_ddprun_options" -- "$cur"))
        return
    fi
    _ddprun_program "$cword"
}} &&
    complete -F _ddprun ddprun
)",
        fmt::arg("options", joined(options)), fmt::arg("flags", joined(flags)),
        fmt::arg("signals", joined(handled_signal_names())), fmt::arg("value_cases", value_cases));
}

std::string zsh_completion() {
    std::string specs;
    for (const OptionSpec& spec : k_options) specs += "  " + zsh_spec(spec) + "\n";
    return fmt::format(
        R"(#compdef ddprun
# zsh completion for ddprun(1)
# Generated from ddprun's option table by tools/generate_docs.cpp; do not edit.

# The program is a command or a file (./train, train.py); after it, its
# arguments complete as for that command. Options end at the program.
_ddprun_program() {{
  _alternative 'commands:command:_command_names -e' 'files:file:_files'
}}

local -a args
args=(
{specs}  '(-)1:program:_ddprun_program'
  '*::program arguments:_normal'
)
_arguments -s -S -A '-*' $args
)",
        fmt::arg("specs", specs));
}

}  // namespace ddprun::cli
