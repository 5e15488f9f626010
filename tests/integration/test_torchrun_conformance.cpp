// ddprun against torchrun itself: every option the torch at hand's
// torchrun lists, read from its own parser (bench/torchrun_options.py), is
// accepted with each of its spellings and values; and a real project's launch
// line (TorchTitan's run_train.sh) runs end to end. A list of torchrun's flags
// written here would go stale with the next torch; reading the parser makes a
// new option fail this test by name until ddprun takes it. They run wherever
// /usr/bin/python3 has torch (Debian 12's 1.13 here, sid's 2.14 in
// scripts/platform.sh) and skip, saying why, where it has none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

// One option of torchrun's parser, as bench/torchrun_options.py prints it.
struct TorchrunOption {
    std::string dest;
    std::vector<std::string> spellings;
    bool takes_value = false;
    std::vector<std::string> choices;  // empty: any value
};

struct TorchrunParser {
    std::string torch_version;
    std::vector<TorchrunOption> options;
};

std::string joined(const std::vector<std::string>& words, const std::string& separator = " ") {
    std::string text;
    for (const auto& word : words) text += (text.empty() ? "" : separator) + word;
    return text;
}

// The line of ddprun's stderr that says why it refused: its "error:" line, else
// the last line it wrote.
std::string error_line(const RunResult& r) {
    auto lines = non_empty_lines(r.err);
    for (const auto& line : lines)
        if (contains(line, "ddprun: error:")) return line;
    return lines.empty() ? "(nothing on stderr)" : lines.back();
}

bool python_imports_torch() {
    RunOptions options;
    options.timeout = 60s;
    return run_command({k_python, "-c", "import torch"}, options).exit_code == 0;
}

class TorchrunOptions : public IntegrationTest {
  protected:
    // Torchrun's options, read from this torch's parser; nullopt when the test
    // skipped (no torchrun here) or failed (it could not be read).
    std::optional<TorchrunParser> read_torchrun_parser() {
        const std::string script =
            std::string(ddprun_test::build_paths::bench_dir) + "/torchrun_options.py";
        const std::string listing = path("torchrun_options.json");
        RunOptions options;
        options.timeout = 60s;  // importing torch on a busy 2-core machine
        auto r = run_command({k_python, script, listing}, options);
        if (r.exit_code == 77) {
            skip_reason = k_python + " has no torchrun to read: " + error_line(r);
            return std::nullopt;
        }
        if (r.exit_code != 0) {
            ADD_FAILURE() << script << " could not read torchrun's parser: " << r.describe();
            return std::nullopt;
        }
        auto json = nlohmann::json::parse(read_text_file(listing), nullptr, false);
        if (json.is_discarded() || !json.contains("options")) {
            ADD_FAILURE() << script << " wrote no options to " << listing << ": " << r.describe();
            return std::nullopt;
        }
        TorchrunParser parser;
        parser.torch_version = json.value("torch", "?");
        for (const auto& entry : json["options"]) {
            TorchrunOption option;
            option.dest = entry.at("dest").get<std::string>();
            option.spellings = entry.at("spellings").get<std::vector<std::string>>();
            option.takes_value = entry.at("takes_value").get<bool>();
            if (!entry.at("choices").is_null())
                option.choices = entry.at("choices").get<std::vector<std::string>>();
            parser.options.push_back(std::move(option));
        }
        return parser;
    }

    std::string skip_reason;
};

