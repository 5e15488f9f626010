// The options as CLI11 parses them (see cli_parse.hpp): a CLI11 app built
// from the option table reads the scanned command line and the job file, and
// writes a job file back for --write-config.
//
// Why scan() still runs first: CLI11 matches a long flag exactly, while
// torchrun's argparse takes any unique prefix (--nproc for --nproc_per_node),
// and only the table's scan knows where ddprun's options end and the
// program's begin. scan() puts the options in canonical form; CLI11 then
// keeps their values and counts, and does the job file: it reads TOML or INI,
// gives a key the option of either spelling, applies a line only where the
// command line did not give the option (a flag wins over the file), and
// serializes options to TOML. The values are checked afterwards by one set of
// parsers (cli_values.cpp), whatever their source: a flag, the file, an
// environment variable or a scheduler's, so that every message names its own.
#include "cli_parse.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cli_values.hpp"
#include "ddprun/base/text.hpp"

namespace ddprun::cli {
namespace {

// What a job file may not set: what says what to do with this command line,
// and what only a --hosts launcher gives its agents.
constexpr std::string_view k_command_line_only[] = {
    "help", "version", "config", "write-config", "dry-run", "lifeline", "preflight",
};

bool file_may_set(std::string_view name) {
    return std::find(std::begin(k_command_line_only), std::end(k_command_line_only), name) ==
           std::end(k_command_line_only);
}

// Flags whose count is their value: -vv, or `verbose = 2` in a job file.
bool is_counted(std::string_view name) {
    return name == "verbose" || name == "quiet";
}

std::string cli11_names(const OptionSpec& spec) {
    std::string names = "--" + std::string(spec.name);
    if (std::string other = alternate_spelling(spec.name); other != spec.name)
        names += ",--" + other;
    if (spec.short_name != 0) names += fmt::format(",-{}", spec.short_name);
    return names;
}

// A job file's key without the quotes TOML allows around it.
std::string_view bare_key(std::string_view key) {
    key = trim(key);
    if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front())
        key = key.substr(1, key.size() - 2);
    return key;
}

// The job file's lines, read once for every message that names one (CLI11 reads
// the file itself); none when it cannot be read, which CLI11 then reports.
std::vector<std::string> lines_of(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
    return lines;
}

// The key a line sets ("" for none).
std::string_view key_of(std::string_view line) {
    return bare_key(line.substr(0, line.find('=')));
}

// "job.toml:3", the line of the file that sets `key` (either spelling; for a key
// in a [section], its last part): CLI11's items do not keep their line, and a
// message must name it. Just the path if no line matches.
std::string origin_of(const JobFile& file, const std::vector<std::string>& lines,
                      std::string_view key) {
    std::string_view tail =
        key.substr(key.rfind('.') == std::string_view::npos ? 0 : key.rfind('.') + 1);
    for (std::size_t at = 0; at < lines.size(); ++at) {
        std::string_view name = key_of(lines[at]);
        if (name == key || name == tail || alternate_spelling(name) == key)
            return fmt::format("{}:{}", file.path, at + 1);
    }
    return file.path;
}

// Whether the CLI11 built in reads a '#' inside quotes as part of the value:
// 2.6 (sid) does; 2.1 (Debian 12) ends the value there, as a comment. Asked of
// CLI11 itself, once, rather than guessed from its version.
bool keeps_hash_in_quotes() {
    static const bool keeps = [] {
        std::istringstream text("k = \"a#b\"\n");
        const std::vector<CLI::ConfigItem> items = CLI::ConfigTOML().from_config(text);
        return items.size() == 1 && items[0].inputs == std::vector<std::string>{"a#b"};
    }();
    return keeps;
}

// What CLI11 would read without a word, and wrong: a [section] (its keys are
// then a subcommand's, which ddprun has none of, and are dropped), and a '#'
// inside a quoted value where this CLI11 ends the value there. One line naming
// where, before CLI11 reads the file; an unreadable file is left to it.
std::optional<Error> misread_line(const JobFile& file, const std::vector<std::string>& lines) {
    for (std::size_t number = 1; number <= lines.size(); ++number) {
        std::string_view line = trim(lines[number - 1]);
        if (line.starts_with('['))
            return usage_error(
                fmt::format("{}:{}: {}: a job file has no sections (write its keys at the top)",
                            file.path, number, line));
        const std::size_t equals = line.find('=');
        if (line.starts_with('#') || line.starts_with(';') || equals == std::string_view::npos)
            continue;
        char quote = 0;  // the quote the value is inside of, as read so far
        for (char c : line.substr(equals + 1)) {
            if (c == '#' && quote == 0) break;  // a comment, which TOML allows after a value
            if (c == '#' && !keeps_hash_in_quotes())
                return usage_error(fmt::format(
                    "{}:{}: {}: a '#' inside a quoted value is read as a comment; give it on "
                    "the command line",
                    file.path, number, bare_key(line.substr(0, equals))));
            if (c == '"' || c == '\'') quote = quote == 0 ? c : quote == c ? 0 : quote;
        }
    }
    return std::nullopt;
}

Error unreadable(const JobFile& file) {
    std::string why = "cannot read it";
    const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat status {};
    if (fd < 0)
        why += fmt::format(": {}", std::strerror(errno));
    else if (::fstat(fd, &status) == 0 && S_ISDIR(status.st_mode))
        why += ": it is a directory";
    if (fd >= 0) ::close(fd);
    return Setting{file.label, file.path}.error_hint(
        why, "give the path of a TOML or INI job file, e.g. one written by --write-config");
}

// CLI11 refused a key that names an option, so it is one a file may not set.
Error not_for_a_file(const JobFile& file, const std::vector<std::string>& lines) {
    for (std::size_t number = 1; number <= lines.size(); ++number) {
        std::string_view name = key_of(lines[number - 1]);
        for (std::string_view option : k_command_line_only)
            if (name == option || alternate_spelling(name) == option)
                return usage_error(fmt::format(
                    "{}:{}: {}: is for the command line, not a job file (give it as --{})",
                    file.path, number, name, option));
    }
    return usage_error(fmt::format("{}: a key is for the command line, not a job file", file.path));
}

Error unknown_key(const JobFile& file, const std::vector<std::string>& lines,
                  const std::string& key) {
    std::string hint = closest_flag(key);
    if (!hint.empty())
        hint = fmt::format("did you mean {}?", hint.substr(2));
    else if (key.find('.') != std::string::npos)
        hint = "a job file has no sections: write its keys at the top";
    else
        hint = "a key is the long name of a flag of ddprun --help, e.g. nproc_per_node = 8";
    return usage_error(
        fmt::format("{}: unknown key {} ({})", origin_of(file, lines, key), key, hint));
}

// --write-config's text: each option given, from the command line or the job
// file, set on CLI11's option again in canonical form so that CLI11 writes it.
// Read back at once: a value CLI11's reader would take differently (CLI11 2.1
// takes a '#' for a comment even inside quotes; 2.6 does not) is an error now,
// not a wrong job later.
std::expected<std::string, Error> job_file_text(CLI::App& app,
                                                const std::vector<CLI::Option*>& options,
                                                const GivenOptions& given) {
    for (std::size_t i = 0; i < options.size(); ++i) {
        const OptionSpec& spec = k_options[i];
        const Given& g = given[i];
        options[i]->clear();
        if (!file_may_set(spec.name) || (g.count == 0 && g.origin.empty())) continue;
        if (is_counted(spec.name))
            options[i]->add_result(std::to_string(g.count));
        else if (is_flag(spec))
            options[i]->add_result(g.origin.empty() ? "true" : g.values.back());
        else if (collects_every_value(spec))
            for (const std::string& value : g.values) options[i]->add_result(value);
        else
            options[i]->add_result(g.values.back());
    }
    std::string text = app.config_to_str(false, false);
    std::istringstream written(text);
    for (const CLI::ConfigItem& item : app.get_config_formatter()->from_config(written)) {
        auto it = std::find_if(options.begin(), options.end(), [&](const CLI::Option* option) {
            return option->check_lname(item.name);
        });
        if (it == options.end()) continue;
        std::vector<std::string> expected = (*it)->results();
        if (item.inputs != expected)
            return std::unexpected(usage_error(fmt::format(
                "--write-config: {}={}: this CLI11 would read it back from a job file as '{}'; "
                "give it on the command line",
                item.name, expected.empty() ? "" : expected.back(),
                item.inputs.empty() ? "" : item.inputs.back())));
    }
    return "# A ddprun job file: ddprun --config FILE PROGRAM [ARGS...]. A flag on the\n"
           "# command line wins over a line here, a line here over the environment.\n" +
           text;
}

// The option of a canonical item of Scanned::options ("--name" or "-x").
const OptionSpec* option_of(std::string_view item) {
    for (const OptionSpec& spec : k_options)
        if (item.starts_with("--") ? item.substr(2) == spec.name
                                   : item.size() == 2 && item[1] == spec.short_name)
            return &spec;
    return nullptr;
}

}  // namespace

