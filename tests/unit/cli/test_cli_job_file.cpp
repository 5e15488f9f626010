// The job file (--config, DDPRUN_CONFIG) is a second command line: it must be
// read exactly as the flags would be, lose to a flag and win over the
// environment and the scheduler, say where each value came from, refuse what
// CLI11 would misread, and read back what --write-config wrote.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../workers/worker_fixture.hpp"
#include "ddprun/cli/cli.hpp"

namespace ddprun {
namespace {

using Args = std::vector<std::string>;
using Sources = std::vector<std::pair<std::string, std::string>>;

class CliJobFile : public ::testing::Test {
  protected:
    // Writes `text` to NAME in a fresh directory and returns its path.
    std::string file(const std::string& name, const std::string& text) {
        std::string path = (m_dir.path() / name).string();
        std::ofstream(path) << text;
        return path;
    }

    static CommandLine parse_ok(const Args& args, const Environment& env = {}) {
        auto parsed = parse_command_line(args, env);
        EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().message);
        return parsed ? *parsed : CommandLine{};
    }

    static std::string parse_error(const Args& args, const Environment& env = {}) {
        auto parsed = parse_command_line(args, env);
        EXPECT_FALSE(parsed.has_value()) << "accepted: " << ::testing::PrintToString(args);
        if (parsed) return {};
        EXPECT_EQ(parsed.error().exit_code, 2);
        EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos) << parsed.error().message;
        return parsed.error().message;
    }

    testing::TempDir m_dir;
};

TEST_F(CliJobFile, EveryKindOfOptionInEitherSpelling) {
    std::string job = file("job.toml",
                           "# a job\n"
                           "nproc-per-node = 4\n"
                           "max_restarts = 2\n"
                           "rdzv_conf = \"join_timeout=5,read_timeout=3\"\n"
                           "standalone = true\n"
                           "verbose = 2\n"
                           "tee = 3\n"
                           "redirects = \"1\"  # a comment after a value is TOML's\n"
                           "signals_to_handle = SIGTERM,SIGINT\n");
    CommandLine cl = parse_ok({"--config", job, "./t", "--config", "x"});
    const LaunchConfig& c = cl.config;
    EXPECT_EQ(c.nproc_per_node.count, 4);
    EXPECT_EQ(c.max_restarts, 2);
    EXPECT_EQ(c.rendezvous.join_timeout, std::chrono::seconds(5));
    EXPECT_EQ(c.nnodes, 1);
    EXPECT_EQ(c.verbosity, 2);
    EXPECT_EQ(c.stop_signals, (std::vector<int>{SIGTERM, SIGINT}));
    // The program's own --config is its own.
    EXPECT_EQ(c.program, "./t");
    EXPECT_EQ(c.args, (Args{"--config", "x"}));
    EXPECT_EQ(cl.config.value_sources,
              (Sources{{"nnodes", "1 (standalone at " + job + ":5)"},
                       {"node_rank", "0 (default)"},
                       {"nproc_per_node", "4 (" + job + ":2)"},
                       {"master_addr", "127.0.0.1 (standalone at " + job + ":5)"},
                       {"master_port", "free port (default)"},
                       {"config", job + " (flag --config; also sets max_restarts rdzv_conf "
                                        "redirects signals_to_handle standalone tee verbose)"}}));
}