// Every spelling of every option torchrun's parser lists, with every choice (or
// a valid value of the table below), given to `ddprun --dry-run` as a torchrun
// user writes it (`--opt=value`, `--opt value`, `-r value`; flags bare): each is
// accepted. A refusal is listed with ddprun's error line; an option that takes a
// value the table has none for fails by name, so a new torchrun option cannot
// slip past.
TEST_F(TorchrunOptions, EveryOptionTorchrunListsIsAccepted) {
    auto parser = read_torchrun_parser();
    if (!skip_reason.empty()) GTEST_SKIP() << skip_reason;
    ASSERT_TRUE(parser);
    ASSERT_FALSE(parser->options.empty());

    // A valid value for each of torchrun's options that takes any value (those
    // with choices are given each choice instead), by torchrun's dest name.
    const std::map<std::string, std::string> k_values = {
        {"nnodes", "1"},
        {"nproc_per_node", "1"},
        {"node_rank", "0"},
        {"master_addr", "127.0.0.1"},
        {"master_port", "0"},
        {"local_addr", "127.0.0.1"},
        {"rdzv_backend", "static"},
        {"rdzv_endpoint", "127.0.0.1:0"},
        {"rdzv_id", "job"},
        {"rdzv_conf", "join_timeout=5"},
        {"max_restarts", "0"},
        {"monitor_interval", "0.1"},
        {"role", "r"},
        {"log_dir", path("logs")},
        {"redirects", "0"},
        {"tee", "0"},
        {"local_ranks_filter", "0"},
        {"log_line_prefix_template", "${rank}: "},
        {"duplicate_stdout_filters", "x"},
        {"duplicate_stderr_filters", "x"},
        {"event_log_handler", "null"},
        {"logs_specs", "default"},
        {"signals_to_handle", "SIGTERM"},
        {"shutdown_timeout", "5"},
    };
    // Options that print something and exit rather than start a job: run alone.
    const std::set<std::string> k_prints_and_exits = {"print_completion"};
    // The newest torchrun's other options (flags and choices, which need no
    // value here): only to name those an older torchrun does not list.
    const std::set<std::string> k_flags_and_choices = {
        "standalone",   "module",       "no_python",         "run_path",
        "start_method", "numa_binding", "virtual_local_rank"};

    // --numa-binding binds each worker near its GPU: on a machine without one
    // (these build machines) ddprun refuses every mode for the machine's sake.
    // That passes, as long as the refusal is about the machine, not the flag or
    // the mode; on a machine with GPUs it has to succeed.
    auto refused_for_the_machine = [](const RunResult& r) {
        return r.exit_code == 2 &&
               (contains(r.err, "no GPU was found") || contains(r.err, "PCI bus id is unknown")) &&
               !contains(r.err, "unknown mode") && !contains(r.err, "unknown flag") &&
               !contains(r.err, "not supported");
    };

    std::vector<std::string> refusals;
    std::set<std::string> dests_listed;
    int runs = 0;
    for (const auto& option : parser->options) {
        dests_listed.insert(option.dest);
        std::vector<std::optional<std::string>> values;
        if (!option.takes_value) {
            values = {std::nullopt};
        } else if (!option.choices.empty()) {
            values.assign(option.choices.begin(), option.choices.end());
        } else if (auto value = k_values.find(option.dest); value != k_values.end()) {
            values = {value->second};
        } else {
            ADD_FAILURE() << "torchrun " << parser->torch_version << "'s "
                          << joined(option.spellings, "/") << " (dest " << option.dest
                          << ") takes a value and this test has none for it: add a valid one to "
                             "k_values";
            continue;
        }
        for (const auto& spelling : option.spellings) {
            for (const auto& value : values) {
                // How a user gives it: bare, or `--opt=value` and `--opt value`
                // (a short option: `-r value`).
                std::vector<std::vector<std::string>> forms;
                if (!value) {
                    forms = {{spelling}};
                } else {
                    if (spelling.starts_with("--")) forms.push_back({spelling + "=" + *value});
                    forms.push_back({spelling, *value});
                }
                for (const auto& form : forms) {
                    std::vector<std::string> args;
                    RunOptions options;
                    if (k_prints_and_exits.contains(option.dest)) {
                        args = form;
                    } else {
                        args = {"--dry-run"};
                        args.insert(args.end(), form.begin(), form.end());
                        if (option.dest != "nproc_per_node") args.push_back("--nproc_per_node=1");
                        // -m's program is a module; with --dry-run nothing runs.
                        args.push_back(option.dest == "module" ? "json.tool" : "true");
                        // --numa-binding on a machine with GPUs: let it see them.
                        options.hide_machine_gpus = option.dest != "numa_binding";
                    }
                    auto r = run(args, options);
                    ++runs;
                    bool accepted = r.exit_code == 0 && !r.timed_out;
                    if (k_prints_and_exits.contains(option.dest))
                        accepted = accepted && !r.out.empty();
                    if (option.dest == "numa_binding" && refused_for_the_machine(r))
                        accepted = true;
                    if (!accepted)
                        refusals.push_back(joined(form) + ": exit " + std::to_string(r.exit_code) +
                                           ": " + error_line(r));
                }
            }
        }
    }
    // Options this torchrun predates (torch 1.13 has no --numa-binding, for one):
    // not checked here, they are against a newer torch (scripts/platform.sh sid).
    std::set<std::string> known(k_prints_and_exits);
    known.insert(k_flags_and_choices.begin(), k_flags_and_choices.end());
    for (const auto& [dest, value] : k_values) known.insert(dest);
    std::vector<std::string> not_listed;
    for (const auto& dest : known)
        if (!dests_listed.contains(dest)) not_listed.push_back(dest);
    std::printf("checked %d spellings and values of the %zu options torchrun %s lists\n", runs,
                parser->options.size(), parser->torch_version.c_str());
    if (!not_listed.empty())
        std::printf(
            "not checked here, as torchrun %s does not list them (a newer torchrun's options, "
            "checked where it runs): %s\n",
            parser->torch_version.c_str(), joined(not_listed, ", ").c_str());
    std::fflush(stdout);  // before gtest's failure text, on stderr
    EXPECT_TRUE(refusals.empty()) << refusals.size() << " of " << runs
                                  << " spellings and values of torchrun " << parser->torch_version
                                  << "'s options refused:\n  " << joined(refusals, "\n  ");
}