std::optional<JobFile> job_file_of(const Scanned& scanned, const Environment& env) {
    std::optional<JobFile> file;
    const std::vector<std::string>& items = scanned.options;
    for (std::size_t at = 0; at < items.size(); ++at) {
        const OptionSpec* spec = option_of(items[at]);
        if (spec == nullptr || is_flag(*spec) || at + 1 == items.size()) continue;
        if (spec->name == "config") file = JobFile{scanned.spelling.at("config"), items[at + 1]};
        ++at;
    }
    if (auto it = env.find("DDPRUN_CONFIG"); !file && it != env.end() && !it->second.empty())
        file = JobFile{"DDPRUN_CONFIG", it->second};
    return file;
}

std::expected<ParsedOptions, Error> parse_options(const Scanned& scanned,
                                                  const std::optional<JobFile>& file) {
    CLI::App app{"ddprun"};
    app.set_help_flag();  // ours is a plain flag: CLI11's prints its own help and throws
    // The job file's unknown keys come back in remaining(), to be named with their line;
    // the command line has none (scan() reported them).
    app.allow_extras();
    app.allow_config_extras(CLI::config_extras_mode::capture);
    std::vector<CLI::Option*> options;
    for (const OptionSpec& spec : k_options) {
        CLI::Option* option = nullptr;
        if (spec.name == "config")
            option = app.set_config(cli11_names(spec), "", "job file")
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        else if (is_flag(spec))
            option = app.add_flag(cli11_names(spec));
        else
            // --env and --report-lines may be given several times, each adding a value.
            option = app.add_option(cli11_names(spec))
                         ->multi_option_policy(collects_every_value(spec)
                                                   ? CLI::MultiOptionPolicy::TakeAll
                                                   : CLI::MultiOptionPolicy::TakeLast);
        if (!file_may_set(spec.name)) option->configurable(false);
        options.push_back(option);
    }
    // The job file is `file` alone (none for --help): the command line's --config is
    // left out. CLI11 takes the arguments last first.
    std::vector<std::string> args;
    const std::vector<std::string>& items = scanned.options;
    for (std::size_t at = 0; at < items.size(); ++at) {
        const OptionSpec* spec = option_of(items[at]);
        const bool takes_value = spec != nullptr && !is_flag(*spec) && at + 1 < items.size();
        if (spec == nullptr || spec->name != "config") args.push_back(items[at]);
        if (takes_value && spec->name != "config") args.push_back(items[at + 1]);
        if (takes_value) ++at;
    }
    if (file) args.insert(args.end(), {"--config", file->path});
    std::reverse(args.begin(), args.end());
    const std::vector<std::string> lines = file ? lines_of(file->path) : std::vector<std::string>{};
    if (file)
        if (auto misread = misread_line(*file, lines)) return std::unexpected(*misread);
    try {
        app.parse(args);
    } catch (const CLI::FileError&) {
        return std::unexpected(unreadable(*file));
    } catch (const CLI::ConfigError&) {
        return std::unexpected(not_for_a_file(*file, lines));
    } catch (const CLI::ParseError& error) {
        // A job file's value CLI11 cannot take (a flag's `= maybe`); the command line's
        // are well-formed, so there it means scan() and CLI11 disagree: one line still.
        return std::unexpected(usage_error(fmt::format(
            "{}: {}", file ? file->path : std::string("cannot parse the options"), error.what())));
    }
    if (std::vector<std::string> extra = app.remaining(); !extra.empty())
        return std::unexpected(unknown_key(*file, lines, extra.front()));

    ParsedOptions parsed;
    parsed.given.resize(options.size());
    for (std::size_t i = 0; i < options.size(); ++i) {
        const OptionSpec& spec = k_options[i];
        Given& g = parsed.given[i];
        if (options[i]->count() == 0) continue;
        g.values = options[i]->results();
        g.count = options[i]->count();
        if (scanned.spelling.contains(spec.name)) continue;  // the command line's
        if (spec.name == "config") continue;                 // DDPRUN_CONFIG's
        g.origin = origin_of(*file, lines, spec.name);
        if (collects_every_value(spec)) continue;
        // One value, as the command line would give it: an unquoted a,b list is one string
        // again, and a flag's true, false or count is kept for its parser.
        std::string value;
        for (const std::string& part : g.values) value += (value.empty() ? "" : ",") + part;
        g.values = {value};
        g.count = 1;
        if (is_counted(spec.name)) {
            if (auto on = to_bool(value))
                g.count = *on ? 1 : 0;
            else if (auto count = to_flag_integer(value); count && *count >= 0)
                g.count = static_cast<std::size_t>(*count);
        }
    }
    const auto write = std::find_if(k_options.begin(), k_options.end(),
                                    [](const OptionSpec& s) { return s.name == "write-config"; });
    if (parsed.given[static_cast<std::size_t>(write - k_options.begin())].count > 0) {
        auto text = job_file_text(app, options, parsed.given);
        if (!text) return std::unexpected(text.error());
        parsed.job_file_text = std::move(*text);
    }
    return parsed;
}

}  // namespace ddprun::cli

namespace ddprun {

std::expected<void, Error> write_job_file(const std::string& path, const std::string& text) {
    const std::string temporary = fmt::format("{}.{}.tmp", path, ::getpid());
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.close();
    if (!out || ::rename(temporary.c_str(), path.c_str()) != 0) {
        const int error = errno;
        ::unlink(temporary.c_str());
        return std::unexpected(cli::Setting{"--write-config", path}.error_hint(
            fmt::format("cannot write it: {}", std::strerror(error)),
            "give a path in a directory you can write"));
    }
    std::fprintf(stderr,
                 "ddprun: wrote %s; run the job with: ddprun --config %s PROGRAM [ARGS...]\n",
                 path.c_str(), path.c_str());
    return {};
}

}  // namespace ddprun
