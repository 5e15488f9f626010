// torchrun 2.x's options that ddprun maps onto its own (cli_torchrun.cpp), and the
// variables of torch's own it reads: each in torchrun's syntax, with its meaning.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddprun/cli/cli.hpp"

namespace ddprun {
namespace {

using Args = std::vector<std::string>;

bool none_ignored(int) {
    return false;
}

LaunchConfig parse_ok(const Args& args, const Environment& env = {}) {
    auto parsed = parse_command_line(args, env, none_ignored);
    EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().message);
    return parsed ? parsed->config : LaunchConfig{};
}

std::string parse_error(const Args& args, const Environment& env = {}) {
    auto parsed = parse_command_line(args, env, none_ignored);
    EXPECT_FALSE(parsed.has_value()) << "accepted: " << testing::PrintToString(args);
    if (parsed) return {};
    EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos) << parsed.error().message;
    EXPECT_EQ(parsed.error().exit_code, 2);
    return parsed.error().message;
}

TEST(TorchrunPrefixTemplate, BecomesTheLogPrefix) {
    const std::pair<std::string, std::string> cases[] = {
        {"${rank}: ", "{rank}: "},
        {"[${role_name}${local_rank}] ", "[{role}{local_rank}] "},
        {"${hostname}:${rank}|", "{host}:{rank}|"},
        {"$rank {x} $$ ${nope}", "{rank} {{x}} $ ${{nope}}"},
    };
    for (const auto& [tmpl, prefix] : cases) {
        SCOPED_TRACE(tmpl);
        EXPECT_EQ(parse_ok({"--log-line-prefix-template", tmpl, "./t"}).log_prefix, prefix);
        EXPECT_EQ(parse_ok({"--log_line_prefix_template=" + tmpl, "./t"}).log_prefix, prefix);
        EXPECT_EQ(parse_ok({"./t"}, {{"PET_LOG_LINE_PREFIX_TEMPLATE", tmpl}}).log_prefix, prefix);
        EXPECT_EQ(parse_ok({"./t"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", tmpl}}).log_prefix,
                  prefix);
    }
    // The flag wins over torch's variable; an empty one is none (torchrun's `or`).
    EXPECT_EQ(parse_ok({"--log-line-prefix-template=${rank}> ", "./t"},
                       {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "x"}})
                  .log_prefix,
              "{rank}> ");
    EXPECT_EQ(parse_ok({"--log-line-prefix-template=", "./t"}).log_prefix, "[{rank}]: ");
    EXPECT_NE(parse_error({"--log-prefix={rank}", "--log-line-prefix-template=${rank}", "./t"})
                  .find("conflicts with --log-prefix"),
              std::string::npos);
}

TEST(TorchrunDuplicateFilters, AreCommaListsWithDoubledCommaEscapes) {
    auto c = parse_ok({"--duplicate-stdout-filters", "apple,orange", "--duplicate_stderr_filters",
                       "a,,b,c", "./t"});
    EXPECT_EQ(c.duplicate_stdout_filters, (std::vector<std::string>{"apple", "orange"}));
    EXPECT_EQ(c.duplicate_stderr_filters, (std::vector<std::string>{"a,b", "c"}));
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_DUPLICATE_STDOUT_FILTERS", "x"}}).duplicate_stdout_filters,
              (std::vector<std::string>{"x"}));
    EXPECT_TRUE(parse_ok({"./t"}).duplicate_stdout_filters.empty());
    EXPECT_NE(parse_error({"--duplicate-stdout-filters=a,", "./t"}).find("empty filter"),
              std::string::npos);
}