class TorchTitan : public IntegrationTest {};

// TorchTitan's launch line (its run_train.sh) as it is, with a stand-in for its
// training module: a package `torchtitan` on PYTHONPATH whose `train` prints
// what the launcher told it and all_reduces over gloo between the two ranks.
// Only local rank 0 reaches the console (--local-ranks-filter 0); --tee 3 with
// no --log_dir writes both ranks' streams to a directory ddprun names.
TEST_F(TorchTitan, ItsLaunchLineRunsEndToEnd) {
    if (!python_imports_torch()) GTEST_SKIP() << k_python << " cannot import torch";
    if (std::string(ddprun_test::build_paths::store_client).empty())
        GTEST_SKIP() << "built without libtorch: no c10d store for --rdzv_backend c10d";
    std::filesystem::create_directories(path("site/torchtitan"));
    write_text_file(path("site/torchtitan/__init__.py"), "");
    // destroy_process_group and os._exit: torch 1.13's gloo can deadlock at
    // interpreter exit (docs/DESIGN.md, platform facts).
    write_text_file(path("site/torchtitan/train.py"),
                    "import os, sys\n"
                    "import torch\n"
                    "import torch.distributed as dist\n"
                    "e = os.environ\n"
                    "print(f\"RANK={e['RANK']} LOCAL_RANK={e['LOCAL_RANK']} "
                    "ROLE_NAME={e['ROLE_NAME']} args={sys.argv[1:]}\", flush=True)\n"
                    "dist.init_process_group('gloo')\n"
                    "t = torch.tensor([dist.get_rank() + 1])\n"
                    "dist.all_reduce(t)\n"
                    "print(f\"all_reduce={t.item()}\", flush=True)\n"
                    "print(f\"rank {e['RANK']} on stderr\", file=sys.stderr, flush=True)\n"
                    "dist.barrier()\n"
                    "dist.destroy_process_group()\n"
                    "os._exit(0)\n");
    RunOptions options;
    options.timeout = 120s;  // two torch imports on a busy 2-core machine
    options.env = {{"PYTHONPATH", path("site")},
                   {"PYTHON_EXEC", k_python},
                   // Debian's torch 2.x has no libuv (docs/DESIGN.md); torch 1.13 ignores it.
                   {"USE_LIBUV", "0"},
                   // Where ddprun makes the log directory --tee asks for: in the test's own.
                   {"TMPDIR", m_dir}};
    auto r = run({"--nproc_per_node=2", "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
                  "--local-ranks-filter", "0", "--role", "rank", "--tee", "3", "-m",
                  "torchtitan.train", "--job.config_file", "./train_configs/debug_model.toml"},
                 options);
    ASSERT_EQ(r.exit_code, 0) << r.describe();

    const std::string args = "args=['--job.config_file', './train_configs/debug_model.toml']";
    auto expected = [&](int rank) {
        return std::vector<std::string>{"RANK=" + std::to_string(rank) + " LOCAL_RANK=" +
                                            std::to_string(rank) + " ROLE_NAME=rank " + args,
                                        "all_reduce=3"};
    };
    auto has_lines = [](const std::vector<std::string>& lines,
                        const std::vector<std::string>& wanted) {
        for (const auto& line : wanted)
            if (std::find(lines.begin(), lines.end(), line) == lines.end()) return false;
        return true;
    };

    // The console: local rank 0's lines only (torch's own libraries may add some
    // of their own, e.g. UCX's in a chroot).
    auto out = lines_by_rank(r.out);
    auto err = lines_by_rank(r.err);
    EXPECT_TRUE(has_lines(out[0], expected(0))) << r.describe();
    EXPECT_TRUE(has_lines(err[0], {"rank 0 on stderr"})) << r.describe();
    for (const auto& [rank, lines] : out) EXPECT_EQ(rank, 0) << r.describe();
    for (const auto& [rank, lines] : err) EXPECT_EQ(rank, 0) << r.describe();
    EXPECT_FALSE(contains(r.out + r.err, "RANK=1")) << r.describe();

    // The log directory ddprun announced, with both ranks' streams under
    // <run id>/attempt_0/<local rank>/ (torchrun's layout).
    const std::string announced = "worker logs go to ";
    auto at = r.err.find(announced);
    ASSERT_NE(at, std::string::npos) << r.describe();
    auto end = r.err.find('\n', at);
    const std::string log_dir = r.err.substr(at + announced.size(), end - at - announced.size());
    EXPECT_TRUE(log_dir.starts_with(m_dir + "/")) << log_dir;
    std::map<std::string, std::string> files;  // "<local rank>/stdout.log" -> its text
    for (const auto& entry : std::filesystem::recursive_directory_iterator(log_dir)) {
        auto file = entry.path();
        if (entry.is_regular_file() && file.parent_path().parent_path().filename() == "attempt_0")
            files[file.parent_path().filename().string() + "/" + file.filename().string()] =
                read_text_file(file.string());
    }
    for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE("local rank " + std::to_string(rank));
        const std::string dir = std::to_string(rank);
        ASSERT_TRUE(files.contains(dir + "/stdout.log")) << log_dir << ": " << r.describe();
        ASSERT_TRUE(files.contains(dir + "/stderr.log")) << log_dir << ": " << r.describe();
        EXPECT_TRUE(has_lines(non_empty_lines(files[dir + "/stdout.log"]), expected(rank)))
            << files[dir + "/stdout.log"];
        EXPECT_TRUE(contains(files[dir + "/stderr.log"], "rank " + dir + " on stderr"))
            << files[dir + "/stderr.log"];
    }
}

}  // namespace
}  // namespace ddprun_it