TEST_F(CliJobFile, FlagThenFileThenDdprunThenPetThenSchedulerThenDefault) {
    std::string job = file("job.toml", "nnodes = 3\nmaster_addr = file-host\nmax_restarts = 2\n");
    const Environment env = {{"DDPRUN_MAX_RESTARTS", "5"},
                             {"PET_MASTER_ADDR", "pet-host"},
                             {"DDPRUN_NODE_RANK", "1"},
                             {"PET_NODE_RANK", "2"},
                             {"SLURM_JOB_ID", "7"},
                             {"SLURM_STEP_ID", "0"},
                             {"SLURM_NODEID", "0"},
                             {"SLURM_PROCID", "0"},
                             {"SLURM_LOCALID", "0"},
                             {"SLURM_NNODES", "2"},
                             {"SLURM_STEP_NUM_NODES", "2"},
                             {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
                             {"SLURM_JOB_NODELIST", "n[1-2]"},
                             {"SLURM_STEP_NODELIST", "n[1-2]"}};
    LaunchConfig c = parse_ok({"--config", job, "--max_restarts=1", "./t"}, env).config;
    EXPECT_EQ(c.max_restarts, 1);           // the flag over the file
    EXPECT_EQ(c.nnodes, 3);                 // the file over Slurm's 2
    EXPECT_EQ(c.master_addr, "file-host");  // the file over PET_ and Slurm's first node
    EXPECT_EQ(c.node_rank, 1);              // DDPRUN_ over PET_ over Slurm
    EXPECT_EQ(c.value_sources[0],
              (std::pair<std::string, std::string>{"nnodes", "3 (" + job + ":1)"}));
    EXPECT_EQ(c.value_sources[3],
              (std::pair<std::string, std::string>{"master_addr", "file-host (" + job + ":2)"}));

    // Without the file, the environment's values again.
    c = parse_ok({"./t"}, env).config;
    EXPECT_EQ(c.max_restarts, 5);
    EXPECT_EQ(c.master_addr, "pet-host");
    EXPECT_EQ(c.nnodes, 2);
}

TEST_F(CliJobFile, NamedByDdprunConfigOrTheLastFlag) {
    std::string one = file("one.toml", "max_restarts = 1\n");
    std::string two = file("two.ini", "max_restarts=2\n");
    EXPECT_EQ(parse_ok({"./t"}, {{"DDPRUN_CONFIG", one}}).config.max_restarts, 1);
    EXPECT_EQ(parse_ok({"--config", two, "./t"}, {{"DDPRUN_CONFIG", one}}).config.max_restarts, 2);
    EXPECT_EQ(parse_ok({"--config", one, "--config=" + two, "./t"}).config.max_restarts, 2);
    EXPECT_EQ(parse_ok({"./t"}, {{"DDPRUN_CONFIG", ""}}).config.max_restarts, 0);
    EXPECT_EQ(parse_error({"./t"}, {{"DDPRUN_CONFIG", one + ".gone"}}),
              "DDPRUN_CONFIG=" + one +
                  ".gone: cannot read it: No such file or directory (give the path of a TOML or "
                  "INI job file, e.g. one written by --write-config)");
    // --help and --version read no file: they work with a broken one.
    EXPECT_EQ(parse_ok({"--config", "/nonexistent", "--help"}).action,
              CommandLine::Action::PrintHelp);
    EXPECT_EQ(parse_ok({"--version"}, {{"DDPRUN_CONFIG", "/nonexistent"}}).action,
              CommandLine::Action::PrintVersion);
}

TEST_F(CliJobFile, EveryErrorNamesTheFileTheLineAndTheKey) {
    const std::string dir = m_dir.path().string();
    EXPECT_EQ(parse_error({"--config", dir + "/none.toml", "./t"}),
              "--config=" + dir +
                  "/none.toml: cannot read it: No such file or directory (give the path of a "
                  "TOML or INI job file, e.g. one written by --write-config)");
    EXPECT_EQ(parse_error({"--config", dir, "./t"}),
              "--config=" + dir +
                  ": cannot read it: it is a directory (give the path of a TOML or INI job file, "
                  "e.g. one written by --write-config)");

    std::string typo = file("typo.toml", "nnodes = 1\n\nnproc_per_nod = 3\n");
    EXPECT_EQ(parse_error({"--config", typo, "./t"}),
              typo + ":3: unknown key nproc_per_nod (did you mean nproc_per_node?)");
    std::string stranger = file("stranger.toml", "batch_size = 3\n");
    EXPECT_EQ(parse_error({"--config", stranger, "./t"}),
              stranger +
                  ":1: unknown key batch_size (a key is the long name of a flag of ddprun "
                  "--help, e.g. nproc_per_node = 8)");
    std::string section = file("section.toml", "nnodes = 1\n[job]\nnproc_per_node = 2\n");
    EXPECT_EQ(parse_error({"--config", section, "./t"}),
              section + ":2: [job]: a job file has no sections (write its keys at the top)");

    for (const char* key : {"dry-run", "dry_run", "help", "version", "config", "write-config",
                            "lifeline", "preflight"}) {
        std::string own = file("own.toml", fmt::format("nnodes = 1\n{} = true\n", key));
        std::string canonical = std::string(key) == "dry_run" ? "dry-run" : key;
        EXPECT_EQ(parse_error({"--config", own, "./t"}),
                  fmt::format("{}:2: {}: is for the command line, not a job file (give it as --{})",
                              own, key, canonical));
    }

    std::string bad = file("bad.toml", "max_restarts = 1\nnnodes = banana\n");
    EXPECT_EQ(parse_error({"--config", bad, "./t"}),
              bad + ":2: nnodes=banana: not a number (e.g. nnodes=2)");
    std::string flag = file("flag.toml", "standalone = maybe\n");
    EXPECT_NE(parse_error({"--config", flag, "./t"}).find(flag), std::string::npos);
    // CLI11 2.1 ends a quoted value at a '#'; 2.6 keeps it (see WriteConfigRoundTrips).
    std::string hash = file("hash.toml", "rdzv_id = \"run#3\"\n");
    if (auto read = parse_command_line({"--config", hash, "./t"}, {}))
        EXPECT_EQ(read->config.rdzv_id, "run#3");
    else
        EXPECT_EQ(read.error().message,
                  hash +
                      ":1: rdzv_id: a '#' inside a quoted value is read as a comment; give it on "
                      "the command line");
    std::string env = file("env.toml", "hosts = \"a,b\"\nenv = [\"A=1\", \"2B=x\"]\n");
    EXPECT_EQ(parse_error({"--config", env, "./t"}),
              env +
                  ":2: env=2B=x: not a variable name (write NAME or NAME=VALUE, e.g. --env "
                  "WANDB_API_KEY)");
    std::string local = file("local.toml", "env = \"A=1\"\n");
    EXPECT_EQ(parse_error({"--config", local, "./t"}),
              local +
                  ":1: env: is for a job started with --hosts or --hostfile (add one, or drop "
                  "it; a local job's workers inherit ddprun's environment)");
}

// What --write-config writes, read back, is the same job: checked through what a --hosts
// launcher gives its agents (every option resolved, in canonical form).
TEST_F(CliJobFile, WriteConfigRoundTrips) {
    const std::string out = (m_dir.path() / "written.toml").string();
    const Args options = {"--hosts",
                          "a,b:2",
                          "--nproc-per-node=4",
                          "--max_restarts=3",
                          "--rdzv_conf=join_timeout=5,read_timeout=3",
                          "--tee",
                          "3",
                          "--log_dir=/tmp/x y",
                          "--env",
                          "A=1",
                          "--env",
                          "B=two words",
                          "--cpu-binding",
                          "-vv",
                          "--signals_to_handle=SIGTERM,SIGUSR1",
                          "--master_port=1234",
                          "--ssh-command",
                          "ssh -p 2"};
    Args written = options;
    written.insert(written.end(), {"--write-config", out});
    CommandLine writer = parse_ok(written);
    EXPECT_EQ(writer.write_config, out);
    EXPECT_EQ(writer.config.program, "");  // --write-config alone starts nothing, needs none
    ASSERT_TRUE(write_job_file(out, writer.job_file));

    Args direct = options;
    direct.push_back("./t");
    LaunchConfig expected = parse_ok(direct).config;
    LaunchConfig read = parse_ok({"--config", out, "./t"}).config;
    EXPECT_EQ(read.fan_out.agent_options, expected.fan_out.agent_options);
    EXPECT_EQ(read.fan_out.env, (Args{"A=1", "B=two words"}));
    EXPECT_EQ(read.fan_out.hosts, "a,b:2");
    EXPECT_EQ(read.fan_out.ssh_command, "ssh -p 2");
    EXPECT_EQ(read.verbosity, expected.verbosity);
    EXPECT_EQ(read.stop_signals, expected.stop_signals);

    // With --dry-run the plan is made too, from the same options.
    Args dry = written;
    dry.insert(dry.end(), {"--dry-run", "./t"});
    CommandLine both = parse_ok(dry);
    EXPECT_EQ(both.job_file, writer.job_file);
    EXPECT_TRUE(both.config.dry_run);

    // Options from a job file are written again: a job file copies.
    const std::string copy = (m_dir.path() / "copy.toml").string();
    CommandLine copier = parse_ok({"--config", out, "--max_restarts=4", "--write-config", copy});
    ASSERT_TRUE(write_job_file(copy, copier.job_file));
    LaunchConfig copied = parse_ok({"--config", copy, "./t"}).config;
    EXPECT_EQ(copied.max_restarts, 4);
    EXPECT_EQ(copied.fan_out.env, read.fan_out.env);

    // What would not read back is refused when writing, not misread later.
    // CLI11 2.1 (Debian 12) reads a '#' inside quotes as a comment; 2.6 (sid)
    // reads it back whole, so there the file is written and must read back.
    const std::string hash = (m_dir.path() / "hash.toml").string();
    auto hashed = parse_command_line({"--rdzv_id", "run#3", "--write-config", hash}, {});
    if (hashed) {
        ASSERT_TRUE(write_job_file(hash, hashed->job_file));
        EXPECT_EQ(parse_ok({"--config", hash, "./t"}).config.rdzv_id, "run#3");
    } else {
        EXPECT_EQ(hashed.error().message,
                  "--write-config: rdzv_id=run#3: this CLI11 would read it back from a job file "
                  "as '\"run'; give it on the command line");
    }
    EXPECT_EQ(write_job_file(m_dir.path().string() + "/none/x.toml", "nnodes=1\n").error().message,
              "--write-config=" + m_dir.path().string() +
                  "/none/x.toml: cannot write it: No such file or directory (give a path in a "
                  "directory you can write)");
}

}  // namespace
}  // namespace ddprun