TEST(TorchrunEventLogHandler, ConsoleWritesEventsToStderrTheOthersNothing) {
    EXPECT_EQ(parse_ok({"--event-log-handler=console", "./t"}).event_log, "/dev/stderr");
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_EVENT_LOG_HANDLER", "console"}}).event_log, "/dev/stderr");
    EXPECT_EQ(parse_ok({"--event_log_handler", "null", "./t"}).event_log, "");
    EXPECT_EQ(parse_ok({"--event-log-handler=dynamic_rendezvous", "./t"}).event_log, "");
    EXPECT_EQ(parse_ok({"--event-log-handler=null", "--event-log=/tmp/e", "./t"}).event_log,
              "/tmp/e");
    std::string unknown = parse_error({"--event-log-handler=scuba", "./t"});
    EXPECT_NE(unknown.find("--event-log-handler=scuba"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("--event-log PATH"), std::string::npos) << unknown;
    EXPECT_NE(parse_error({"--event-log-handler=console", "--event-log=/tmp/e", "./t"})
                  .find("conflicts with --event-log"),
              std::string::npos);
}

TEST(TorchrunLogsSpecs, TheDefaultIsAcceptedAPluginRefusedWithWhy) {
    parse_ok({"--logs-specs=default", "./t"});
    parse_ok({"--logs_specs", "default", "./t"});
    std::string plugin = parse_error({"--logs-specs=mycompany", "./t"});
    EXPECT_NE(plugin.find("--logs-specs=mycompany"), std::string::npos) << plugin;
    EXPECT_NE(plugin.find("no Python in the launcher"), std::string::npos) << plugin;
    EXPECT_NE(plugin.find("attempt_N"), std::string::npos) << plugin;
    // torchrun reads no PET_LOGS_SPECS: neither does ddprun.
    parse_ok({"./t"}, {{"PET_LOGS_SPECS", "mycompany"}});
}

TEST(TorchrunPrintCompletion, PrintsEachShellsScriptAndNeedsNoProgram) {
    for (std::string shell : {"bash", "zsh", "tcsh"}) {
        SCOPED_TRACE(shell);
        for (const Args& args :
             {Args{"--print-completion", shell}, Args{"--print_completion=" + shell},
              Args{"--nproc_per_node=2", "--print-completion=" + shell, "./t"}}) {
            auto parsed = parse_command_line(args, {}, none_ignored);
            ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
            EXPECT_EQ(parsed->action, CommandLine::Action::PrintHelp);
            EXPECT_NE(parsed->text.find("ddprun"), std::string::npos);
            EXPECT_NE(parsed->text.find("--nproc_per_node"), std::string::npos);
        }
    }
    EXPECT_NE(parse_error({"--print-completion=fish"}).find("use bash, zsh or tcsh"),
              std::string::npos);
}

TEST(TorchVariables, AreReadAfterTheFlagAndPet) {
    EXPECT_EQ(parse_ok({"./t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown_timeout,
              std::chrono::milliseconds(7000));
    EXPECT_EQ(
        parse_ok({"./t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}, {"PET_SHUTDOWN_TIMEOUT", "5"}})
            .shutdown_timeout,
        std::chrono::milliseconds(5000));
    EXPECT_EQ(parse_ok({"--shutdown_timeout=3", "./t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}})
                  .shutdown_timeout,
              std::chrono::milliseconds(3000));
    EXPECT_NE(parse_error({"./t"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon"}})
                  .find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon"),
              std::string::npos);
    // torchrun's health check port is where ddprun's /healthz is served.
    EXPECT_EQ(parse_ok({"./t"}, {{"TORCHELASTIC_HEALTH_CHECK_PORT", "9100"}}).metrics_port, 9100);
    EXPECT_EQ(parse_ok({"--metrics-port=9200", "./t"}, {{"TORCHELASTIC_HEALTH_CHECK_PORT", "9100"}})
                  .metrics_port,
              9200);
}

TEST(TorchrunRunPath, RunsTheProgramAsAPythonFileWhateverItsName) {
    EXPECT_EQ(parse_ok({"--run_path", "train", "--lr=1"}).program_kind, ProgramKind::PythonFile);
    EXPECT_EQ(parse_ok({"--run-path", "x.py"}).program_kind, ProgramKind::PythonFile);
    EXPECT_EQ(parse_ok({"train"}, {{"PET_RUN_PATH", "1"}}).program_kind, ProgramKind::PythonFile);
    EXPECT_EQ(parse_ok({"train"}).program_kind, ProgramKind::Executable);
}

}  // namespace
}  // namespace ddprun
