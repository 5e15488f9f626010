// ddprun's options (the one table) and argv read against it the way argparse
// reads it. Internal to the command line (src/cli*.cpp); include/ddprun/cli.hpp
// is the interface.
//
// Why this header exists: cli.cpp collects the options by the table and looks up each
// option's environment default, cli_options.cpp scans argv, suggests flags and
// writes --help from it; both must walk the same list in the same order.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/cli/cli.hpp"

namespace ddprun::cli {

// Where a flag not given on the command line finds its default.
enum class EnvDefault {
    None,
    Torchrun,  // DDPRUN_<NAME>, then PET_<NAME> (what torchrun and Kubeflow set)
    Ddprun,    // DDPRUN_<NAME> only
};

struct OptionSpec {
    std::string_view name;        // canonical long spelling, without "--"
    char short_name;              // '\0': none
    std::string_view value_name;  // empty: a flag, which takes no value
    EnvDefault env;
    std::string_view section;  // help section; empty: accepted but not shown
    std::string_view help;
    // A variable of torch's own read after DDPRUN_<NAME> and PET_<NAME>, as torchrun 2.14
    // reads it (TORCH_ELASTIC_SHUTDOWN_TIMEOUT); empty: none.
    std::string_view torch_variable = {};
};

// The one list of options: scanning, collecting, environment names, suggestions and
// --help all come from it.
extern const std::span<const OptionSpec> k_options;

inline bool is_flag(const OptionSpec& spec) {
    return spec.value_name.empty();
}

// The options that may be given more than once, each time adding a value (the
// others keep the last): --env NAME, --report-lines REGEX.
inline bool collects_every_value(const OptionSpec& spec) {
    return spec.name == "env" || spec.name == "report-lines";
}

// The option of this canonical name (a name from k_options: never null for one).
const OptionSpec* find_option(std::string_view name);

// The other spelling: nproc_per_node <-> nproc-per-node.
std::string alternate_spelling(std::string_view name);

// ddprun's own options, split off the program and its arguments.
struct Scanned {
    std::vector<std::string> options;  // canonical spellings, values as separate items
    std::map<std::string_view, std::string> spelling;  // canonical name -> as typed
    std::optional<std::size_t> program_index;
    std::optional<Error> error;  // the first unknown, ambiguous or malformed flag
    bool status = false;         // `ddprun status [options]`: no program
};

Scanned scan(const std::vector<std::string>& args);

std::string help_text();

}  // namespace ddprun::cli
