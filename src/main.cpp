// ddprun's entry point: parse, prepare, run, and exit with the code that
// says how it went (README "Exit codes").
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/logging.hpp"
#include "ddprun/cli/cli.hpp"
#include "ddprun/cli/version.hpp"
#include "ddprun/fanout/fan_out.hpp"
#include "ddprun/launch/launch.hpp"
#include "ddprun/status/status.hpp"

extern char** environ;

namespace {

// An exception that escaped a thread (a library's own: see uncaught_error) is one
// line and a documented exit code, not an abort; the supervisor then stops every
// process of the job as for any agent exit.
[[noreturn]] void on_terminate() {
    const ddprun::Error error = ddprun::uncaught_error(std::current_exception());
    std::fprintf(stderr, "ddprun: error: %s\n", error.message.c_str());
    std::fflush(stderr);
    ::_exit(error.exit_code);
}

// Ends the process: its static objects' destructors (a page of code each) and
// the unmapping of what the report read are left to the exit. Unbuffered: one
// write, without the two system calls that size stdio's buffer.
[[noreturn]] void print_version() {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    std::fputs(ddprun::version_report().c_str(), stdout);
    std::_Exit(ddprun::exit_code::kSuccess);
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ddprun;
    std::set_terminate(on_terminate);
    // `ddprun --version` alone (how an install is checked, and what bench/run.sh times)
    // answers before the option table and CLI11's parser are built: their heap and code
    // pages cost 0.3-0.4 ms on a VM where --version has 3 ms in all.
    if (argc == 2 && std::string_view(argv[1]) == "--version") print_version();
    Environment env = environment_from(environ);
    auto command_line = parse_command_line(std::vector<std::string>(argv + 1, argv + argc), env);
    if (!command_line) {
        std::fprintf(stderr, "ddprun: error: %s\n", command_line.error().message.c_str());
        return command_line.error().exit_code;
    }
    if (command_line->action == CommandLine::Action::PrintVersion) print_version();
    if (command_line->action == CommandLine::Action::ShowStatus) {
        // Errors only (-v: more): the reader's own line says what went wrong.
        setup_logging(command_line->config.verbosity - 1);
        return run_status(
            command_line->config, env,
            {command_line->watch, command_line->json, command_line->rendezvous_given});
    }
    if (command_line->action != CommandLine::Action::Run) {
        std::fputs(command_line->text.c_str(), stdout);
        return exit_code::kSuccess;
    }
    if (!command_line->write_config.empty()) {
        if (auto written = write_job_file(command_line->write_config, command_line->job_file);
            !written) {
            std::fprintf(stderr, "ddprun: error: %s\n", written.error().message.c_str());
            return written.error().exit_code;
        }
        if (!command_line->config.dry_run) return exit_code::kSuccess;
    }
    setup_logging(command_line->config.verbosity);
    if (command_line->config.fan_out.given()) return run_fan_out(command_line->config, env);
    auto prepared = prepare_launch(command_line->config, env);
    if (!prepared) {
        std::fprintf(stderr, "ddprun: error: %s\n", prepared.error().message.c_str());
        return prepared.error().exit_code;
    }
    if (command_line->config.preflight) {
        auto answer = preflight_answer(prepared->context);
        if (!answer) {
            std::fprintf(stderr, "ddprun: error: %s\n", answer.error().message.c_str());
            return answer.error().exit_code;
        }
        std::fputs(answer->c_str(), stdout);
        return exit_code::kSuccess;
    }
    if (command_line->config.dry_run) {
        std::fputs(prepared->dry_run_plan.c_str(), stdout);
        return exit_code::kSuccess;
    }
    return run_launch(std::move(prepared->context));
}
