// ddprun(1) and the bash, zsh and tcsh completions, written from the option table
// (cli_options.hpp) that --help and the parser use, so that none of them can
// name a flag the parser does not know or miss one it does. Pure: the
// generator (tools/generate_docs.cpp) writes the files at build time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli_options.hpp"

namespace ddprun::cli {

// What a shell can offer as an option's value, read from its value name:
// "static|c10d|etcd" is a closed set, "DIR" a directory, "FILE"/"PATH" a file,
// "SIG,..." signal names; anything else is free text.
struct ValueCompletion {
    enum class Kind { None, Choices, File, Directory, Signals };
    Kind kind = Kind::None;
    std::vector<std::string> choices;  // Kind::Choices
};
ValueCompletion value_completion(const OptionSpec& spec);

// The names --signals_to_handle accepts and can act on (not KILL, STOP, CHLD).
std::vector<std::string> handled_signal_names();

// Every spelling of an option: "--nproc_per_node", "--nproc-per-node"; "-m", "--module".
std::vector<std::string> spellings(const OptionSpec& spec);

std::string man_page(std::string_view version);
std::string bash_completion();
std::string zsh_completion();
std::string tcsh_completion();

}  // namespace ddprun::cli
