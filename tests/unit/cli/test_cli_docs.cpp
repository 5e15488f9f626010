// ddprun(1) and the completions are written from the option table; these
// tests are what keeps them from drifting: every option, in every spelling,
// must appear in each, and the closed sets of values must be offered.

#include "cli/cli_docs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ddprun/base/exit_codes.hpp"

namespace ddprun::cli {
namespace {

// How a flag reads in roff source: minus signs escaped.
std::string roff_flag(const std::string& spelling) {
    std::string out;
    for (char c : spelling) out += c == '-' ? std::string("\\-") : std::string(1, c);
    return out;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(CliDocs, EveryOptionIsInTheManPageInEverySpelling) {
    std::string man = man_page("1.2.3");
    for (const OptionSpec& spec : k_options)
        for (const std::string& spelling : spellings(spec))
            EXPECT_TRUE(contains(man, "\\fB" + roff_flag(spelling) + "\\fR")) << spelling;
}

// The words of the bash script's `NAME="..."` line.
std::vector<std::string> bash_list(const std::string& bash, const std::string& name) {
    std::string start = name + "=\"";
    auto at = bash.find(start);
    if (at == std::string::npos) return {};
    at += start.size();
    std::string list = bash.substr(at, bash.find('"', at) - at);
    std::vector<std::string> words;
    for (std::size_t from = 0; from < list.size();) {
        auto blank = list.find(' ', from);
        if (blank == std::string::npos) blank = list.size();
        if (blank > from) words.push_back(list.substr(from, blank - from));
        from = blank + 1;
    }
    return words;
}

TEST(CliDocs, EveryOptionIsInBothCompletions) {
    std::string bash = bash_completion();
    std::string zsh = zsh_completion();
    std::vector<std::string> bash_options = bash_list(bash, "_ddprun_options");
    std::vector<std::string> bash_flags = bash_list(bash, "_ddprun_flags");
    for (const OptionSpec& spec : k_options) {
        for (const std::string& spelling : spellings(spec)) {
            EXPECT_NE(std::find(bash_options.begin(), bash_options.end(), spelling),
                      bash_options.end())
                << spelling;
            // What bash needs to know to find the program: which options take no value.
            EXPECT_EQ(std::find(bash_flags.begin(), bash_flags.end(), spelling) != bash_flags.end(),
                      is_flag(spec))
                << spelling;
            // zsh: in a brace list or alone, then "=" (--flag=V), "+" (-rV) or the
            // end of the name.
            bool found = false;
            for (const char* after : {"=", "+", ",", "}", "'", "["})
                found = found || contains(zsh, spelling + after);
            EXPECT_TRUE(found) << spelling;
        }
    }
}

// The words between `start` and the next `end` in `text`, split at blanks.
std::vector<std::string> words_between(const std::string& text, const std::string& start,
                                       char end) {
    auto at = text.find(start);
    if (at == std::string::npos) return {};
    at += start.size();
    std::string list = text.substr(at, text.find(end, at) - at);
    std::vector<std::string> words;
    for (std::size_t from = 0; from < list.size();) {
        auto blank = list.find(' ', from);
        if (blank == std::string::npos) blank = list.size();
        if (blank > from) words.push_back(list.substr(from, blank - from));
        from = blank + 1;
    }
    return words;
}

// A tcsh rule, in whichever delimiter it was written with.
bool has_tcsh_rule(const std::string& tcsh, char kind, const std::string& pattern) {
    for (char delimiter : std::string("/@%"))
        if (contains(tcsh, std::string{'\'', kind, delimiter} + pattern + delimiter)) return true;
    return false;
}

TEST(CliDocs, EveryOptionIsInTheTcshCompletion) {
    std::string tcsh = tcsh_completion();
    std::vector<std::string> options = words_between(tcsh, "set _ddprun_options = (", ')');
    // The flags the script finding the program skips alone: `case " FLAGS " in`.
    std::vector<std::string> flags = words_between(tcsh, "case \" ", '"');
    for (const OptionSpec& spec : k_options) {
        for (const std::string& spelling : spellings(spec)) {
            EXPECT_NE(std::find(options.begin(), options.end(), spelling), options.end())
                << spelling;
            EXPECT_EQ(std::find(flags.begin(), flags.end(), spelling) != flags.end(), is_flag(spec))
                << spelling;
            // A value as the next word, and after "=" for a long option.
            EXPECT_EQ(has_tcsh_rule(tcsh, 'n', spelling), !is_flag(spec)) << spelling;
            if (spelling.starts_with("--")) {
                EXPECT_EQ(has_tcsh_rule(tcsh, 'c', spelling + "="), !is_flag(spec)) << spelling;
            }
        }
    }
}

TEST(CliDocs, SpellingsAreBothLongFormsAndTheShortOne) {
    EXPECT_EQ(spellings(*find_option("nproc_per_node")),
              (std::vector<std::string>{"--nproc_per_node", "--nproc-per-node"}));
    EXPECT_EQ(spellings(*find_option("numa-binding")),
              (std::vector<std::string>{"--numa-binding", "--numa_binding"}));
    EXPECT_EQ(spellings(*find_option("module")), (std::vector<std::string>{"-m", "--module"}));
    EXPECT_EQ(spellings(*find_option("nnodes")), (std::vector<std::string>{"--nnodes"}));
}

TEST(CliDocs, ClosedSetsOfValuesAreOffered) {
    struct Case {
        std::string option;
        ValueCompletion::Kind kind;
        std::vector<std::string> choices;
    };
    using Kind = ValueCompletion::Kind;
    const Case cases[] = {
        {"rdzv_backend", Kind::Choices, {"static", "c10d", "etcd"}},
        {"numa-binding", Kind::Choices, {"node", "socket", "exclusive", "core-complex"}},
        {"nproc_per_node", Kind::Choices, {"gpu", "cpu", "auto"}},
        {"start_method", Kind::Choices, {"spawn", "fork", "forkserver"}},
        {"signals_to_handle", Kind::Signals, {}},
        {"log_dir", Kind::Directory, {}},
        {"hostfile", Kind::File, {}},
        {"event-log", Kind::File, {}},
        {"remote-ddprun", Kind::File, {}},
        {"master_addr", Kind::None, {}},
        {"redirects", Kind::None, {}},
        {"standalone", Kind::None, {}},
    };
    for (const Case& c : cases) {
        ValueCompletion values = value_completion(*find_option(c.option));
        EXPECT_EQ(values.kind, c.kind) << c.option;
        EXPECT_EQ(values.choices, c.choices) << c.option;
    }
}

TEST(CliDocs, SignalNamesAreTheOnesThatCanStopTheJob) {
    std::vector<std::string> names = handled_signal_names();
    for (const char* name : {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"})
        EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    for (const char* name : {"SIGKILL", "SIGSTOP", "SIGCHLD"})
        EXPECT_EQ(std::find(names.begin(), names.end(), name), names.end()) << name;
}

TEST(CliDocs, BashCompletesValuesAndThenTheProgram) {
    std::string bash = bash_completion();
    EXPECT_TRUE(contains(bash,
                         "--rdzv_backend|--rdzv-backend)\n            COMPREPLY=($(compgen "
                         "-W \"static c10d etcd\" -- \"$cur\"))"))
        << bash;
    EXPECT_TRUE(contains(bash, "--log_dir|--log-dir)\n            _filedir -d")) << bash;
    EXPECT_TRUE(contains(bash, "--hostfile)\n            _filedir\n")) << bash;
    EXPECT_TRUE(contains(bash, "_command_offset")) << bash;
    EXPECT_TRUE(contains(bash, "complete -F _ddprun ddprun")) << bash;
}

TEST(CliDocs, ZshCompletesValuesAndThenTheProgram) {
    std::string zsh = zsh_completion();
    EXPECT_TRUE(zsh.starts_with("#compdef ddprun\n"));
    EXPECT_TRUE(contains(zsh, ":(static c10d etcd)'")) << zsh;
    EXPECT_TRUE(contains(zsh, ":(node socket exclusive core-complex)'")) << zsh;
    EXPECT_TRUE(contains(zsh, ":(gpu cpu auto)'")) << zsh;
    EXPECT_TRUE(contains(zsh, "_sequence compadd - SIGHUP")) << zsh;
    EXPECT_TRUE(contains(zsh, "'(-)1:program:_ddprun_program'")) << zsh;
    // A quote in a description must not end the spec early ("exec'd").
    EXPECT_TRUE(contains(zsh, "exec'\\''d")) << zsh;
}

TEST(CliDocs, TcshCompletesValuesAndThenTheProgram) {
    std::string tcsh = tcsh_completion();
    EXPECT_TRUE(contains(tcsh, "\ncomplete ddprun \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'n/--rdzv_backend/(static c10d etcd)/' \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'c/--rdzv-backend=/(static c10d etcd)/' \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'n/--numa-binding/(node socket exclusive")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'c/--log_dir=/d/' \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'n/--hostfile/f/' \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'n/--master_addr/x:ADDR/' \\\n")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'c/--signals_to_handle=*,/(SIGHUP ")) << tcsh;
    EXPECT_TRUE(contains(tcsh, "'c/SIG*,/(SIGHUP ")) << tcsh;
    // tcsh takes the first rule that matches: a signal after a comma before
    // the value rules, those before ddprun's options, files last.
    std::string options_rule =
        "'C@-@`sh -c \"$_ddprun_before_program\" && echo $_ddprun_options`@' \\\n    'p/*/f/'\n";
    EXPECT_TRUE(tcsh.ends_with(options_rule)) << tcsh;
    EXPECT_LT(tcsh.find("'c/SIG*,/"), tcsh.find("'n/--signals_to_handle/")) << tcsh;
    EXPECT_LT(tcsh.rfind("'n/"), tcsh.find("'C@-@")) << tcsh;
    EXPECT_LT(tcsh.rfind("'c/--"), tcsh.find("'C@-@")) << tcsh;
}

TEST(CliDocs, ManPageHasTheContractSections) {
    std::string man = man_page("1.2.3");
    EXPECT_TRUE(man.starts_with(".\\\""));
    EXPECT_TRUE(contains(man, ".TH DDPRUN 1 \"\" \"ddprun 1.2.3\""));
    for (const char* section : {".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS",
                                ".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH EXAMPLES"})
        EXPECT_TRUE(contains(man, section)) << section;
    for (const char* variable :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR, MASTER_PORT", "TORCHELASTIC_ERROR_FILE",
          "DDPRUN_PROGRESS_FD", "DDPRUN_<NAME>, PET_<NAME>"})
        EXPECT_TRUE(contains(man, std::string(".B ") + variable)) << variable;
    for (int code : {exit_code::kUsage, exit_code::kInternal, exit_code::kRendezvous,
                     exit_code::kUnhealthy, exit_code::kNoProgress, exit_code::kHang,
                     exit_code::kNotExecutable, exit_code::kNotFound})
        EXPECT_TRUE(contains(man, ".B " + std::to_string(code) + "\n")) << code;
    EXPECT_TRUE(contains(man, "ddprun \\-\\-nproc_per_node=8 ./train \\-\\-lr 0.1"));
    // No line may start with a roff control character by accident.
    std::size_t at = 0;
    while ((at = man.find('\n', at)) != std::string::npos) {
        ++at;
        if (at < man.size() && man[at] == '\'') ADD_FAILURE() << man.substr(at, 40);
    }
}

TEST(CliDocs, OptionsOfTheEnvironmentSayWhichVariables) {
    std::string man = man_page("1");
    EXPECT_TRUE(contains(man, "Environment: DDPRUN_NPROC_PER_NODE, then PET_NPROC_PER_NODE.\n"));
    EXPECT_TRUE(contains(man, "Environment: DDPRUN_HANG_TIMEOUT.\n"));
}

}  // namespace
}  // namespace ddprun::cli
