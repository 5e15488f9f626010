// The command line is the first thing users touch: every torchrun form must be
// accepted unchanged, the program's arguments must pass through untouched, and
// every mistake must come back as one line that names the flag and the value.

#include "ddprun/cli/cli.hpp"
#include "ddprun/scheduler/scheduler_env.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <string>
#include <vector>

namespace ddprun {
namespace {

using Args = std::vector<std::string>;
using Check = std::function<void(const LaunchConfig&)>;

// The tests' signal dispositions are not the job's: no signal was ignored at the start
// (the tests may themselves run under nohup).
bool none_ignored(int) {
    return false;
}

LaunchConfig parse_ok(const Args& args, const Environment& env = {}) {
    auto parsed = parse_command_line(args, env, none_ignored);
    EXPECT_TRUE(parsed.has_value()) << (parsed ? "" : parsed.error().message);
    if (!parsed) return {};
    EXPECT_EQ(parsed->action, CommandLine::Action::Run);
    return parsed->config;
}

std::string parse_error(const Args& args, const Environment& env = {}) {
    auto parsed = parse_command_line(args, env, none_ignored);
    EXPECT_FALSE(parsed.has_value()) << "accepted: " << ::testing::PrintToString(args);
    if (parsed) return {};
    EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos)
        << "not one line: " << parsed.error().message;
    return parsed.error().message;
}

std::string dashed(std::string name) {
    for (char& c : name)
        if (c == '_') c = '-';
    return name;
}

// One value flag: its underscore name, a value, and what that value must set.
struct ValueFlagCase {
    std::string name;
    std::string value;
    Check check;
};

const std::vector<ValueFlagCase>& value_flag_cases() {
    static const std::vector<ValueFlagCase> cases = {
        {"nnodes", "2", [](const LaunchConfig& c) { EXPECT_EQ(c.nnodes, 2); }},
        {"nproc_per_node", "4",
         [](const LaunchConfig& c) {
             EXPECT_EQ(c.nproc_per_node.kind, NprocKind::Count);
             EXPECT_EQ(c.nproc_per_node.count, 4);
         }},
        {"node_rank", "0", [](const LaunchConfig& c) { EXPECT_EQ(c.node_rank, 0); }},
        {"master_addr", "10.0.0.1",
         [](const LaunchConfig& c) { EXPECT_EQ(c.master_addr, "10.0.0.1"); }},
        {"master_port", "29501", [](const LaunchConfig& c) { EXPECT_EQ(c.master_port, 29501); }},
        {"local_addr", "10.0.0.2",
         [](const LaunchConfig& c) { EXPECT_EQ(c.local_addr, "10.0.0.2"); }},
        {"rdzv_backend", "c10d", [](const LaunchConfig& c) { EXPECT_EQ(c.rdzv_backend, "c10d"); }},
        {"rdzv_endpoint", "node0:29400",
         [](const LaunchConfig& c) { EXPECT_EQ(c.rdzv_endpoint, "node0:29400"); }},
        {"rdzv_id", "job7", [](const LaunchConfig& c) { EXPECT_EQ(c.rdzv_id, "job7"); }},
        {"rdzv_conf", "join_timeout=600",
         [](const LaunchConfig& c) {
             EXPECT_EQ(c.rendezvous.join_timeout, std::chrono::seconds(600));
         }},
        {"max_restarts", "3", [](const LaunchConfig& c) { EXPECT_EQ(c.max_restarts, 3); }},
        {"monitor_interval", "5",
         [](const LaunchConfig& c) { EXPECT_EQ(c.monitor_interval, 5.0); }},
        {"shutdown_timeout", "2.5",
         [](const LaunchConfig& c) { EXPECT_EQ(c.shutdown_timeout.count(), 2500); }},
        {"signals_to_handle", "SIGTERM",
         [](const LaunchConfig& c) { EXPECT_EQ(c.stop_signals, std::vector<int>{SIGTERM}); }},
        {"start_method", "fork", [](const LaunchConfig&) {}},
        {"role", "trainer", [](const LaunchConfig& c) { EXPECT_EQ(c.role, "trainer"); }},
        {"log_dir", "/tmp/logs", [](const LaunchConfig& c) { EXPECT_EQ(c.log_dir, "/tmp/logs"); }},
        {"redirects", "3", [](const LaunchConfig& c) { EXPECT_EQ(c.redirects.all, kBoth); }},
        {"tee", "1", [](const LaunchConfig& c) { EXPECT_EQ(c.tee.all, kStdout); }},
        {"local_ranks_filter", "0,2",
         [](const LaunchConfig& c) {
             EXPECT_EQ(c.local_ranks_filter, (std::set<int>{0, 2}));
         }},
        {"log_prefix", "<{rank}> ",
         [](const LaunchConfig& c) { EXPECT_EQ(c.log_prefix, "<{rank}> "); }},
        {"numa_binding", "socket",
         [](const LaunchConfig& c) { EXPECT_EQ(c.numa_binding, NumaBinding::Socket); }},
    };
    return cases;
}

TEST(CliSpellings, EveryValueFlagInBothSpellingsWithEqualsOrSpace) {
    for (const auto& c : value_flag_cases()) {
        for (const std::string& name : {c.name, dashed(c.name)}) {
            SCOPED_TRACE("--" + name + " " + c.value);
            c.check(parse_ok({"--" + name + "=" + c.value, "./train"}));
            c.check(parse_ok({"--" + name, c.value, "./train"}));
        }
    }
}

TEST(CliSpellings, EveryTorchrunValueFlagFallsBackToPetThenDdprunVariables) {
    for (const auto& c : value_flag_cases()) {
        if (c.name == "log_prefix") continue;  // ddprun's own: no PET_ variable
        std::string upper;
        for (char ch : c.name) upper += static_cast<char>(std::toupper(ch));
        SCOPED_TRACE(upper + "=" + c.value);
        c.check(parse_ok({"./train"}, {{"PET_" + upper, c.value}}));
        c.check(parse_ok({"./train"}, {{"DDPRUN_" + upper, c.value}}));
    }
}

TEST(CliSpellings, ShortOptionsTakeTheirValueAttachedOrSeparate) {
    for (const Args& args : {Args{"-r3", "./t"}, Args{"-r", "3", "./t"}, Args{"-r=3", "./t"}}) {
        SCOPED_TRACE(::testing::PrintToString(args));
        EXPECT_EQ(parse_ok(args).redirects.all, kBoth);
    }
    LaunchConfig c = parse_ok({"-t", "0:1,1:2", "./t"});
    EXPECT_EQ(c.tee.all, kNone);
    EXPECT_EQ(c.tee.for_rank(0), kStdout);
    EXPECT_EQ(c.tee.for_rank(1), kStderr);
    EXPECT_EQ(c.tee.for_rank(2), kNone);
}

struct FlagCase {
    std::string flag;
    Check check;
};

TEST(CliSpellings, FlagsInEverySpelling) {
    const std::vector<FlagCase> cases = {
        {"--standalone", [](const LaunchConfig& c) { EXPECT_TRUE(c.standalone); }},
        {"--no_python",
         [](const LaunchConfig& c) { EXPECT_EQ(c.program_kind, ProgramKind::Executable); }},
        {"--no-python",
         [](const LaunchConfig& c) { EXPECT_EQ(c.program_kind, ProgramKind::Executable); }},
        {"--virtual_local_rank", [](const LaunchConfig& c) { EXPECT_TRUE(c.virtual_local_rank); }},
        {"--virtual-local-rank", [](const LaunchConfig& c) { EXPECT_TRUE(c.virtual_local_rank); }},
        {"--module",
         [](const LaunchConfig& c) { EXPECT_EQ(c.program_kind, ProgramKind::PythonModule); }},
        {"-m", [](const LaunchConfig& c) { EXPECT_EQ(c.program_kind, ProgramKind::PythonModule); }},
        {"--dry-run", [](const LaunchConfig& c) { EXPECT_TRUE(c.dry_run); }},
        {"--dry_run", [](const LaunchConfig& c) { EXPECT_TRUE(c.dry_run); }},
        {"--all-devices", [](const LaunchConfig& c) { EXPECT_TRUE(c.all_devices); }},
        {"--all_devices", [](const LaunchConfig& c) { EXPECT_TRUE(c.all_devices); }},
        {"--cpu-binding", [](const LaunchConfig& c) { EXPECT_TRUE(c.cpu_binding); }},
        {"--cpu_binding", [](const LaunchConfig& c) { EXPECT_TRUE(c.cpu_binding); }},
        {"--use_env", [](const LaunchConfig&) {}},
        {"--use-env", [](const LaunchConfig&) {}},
        {"-v", [](const LaunchConfig& c) { EXPECT_EQ(c.verbosity, 1); }},
        {"--verbose", [](const LaunchConfig& c) { EXPECT_EQ(c.verbosity, 1); }},
        {"-vv", [](const LaunchConfig& c) { EXPECT_EQ(c.verbosity, 2); }},
        {"-q", [](const LaunchConfig& c) { EXPECT_EQ(c.verbosity, -1); }},
        {"--quiet", [](const LaunchConfig& c) { EXPECT_EQ(c.verbosity, -1); }},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.flag);
        c.check(parse_ok({c.flag, "train.py"}));
    }
}

TEST(CliSpellings, UniquePrefixesWorkAsInArgparse) {
    EXPECT_EQ(parse_ok({"--nproc=3", "./t"}).nproc_per_node.count, 3);
    EXPECT_EQ(parse_ok({"--nproc-per", "3", "./t"}).nproc_per_node.count, 3);
    EXPECT_EQ(parse_ok({"--max_re", "2", "./t"}).max_restarts, 2);
}

TEST(CliSpellings, ValuesReachTheConfigVerbatim) {
    // CLI11 would split "[a,b]" into a list or take "-x" for a flag if it saw them raw.
    LaunchConfig c = parse_ok({"--role", "[a,b]", "--log-prefix=[{rank}] ", "--log_dir", "my logs",
                               "--local_addr", "-x", "./t"});
    EXPECT_EQ(c.role, "[a,b]");
    EXPECT_EQ(c.log_prefix, "[{rank}] ");
    EXPECT_EQ(c.log_dir, "my logs");
    EXPECT_EQ(c.local_addr, "-x");
}

TEST(CliSpellings, RepeatedFlagTakesTheLastValue) {
    EXPECT_EQ(parse_ok({"--nnodes=2", "--nnodes", "3", "./t"}).nnodes, 3);
    EXPECT_EQ(parse_ok({"-v", "-v", "-v", "./t"}).verbosity, 2);
}

TEST(CliDefaults, NothingGiven) {
    LaunchConfig c = parse_ok({"./train"});
    EXPECT_EQ(c.nnodes, 1);
    EXPECT_EQ(c.nproc_per_node.kind, NprocKind::Count);
    EXPECT_EQ(c.nproc_per_node.count, 1);
    EXPECT_EQ(c.node_rank, 0);
    EXPECT_EQ(c.master_addr, "127.0.0.1");
    EXPECT_FALSE(c.master_port.has_value());
    EXPECT_EQ(c.rdzv_backend, "static");
    EXPECT_EQ(c.rdzv_endpoint, "");
    EXPECT_EQ(c.rdzv_id, "none");
    EXPECT_FALSE(c.rendezvous.is_host.has_value());
    EXPECT_EQ(c.rendezvous.join_timeout, std::chrono::seconds(600));
    EXPECT_EQ(c.rendezvous.read_timeout, std::chrono::seconds(60));
    EXPECT_EQ(c.rendezvous.heartbeat_timeout, std::chrono::seconds(15));
    EXPECT_EQ(c.rendezvous.exit_barrier_timeout, std::chrono::seconds(300));
    EXPECT_TRUE(c.rendezvous.other.empty());
    EXPECT_FALSE(c.standalone);
    EXPECT_EQ(c.max_restarts, 0);
    EXPECT_EQ(c.shutdown_timeout.count(), 30000);
    EXPECT_EQ(c.stop_signals, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
    EXPECT_EQ(c.forward_signals, (std::vector<int>{SIGUSR1, SIGUSR2}));
    EXPECT_EQ(c.role, "default");
    EXPECT_FALSE(c.virtual_local_rank);
    EXPECT_FALSE(c.all_devices);
    EXPECT_EQ(c.numa_binding, NumaBinding::None);
    EXPECT_FALSE(c.cpu_binding);
    EXPECT_EQ(c.program_kind, ProgramKind::Executable);
    EXPECT_EQ(c.program, "./train");
    EXPECT_TRUE(c.args.empty());
    EXPECT_EQ(c.log_dir, "");
    EXPECT_EQ(c.redirects.all, kNone);
    EXPECT_EQ(c.tee.all, kNone);
    EXPECT_FALSE(c.local_ranks_filter.has_value());
    EXPECT_EQ(c.log_prefix, "[{rank}]: ");
    EXPECT_FALSE(c.dry_run);
    EXPECT_EQ(c.verbosity, 0);
}

TEST(CliDefaults, PrecedenceIsFlagThenDdprunThenPetThenDefault) {
    Environment both = {{"PET_NNODES", "2"}, {"DDPRUN_NNODES", "3"}};
    EXPECT_EQ(parse_ok({"./t"}, both).nnodes, 3);
    EXPECT_EQ(parse_ok({"--nnodes=4", "./t"}, both).nnodes, 4);
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_NNODES", "2"}}).nnodes, 2);
    // A flag given on the command line hides a bad variable entirely.
    EXPECT_EQ(parse_ok({"--nnodes=1", "./t"}, {{"PET_NNODES", "abc"}}).nnodes, 1);
    // Empty variables count as unset.
    EXPECT_EQ(parse_ok({"./t"}, {{"DDPRUN_NNODES", ""}, {"PET_NNODES", "2"}}).nnodes, 2);
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_NNODES", ""}}).nnodes, 1);
}

TEST(CliDefaults, BooleanVariables) {
    for (std::string yes : {"1", "true", "TRUE", "yes", "on"}) {
        SCOPED_TRACE(yes);
        EXPECT_TRUE(parse_ok({"./t"}, {{"PET_STANDALONE", yes}}).standalone);
        EXPECT_TRUE(parse_ok({"./t"}, {{"DDPRUN_DRY_RUN", yes}}).dry_run);
        EXPECT_TRUE(parse_ok({"./t"}, {{"DDPRUN_ALL_DEVICES", yes}}).all_devices);
        EXPECT_TRUE(parse_ok({"./t"}, {{"DDPRUN_CPU_BINDING", yes}}).cpu_binding);
        EXPECT_TRUE(parse_ok({"./t"}, {{"PET_VIRTUAL_LOCAL_RANK", yes}}).virtual_local_rank);
        EXPECT_EQ(parse_ok({"m.py"}, {{"PET_NO_PYTHON", yes}}).program_kind,
                  ProgramKind::Executable);
        EXPECT_EQ(parse_ok({"pkg"}, {{"PET_MODULE", yes}}).program_kind, ProgramKind::PythonModule);
    }
    for (std::string no : {"0", "false", "no", "off"}) {
        SCOPED_TRACE(no);
        EXPECT_FALSE(parse_ok({"./t"}, {{"PET_STANDALONE", no}}).standalone);
        EXPECT_FALSE(parse_ok({"./t"}, {{"PET_RUN_PATH", no}}).dry_run);
    }
}

TEST(CliDefaults, LogPrefixFromEnvironmentMayBeEmpty) {
    EXPECT_EQ(parse_ok({"./t"}, {{"DDPRUN_LOG_PREFIX", ""}}).log_prefix, "");
    EXPECT_EQ(parse_ok({"./t"}, {{"DDPRUN_LOG_PREFIX", "{local_rank}| "}}).log_prefix,
              "{local_rank}| ");
    EXPECT_EQ(parse_ok({"--log-prefix=", "./t"}).log_prefix, "");
    EXPECT_EQ(parse_ok({"--log-prefix", "", "./t"}).log_prefix, "");
    // PET_ is torchrun's namespace: ddprun's own flags only read DDPRUN_.
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_LOG_PREFIX", ""}}).log_prefix, "[{rank}]: ");
}

TEST(CliDefaults, LogLevelSetsVerbosityUnlessVOrQIsGiven) {
    const std::vector<std::pair<std::string, int>> levels = {
        {"DEBUG", 1}, {"debug", 1}, {"INFO", 0}, {"WARNING", -1}, {"Error", -1}, {"CRITICAL", -1}};
    for (const auto& [level, verbosity] : levels) {
        SCOPED_TRACE(level);
        EXPECT_EQ(parse_ok({"./t"}, {{"LOGLEVEL", level}}).verbosity, verbosity);
    }
    EXPECT_EQ(parse_ok({"-v", "./t"}, {{"LOGLEVEL", "WARNING"}}).verbosity, 1);
    EXPECT_EQ(parse_ok({"-q", "./t"}, {{"LOGLEVEL", "DEBUG"}}).verbosity, -1);
}

TEST(CliProgram, EverythingAfterTheProgramIsUntouched) {
    struct Case {
        Args args;
        std::string program;
        Args program_args;
    };
    const std::vector<Case> cases = {
        {{"--nproc_per_node=2", "./train", "--lr", "0.1", "-v"}, "./train", {"--lr", "0.1", "-v"}},
        {{"./train", "--nproc_per_node=4", "--nnodes", "0"},
         "./train",
         {"--nproc_per_node=4", "--nnodes", "0"}},
        {{"./train", "--help", "--version", "-h"}, "./train", {"--help", "--version", "-h"}},
        {{"--", "./train", "--", "-x"}, "./train", {"--", "-x"}},
        {{"--nnodes", "1", "--", "--weird-name"}, "--weird-name", {}},
        {{"./train", "", "a b", "--bogus="}, "./train", {"", "a b", "--bogus="}},
        {{"-r", "3", "./train", "-r", "9"}, "./train", {"-r", "9"}},
        {{"--log-prefix", "--", "./train"}, "./train", {}},
        {{"-m", "pkg.mod", "-m", "x"}, "pkg.mod", {"-m", "x"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.args));
        LaunchConfig config = parse_ok(c.args);
        EXPECT_EQ(config.program, c.program);
        EXPECT_EQ(config.args, c.program_args);
    }
    // The program's -v is not ddprun's.
    EXPECT_EQ(parse_ok({"./train", "-v"}).verbosity, 0);
    // A value that looks like a flag is still the value.
    EXPECT_EQ(parse_ok({"--log-prefix", "--", "./train"}).log_prefix, "--");
}

TEST(CliProgram, Kinds) {
    struct Case {
        Args args;
        ProgramKind kind;
    };
    const std::vector<Case> cases = {
        {{"./train"}, ProgramKind::Executable},
        {{"train.py"}, ProgramKind::PythonFile},
        {{"dir/train.py", "x.py"}, ProgramKind::PythonFile},
        {{"train.pyc"}, ProgramKind::Executable},
        {{"--no_python", "train.py"}, ProgramKind::Executable},
        {{"-m", "pkg.train"}, ProgramKind::PythonModule},
        {{"--module", "train.py"}, ProgramKind::PythonModule},
        {{"bash", "-c", "x.py"}, ProgramKind::Executable},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.args));
        EXPECT_EQ(parse_ok(c.args).program_kind, c.kind);
    }
}

TEST(CliShape, NodesAndRanks) {
    EXPECT_EQ(parse_ok({"--nnodes=2:2", "./t"}).nnodes, 2);
    EXPECT_EQ(parse_ok({"--nnodes=1", "./t"}).node_rank, 0);
    EXPECT_FALSE(parse_ok({"--nnodes=2", "./t"}).node_rank.has_value());
    EXPECT_EQ(parse_ok({"--nnodes=2", "--node_rank=1", "./t"}).node_rank, 1);
    EXPECT_EQ(parse_ok({"--node_rank", "1", "./t"}, {{"PET_NNODES", "4"}}).node_rank, 1);
    EXPECT_EQ(parse_ok({"--nproc_per_node=gpu", "./t"}).nproc_per_node.kind, NprocKind::Gpu);
    EXPECT_EQ(parse_ok({"--nproc_per_node=cpu", "./t"}).nproc_per_node.kind, NprocKind::Cpu);
    EXPECT_EQ(parse_ok({"--nproc_per_node=auto", "./t"}).nproc_per_node.kind, NprocKind::Auto);
    EXPECT_EQ(parse_ok({"./t"}, {{"PET_NPROC_PER_NODE", "gpu"}}).nproc_per_node.kind,
              NprocKind::Gpu);
    EXPECT_EQ(parse_ok({"--master_port=0", "./t"}).master_port, 0);
    EXPECT_EQ(parse_ok({"--master_port=65535", "./t"}).master_port, 65535);
}

TEST(CliShape, ElasticNodeCounts) {
    struct Case {
        std::vector<std::string> args;
        Environment env;
        int min, max;
        bool elastic;
    };
    for (const auto& c : std::vector<Case>{
             {{"--nnodes=1:4", "./t"}, {}, 1, 4, true},
             {{"--nnodes=2:2", "./t"}, {}, 2, 2, false},
             {{"--nnodes=3", "./t"}, {}, 3, 3, false},
             {{"--nnodes=1:1", "./t"}, {}, 1, 1, false},
             {{"./t"}, {{"PET_NNODES", "2:8"}}, 2, 8, true},
             {{"./t"}, {{"DDPRUN_NNODES", "1:3"}, {"PET_NNODES", "2:8"}}, 1, 3, true},
         }) {
        LaunchConfig config = parse_ok(c.args, c.env);
        EXPECT_EQ(config.min_nnodes, c.min) << c.args[0];
        EXPECT_EQ(config.nnodes, c.max) << c.args[0];
        EXPECT_EQ(config.elastic(), c.elastic) << c.args[0];
    }
    // As torchrun's c10d rendezvous: node ranks of an elastic job are assigned at join, so a
    // given one is ignored (and --dry-run says so).
    LaunchConfig ranked = parse_ok({"--nnodes=1:4", "--node_rank=2", "./t"});
    EXPECT_FALSE(ranked.node_rank.has_value());
    bool said = false;
    for (const auto& [name, value] : ranked.value_sources)
        if (name == "node_rank") said = value.find("ignored") != std::string::npos;
    EXPECT_TRUE(said);
    EXPECT_FALSE(
        parse_ok({"./t"}, {{"PET_NNODES", "2:8"}, {"PET_NODE_RANK", "3"}}).node_rank.has_value());
}

TEST(CliShape, StandaloneMeansOneNodeWithItsOwnStore) {
    LaunchConfig c =
        parse_ok({"--standalone", "--master_addr=10.1.1.1", "--nproc_per_node=4", "./t"});
    EXPECT_TRUE(c.standalone);
    EXPECT_EQ(c.rdzv_backend, "c10d");
    EXPECT_EQ(c.nnodes, 1);
    EXPECT_EQ(c.node_rank, 0);
    EXPECT_EQ(c.master_addr, "127.0.0.1");
    EXPECT_EQ(parse_ok({"--standalone", "--nnodes=1", "./t"}).nnodes, 1);
}

TEST(CliShape, ShutdownTimeout) {
    EXPECT_EQ(parse_ok({"--shutdown_timeout=0", "./t"}).shutdown_timeout.count(), 0);
    EXPECT_EQ(parse_ok({"--shutdown_timeout=0.25", "./t"}).shutdown_timeout.count(), 250);
    EXPECT_EQ(parse_ok({"--shutdown_timeout", "120", "./t"}).shutdown_timeout.count(), 120000);
}

TEST(CliShape, RendezvousEndpointsAndConf) {
    for (std::string endpoint :
         {"node0", "node0:0", "node0:29400", "10.0.0.1:1", "[::1]:29400", "[::1]", "::1"}) {
        SCOPED_TRACE(endpoint);
        EXPECT_EQ(parse_ok({"--rdzv_endpoint=" + endpoint, "./t"}).rdzv_endpoint, endpoint);
    }
    LaunchConfig c = parse_ok(
        {"--rdzv_conf", "join_timeout=600, is_host=0,last_call_timeout=0.5,custom=x=y,", "./t"});
    EXPECT_EQ(c.rendezvous.join_timeout, std::chrono::seconds(600));
    EXPECT_EQ(c.rendezvous.is_host, false);
    EXPECT_EQ(c.rendezvous.last_call_timeout, std::chrono::milliseconds(500));
    EXPECT_EQ(c.rendezvous.other, (std::map<std::string, std::string>{{"custom", "x=y"}}));
}

// torchrun's etcd-v2 names for TLS, and etcd's user/password: typed, not left in `other`.
TEST(CliShape, EtcdTlsAndUserOptions) {
    LaunchConfig c = parse_ok({"--rdzv_backend=etcd",
                               "--rdzv_conf=protocol=HTTPS,ca_cert=ca.pem,ssl_cert=c.pem,"
                               "ssl_cert_key=c.key,user=trainer,password_file=pw,prefix=/p/",
                               "./t"});
    const EtcdAccess& etcd = c.rendezvous.etcd;
    EXPECT_TRUE(etcd.https);
    EXPECT_EQ(etcd.ca_cert, "ca.pem");
    EXPECT_EQ(etcd.ssl_cert, "c.pem");
    EXPECT_EQ(etcd.ssl_cert_key, "c.key");
    EXPECT_EQ(etcd.user, "trainer");
    EXPECT_EQ(etcd.password_file, "pw");
    EXPECT_EQ(c.rendezvous.other, (std::map<std::string, std::string>{{"prefix", "/p/"}}));
    // Server-verified TLS needs no client certificate, nor even a CA (the system's).
    EXPECT_TRUE(parse_ok({"--rdzv_backend=etcd", "--rdzv_conf=protocol=https", "./t"})
                    .rendezvous.etcd.https);
    EXPECT_FALSE(parse_ok({"--rdzv_backend=etcd", "--rdzv_conf=protocol=http", "./t"})
                     .rendezvous.etcd.given());
    // protocol=http is the default, harmless on any backend.
    EXPECT_FALSE(parse_ok({"--rdzv_conf=protocol=http", "./t"}).rendezvous.etcd.given());
}

// Every spelling the CLI accepts for is_host means the same to the agent (a
// bare string compare once made "yes" a client).
TEST(CliShape, IsHostTakesEverySpellingOfYesAndNo) {
    for (std::string yes : {"1", "true", "True", "yes", "YES", "on"}) {
        SCOPED_TRACE(yes);
        EXPECT_EQ(parse_ok({"--rdzv_conf=is_host=" + yes, "./t"}).rendezvous.is_host, true);
    }
    for (std::string no : {"0", "false", "no", "Off"}) {
        SCOPED_TRACE(no);
        EXPECT_EQ(parse_ok({"--rdzv_conf=is_host=" + no, "./t"}).rendezvous.is_host, false);
    }
}

TEST(CliShape, SignalsToHandleDecideWhatIsOnlyForwarded) {
    LaunchConfig c = parse_ok({"--signals_to_handle=SIGTERM,USR1", "./t"});
    EXPECT_EQ(c.stop_signals, (std::vector<int>{SIGTERM, SIGUSR1}));
    EXPECT_EQ(c.forward_signals, std::vector<int>{SIGUSR2});
    c = parse_ok({"--signals_to_handle=SIGUSR2,SIGUSR1", "./t"});
    EXPECT_TRUE(c.forward_signals.empty());
}

// nohup: a default signal ignored when ddprun starts stays ignored (and is said to);
// one the user names, by flag or variable, is handled.
TEST(CliSignals, ASignalIgnoredAtTheStartStaysIgnoredUnlessNamed) {
    auto hup_and_usr2_ignored = [](int signal) { return signal == SIGHUP || signal == SIGUSR2; };
    auto parsed = parse_command_line({"./t"}, {}, hup_and_usr2_ignored);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(parsed->config.stop_signals, (std::vector<int>{SIGTERM, SIGINT, SIGQUIT}));
    EXPECT_EQ(parsed->config.forward_signals, std::vector<int>{SIGUSR1});
    EXPECT_EQ(parsed->config.ignored_signals, (std::vector<int>{SIGHUP, SIGUSR2}));
    for (const auto& [args, env] : std::vector<std::pair<Args, Environment>>{
             {{"--signals_to_handle=SIGTERM,SIGHUP", "./t"}, {}},
             {{"./t"}, {{"PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGHUP"}}}}) {
        auto named = parse_command_line(args, env, hup_and_usr2_ignored);
        ASSERT_TRUE(named.has_value());
        EXPECT_EQ(named->config.stop_signals, (std::vector<int>{SIGTERM, SIGHUP}));
        EXPECT_EQ(named->config.forward_signals, (std::vector<int>{SIGUSR1, SIGUSR2}));
        EXPECT_TRUE(named->config.ignored_signals.empty());
    }
}

TEST(CliSignals, ParseSignalList) {
    struct Case {
        std::string text;
        std::vector<int> signals;
    };
    const std::vector<Case> cases = {
        {"SIGTERM,SIGINT,SIGHUP,SIGQUIT", {SIGTERM, SIGINT, SIGHUP, SIGQUIT}},
        {"TERM,2", {SIGTERM, 2}},
        {"sigterm, int", {SIGTERM, SIGINT}},
        {"SIGTERM,TERM,15", {SIGTERM}},
        {"SIGUSR1", {SIGUSR1}},
        {"SIGPWR,SIGWINCH", {SIGPWR, SIGWINCH}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto parsed = parse_signal_list(c.text);
        ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
        EXPECT_EQ(*parsed, c.signals);
    }
    for (std::string bad :
         {"", "SIGFOO", "TERM,,INT", "0", "-1", "999", "SIGKILL", "STOP", "9", "SIGCHLD", "SIG"}) {
        SCOPED_TRACE(bad);
        auto parsed = parse_signal_list(bad);
        ASSERT_FALSE(parsed.has_value());
        EXPECT_EQ(parsed.error().message.find('\n'), std::string::npos);
    }
    EXPECT_NE(parse_signal_list("SIGFOO").error().message.find("SIGFOO"), std::string::npos);
    EXPECT_NE(parse_signal_list("9").error().message.find("SIGKILL"), std::string::npos);
}

TEST(CliHelp, HelpAndVersion) {
    for (const Args& args : {Args{"--help"}, Args{"-h"}, Args{"--nnodes=0", "--help"},
                             Args{"--bogus", "-h"}, Args{"--hel"}}) {
        SCOPED_TRACE(::testing::PrintToString(args));
        auto parsed = parse_command_line(args, {});
        ASSERT_TRUE(parsed.has_value());
        EXPECT_EQ(parsed->action, CommandLine::Action::PrintHelp);
    }
    auto help = parse_command_line({"--help"}, {})->text;
    for (std::string word :
         {"--nproc_per_node", "--nnodes", "--rdzv_endpoint", "-m, --module", "-r, --redirects",
          "--dry-run", "--log-prefix", "--all-devices", "--numa-binding", "--cpu-binding",
          "OMP_NUM_THREADS", "PET_<NAME>", "DDPRUN_<NAME>", "LOGLEVEL", "srun --ntasks-per-node=1",
          "mpirun -N 1", "Kubeflow"}) {
        EXPECT_NE(help.find(word), std::string::npos) << word;
    }
    std::size_t start = 0;
    while (start < help.size()) {
        std::size_t end = help.find('\n', start);
        if (end == std::string::npos) end = help.size();
        EXPECT_LE(end - start, 100u) << help.substr(start, end - start);
        start = end + 1;
    }
    auto version = parse_command_line({"--version"}, {});
    ASSERT_TRUE(version.has_value());
    EXPECT_EQ(version->action, CommandLine::Action::PrintVersion);
    EXPECT_EQ(version->text, "ddprun " DDPRUN_VERSION);
    EXPECT_EQ(parse_ok({"./t", "--version"}).args, Args{"--version"});
}

// Bad input: each must be refused with one line mentioning every `mentions`.
struct RejectCase {
    Args args;
    Environment env;
    std::vector<std::string> mentions;
};

void expect_rejected(const std::vector<RejectCase>& cases) {
    for (const auto& c : cases) {
        SCOPED_TRACE(::testing::PrintToString(c.args) + " env " + ::testing::PrintToString(c.env));
        std::string message = parse_error(c.args, c.env);
        for (const std::string& mention : c.mentions)
            EXPECT_NE(message.find(mention), std::string::npos)
                << "'" << message << "' does not mention '" << mention << "'";
    }
}

TEST(CliRejects, JobShape) {
    expect_rejected({
        {{"--nnodes=0", "./t"}, {}, {"--nnodes=0", "at least 1", "e.g. --nnodes="}},
        {{"--nnodes", "-1", "./t"}, {}, {"--nnodes=-1", "at least 1"}},
        {{"--nnodes=abc", "./t"}, {}, {"--nnodes=abc", "not a number"}},
        {{"--nnodes=2.5", "./t"}, {}, {"--nnodes=2.5", "not a number"}},
        {{"--nnodes=", "./t"}, {}, {"--nnodes", "missing value"}},
        {{"--nnodes=3:2", "./t"}, {}, {"--nnodes=3:2", "greater"}},
        {{"--nnodes=1:99999999", "./t"}, {}, {"--nnodes=1:99999999", "MAX must be at most"}},
        {{"--nnodes=a:b", "./t"}, {}, {"--nnodes=a:b", "MIN:MAX"}},
        {{"--nnodes=0:0", "./t"}, {}, {"--nnodes=0:0", "at least 1"}},
        {{"--nnodes=99999999999", "./t"}, {}, {"--nnodes=99999999999", "at most"}},
        {{"--nnodes=99999999999999999999", "./t"},
         {},
         {"--nnodes=99999999999999999999", "at most"}},
        {{"--nproc_per_node=-99999999999999999999", "./t"},
         {},
         {"--nproc_per_node=-99999999999999999999", "at least 1"}},
        {{"--local_addr= ", "./t"}, {}, {"--local_addr", "must not be blank"}},
        {{"--local_addr=node 1", "./t"}, {}, {"--local_addr='node 1'", "no spaces"}},
        {{"--master_addr=a b", "./t"}, {}, {"--master_addr='a b'", "no spaces"}},
        {{"--nnodes"}, {}, {"--nnodes", "missing value"}},
        {{"--nproc_per_node=0", "./t"}, {}, {"--nproc_per_node=0", "at least 1"}},
        {{"--nproc-per-node=-2", "./t"}, {}, {"--nproc-per-node=-2", "at least 1"}},
        {{"--nproc_per_node=gpus", "./t"}, {}, {"--nproc_per_node=gpus", "gpu, cpu or auto"}},
        {{"--nproc_per_node=", "./t"}, {}, {"--nproc_per_node", "missing value"}},
        {{"--node_rank=-1", "./t"}, {}, {"--node_rank=-1", "at least 0"}},
        {{"--node_rank=1", "./t"}, {}, {"--node_rank=1", "less than the number of nodes (1)"}},
        {{"--nnodes=2", "--node_rank=2", "./t"}, {}, {"--node_rank=2", "(2)"}},
        {{"--node-rank=x", "./t"}, {}, {"--node-rank=x", "not a number"}},
        {{"--standalone", "--nnodes=2", "./t"}, {}, {"--standalone", "--nnodes=2", "conflicts"}},
        {{"--standalone", "--node_rank=1", "./t"}, {}, {"--node_rank=1"}},
        {{"--standalone", "./t"}, {{"PET_NNODES", "3"}}, {"--standalone", "PET_NNODES=3"}},
    });
}

TEST(CliRejects, PortsAndRendezvous) {
    expect_rejected({
        {{"--master_port=-1", "./t"}, {}, {"--master_port=-1", "0-65535"}},
        {{"--master_port=65536", "./t"}, {}, {"--master_port=65536", "0-65535"}},
        {{"--master-port=http", "./t"}, {}, {"--master-port=http", "not a number"}},
        {{"--master_addr=", "./t"}, {}, {"--master_addr", "empty"}},
        {{"--rdzv_endpoint=node0:70000", "./t"}, {}, {"--rdzv_endpoint=node0:70000", "70000"}},
        {{"--rdzv_endpoint=node0:abc", "./t"}, {}, {"--rdzv_endpoint=node0:abc", "abc"}},
        {{"--rdzv_endpoint=node0:-1", "./t"}, {}, {"--rdzv_endpoint=node0:-1", "0-65535"}},
        {{"--rdzv_endpoint=:29400", "./t"}, {}, {"--rdzv_endpoint=:29400", "host"}},
        {{"--rdzv_endpoint=[::1", "./t"}, {}, {"--rdzv_endpoint=[::1", "]"}},
        {{"--rdzv_endpoint=[::1]x", "./t"}, {}, {"--rdzv_endpoint=[::1]x", ":PORT"}},
        {{"--rdzv_backend=etcd-v2", "./t"}, {}, {"--rdzv_backend=etcd-v2", "v3 API", "=etcd"}},
        {{"--rdzv_endpoint=h1:2379,h2:2379", "./t"},
         {},
         {"--rdzv_endpoint=h1:2379,h2:2379", "etcd cluster", "--rdzv_backend=etcd"}},
        {{"--rdzv_backend=etcd", "--rdzv_endpoint=h1:2379,", "./t"},
         {},
         {"--rdzv_endpoint", "an empty endpoint"}},
        {{"--rdzv_backend=etcd", "--rdzv_endpoint=h1:2379,h2:x", "./t"}, {}, {"h2:x", "port x"}},
        {{"--rdzv_backend=zmq", "./t"}, {}, {"--rdzv_backend=zmq", "static, c10d or etcd"}},
        {{"--rdzv_id=", "./t"}, {}, {"--rdzv_id", "empty"}},
        {{"--rdzv_conf=join_timeout", "./t"}, {}, {"--rdzv_conf=join_timeout", "KEY=VALUE"}},
        {{"--rdzv_conf==5", "./t"}, {}, {"--rdzv_conf==5", "KEY=VALUE"}},
        {{"--rdzv_conf=a=", "./t"}, {}, {"--rdzv_conf=a=", "KEY=VALUE"}},
        {{"--rdzv_conf=join_timeout=-1", "./t"}, {}, {"join_timeout=-1", "positive"}},
        {{"--rdzv_conf=read_timeout=0", "./t"}, {}, {"read_timeout=0", "positive"}},
        {{"--rdzv_conf=heartbeat_timeout=abc", "./t"}, {}, {"heartbeat_timeout=abc", "seconds"}},
        {{"--rdzv_conf=exit_barrier_timeout=inf", "./t"}, {}, {"exit_barrier_timeout=inf"}},
        {{"--rdzv_conf=close_timeout=nan", "./t"}, {}, {"close_timeout=nan"}},
        {{"--rdzv_conf=last_call_timeout=", "./t"}, {}, {"last_call_timeout"}},
        {{"--rdzv_conf=is_host=maybe", "./t"}, {}, {"is_host=maybe", "is_host"}},
    });
}

TEST(CliRejects, EtcdTlsAndUserOptions) {
    const std::string etcd = "--rdzv_backend=etcd";
    expect_rejected({
        {{etcd, "--rdzv_conf=user=u,password=hunter2", "./t"},
         {},
         {"--rdzv_conf password=...", "never taken on the command line", "password_file=PATH"}},
        {{etcd, "./t"},
         {{"PET_RDZV_CONF", "password=hunter2"}},
         {"PET_RDZV_CONF password=...", "never taken"}},
        {{etcd, "--rdzv_conf=protocol=ftp", "./t"}, {}, {"protocol must be http or https", "ftp"}},
        {{etcd, "--rdzv_conf=ca_cert=ca.pem", "./t"}, {}, {"need protocol=https"}},
        {{etcd, "--rdzv_conf=protocol=http,ssl_cert=c.pem,ssl_cert_key=c.key", "./t"},
         {},
         {"need protocol=https"}},
        {{etcd, "--rdzv_conf=protocol=https,ssl_cert=c.pem", "./t"},
         {},
         {"ssl_cert needs ssl_cert_key"}},
        {{etcd, "--rdzv_conf=protocol=https,ssl_cert_key=c.key", "./t"},
         {},
         {"ssl_cert_key needs ssl_cert"}},
        {{etcd, "--rdzv_conf=user=u", "./t"}, {}, {"user needs password_file"}},
        {{etcd, "--rdzv_conf=password_file=pw", "./t"}, {}, {"password_file needs user"}},
        {{"--rdzv_backend=c10d", "--rdzv_conf=protocol=https", "./t"},
         {},
         {"are for the etcd backend", "--rdzv_backend=etcd"}},
        {{"--rdzv_conf=user=u,password_file=pw", "./t"}, {}, {"are for the etcd backend"}},
    });
    // The password is not printed back.
    auto rejected = parse_command_line({etcd, "--rdzv_conf=password=hunter2", "./t"}, {});
    ASSERT_FALSE(rejected.has_value());
    EXPECT_EQ(rejected.error().exit_code, 2);
    EXPECT_EQ(rejected.error().message.find("hunter2"), std::string::npos)
        << rejected.error().message;
}

TEST(CliRejects, Supervision) {
    expect_rejected({
        {{"--max_restarts=-1", "./t"}, {}, {"--max_restarts=-1", "at least 0"}},
        {{"--max-restarts=x", "./t"}, {}, {"--max-restarts=x", "not a number"}},
        {{"--monitor_interval=0", "./t"}, {}, {"--monitor_interval=0", "more than 0"}},
        {{"--monitor_interval=-1", "./t"}, {}, {"--monitor_interval=-1", "more than 0"}},
        {{"--monitor_interval=fast", "./t"}, {}, {"--monitor_interval=fast", "not a number"}},
        {{"--shutdown_timeout=-1", "./t"}, {}, {"--shutdown_timeout=-1", "negative"}},
        {{"--shutdown_timeout=soon", "./t"}, {}, {"--shutdown_timeout=soon", "not a number"}},
        {{"--shutdown_timeout=inf", "./t"}, {}, {"--shutdown_timeout=inf"}},
        {{"--shutdown_timeout=nan", "./t"}, {}, {"--shutdown_timeout=nan"}},
        {{"--shutdown_timeout=1e300", "./t"}, {}, {"--shutdown_timeout=1e300", "too large"}},
        {{"--signals_to_handle=SIGTERM,SIGFOO", "./t"},
         {},
         {"--signals_to_handle=SIGTERM,SIGFOO", "SIGFOO"}},
        {{"--signals_to_handle=SIGKILL", "./t"},
         {},
         {"--signals_to_handle=SIGKILL", "cannot be handled"}},
        {{"--signals_to_handle=", "./t"}, {}, {"--signals_to_handle", "no signals"}},
        {{"--start_method=thread", "./t"}, {}, {"--start_method=thread", "spawn"}},
        {{"--hang-timeout=-1", "./t"}, {}, {"--hang-timeout=-1", "negative"}},
        {{"--hang-timeout=soon", "./t"}, {}, {"--hang-timeout=soon", "not a number"}},
        {{"--hang-timeout-first=0", "--hang-timeout=5", "./t"},
         {},
         {"--hang-timeout-first=0", "more than 0"}},
        {{"--hang-timeout-first=60", "./t"},
         {},
         {"--hang-timeout-first=60", "needs --hang-timeout", "add --hang-timeout=SECS"}},
        {{"./t"}, {{"DDPRUN_HANG_TIMEOUT", "x"}}, {"DDPRUN_HANG_TIMEOUT=x", "not a number"}},
        {{"--health-check=", "./t"}, {}, {"--health-check", "empty"}},
        {{"--health-check=nhc", "--health-check-timeout=0", "./t"},
         {},
         {"--health-check-timeout=0", "more than 0"}},
        {{"--health-check-timeout=5", "./t"},
         {},
         {"--health-check-timeout=5", "needs --health-check", "add --health-check=CMD"}},
        {{"./t"},
         {{"DDPRUN_HEALTH_CHECK", "nhc"}, {"DDPRUN_HEALTH_CHECK_TIMEOUT", "soon"}},
         {"DDPRUN_HEALTH_CHECK_TIMEOUT=soon", "not a number"}},
    });
}

// --health-check CMD (or DDPRUN_HEALTH_CHECK), bounded by --health-check-timeout (60 s).
TEST(CliParses, HealthCheck) {
    EXPECT_EQ(parse_ok({"./t"}).health_check, "");
    auto c = parse_ok({"--health-check", "nhc -t 30 MARK_OFFLINE=0", "./t"});
    EXPECT_EQ(c.health_check, "nhc -t 30 MARK_OFFLINE=0");
    EXPECT_EQ(c.health_check_timeout.count(), 60000);
    Environment env{{"DDPRUN_HEALTH_CHECK", "/site/gpu-ok"},
                    {"DDPRUN_HEALTH_CHECK_TIMEOUT", "2.5"}};
    c = parse_ok({"./t"}, env);
    EXPECT_EQ(c.health_check, "/site/gpu-ok");
    EXPECT_EQ(c.health_check_timeout.count(), 2500);
}

// --metrics-port PORT (or DDPRUN_METRICS_PORT); 0 picks a free one; absent: off.
TEST(CliParses, MetricsPort) {
    EXPECT_FALSE(parse_ok({"./t"}).metrics_port);
    EXPECT_EQ(parse_ok({"--metrics-port=9400", "./t"}).metrics_port, 9400);
    EXPECT_EQ(parse_ok({"--metrics_port", "0", "./t"}).metrics_port, 0);
    EXPECT_EQ(parse_ok({"./t"}, Environment{{"DDPRUN_METRICS_PORT", "9401"}}).metrics_port, 9401);
    expect_rejected({
        {{"--metrics-port=70000", "./t"}, {}, {"--metrics-port=70000", "0-65535"}},
        {{"--metrics-port=-1", "./t"}, {}, {"--metrics-port=-1", "0-65535"}},
        {{"./t"}, {{"DDPRUN_METRICS_PORT", "web"}}, {"DDPRUN_METRICS_PORT=web"}},
    });
}

// --hang-timeout (flag or DDPRUN_HANG_TIMEOUT) and --hang-timeout-first, in seconds;
// 0 or absent: off.
TEST(CliParses, HangTimeouts) {
    EXPECT_EQ(parse_ok({"./t"}).hang_timeout.count(), 0);
    EXPECT_EQ(parse_ok({"--hang-timeout=0", "./t"}).hang_timeout.count(), 0);
    auto c = parse_ok({"--hang-timeout=2.5", "--hang_timeout_first=600", "./t"});
    EXPECT_EQ(c.hang_timeout.count(), 2500);
    EXPECT_EQ(c.hang_timeout_first, std::chrono::milliseconds(600000));
    Environment env{{"DDPRUN_HANG_TIMEOUT", "30"}};
    EXPECT_EQ(parse_ok({"./t"}, env).hang_timeout.count(), 30000);
}

TEST(CliRejects, ProgramAndWorkers) {
    expect_rejected({
        {{}, {}, {"no program"}},
        {{"--nproc_per_node=2"}, {}, {"no program"}},
        {{"--"}, {}, {"no program"}},
        {{"--", ""}, {}, {"empty"}},
        {{"-m", "--no_python", "pkg"}, {}, {"--no_python", "-m"}},
        {{"--module", "pkg"}, {{"PET_NO_PYTHON", "1"}}, {"PET_NO_PYTHON=1", "--module"}},
        {{"--run_path", "-m", "pkg"}, {}, {"-m", "--run_path", "Python file"}},
        {{"--run-path", "--no_python", "x"}, {}, {"--no_python", "--run-path"}},
        {{"--no_python", "x"}, {{"PET_RUN_PATH", "1"}}, {"PET_RUN_PATH=1", "--no_python"}},
        {{"--role=", "./t"}, {}, {"--role", "empty"}},
        {{"--role", " ", "./t"}, {}, {"--role", "empty"}},
    });
}

TEST(CliBinding, NumaModes) {
    const std::pair<std::string, NumaBinding> cases[] = {
        {"node", NumaBinding::Node},
        {"socket", NumaBinding::Socket},
        {"exclusive", NumaBinding::Exclusive},
        {"none", NumaBinding::None},
        {"NODE", NumaBinding::Node},
        {" exclusive ", NumaBinding::Exclusive},
        {"core-complex", NumaBinding::CoreComplex},
        {"core_complex", NumaBinding::CoreComplex},
    };
    for (const auto& [value, mode] : cases) {
        SCOPED_TRACE(value);
        EXPECT_EQ(parse_ok({"--numa-binding", value, "./t"}).numa_binding, mode);
        EXPECT_EQ(parse_ok({"--numa_binding=" + value, "./t"}).numa_binding, mode);
    }
    // "none" on the command line overrides a job template's variable.
    EXPECT_EQ(
        parse_ok({"--numa-binding=none", "--cpu-binding", "./t"}, {{"PET_NUMA_BINDING", "node"}})
            .numa_binding,
        NumaBinding::None);
    // --cpu-binding is ddprun's own: no PET_ variable.
    EXPECT_FALSE(parse_ok({"./t"}, {{"PET_CPU_BINDING", "1"}}).cpu_binding);
}

TEST(CliRejects, Binding) {
    expect_rejected({
        {{"--numa-binding=nodes", "./t"},
         {},
         {"--numa-binding=nodes", "node, socket, exclusive or core-complex"}},
        {{"--numa-binding=", "./t"}, {}, {"--numa-binding", "unknown mode"}},
        {{"--numa-binding"}, {}, {"--numa-binding", "missing value"}},
        {{"./t"}, {{"PET_NUMA_BINDING", "gpu"}}, {"PET_NUMA_BINDING=gpu"}},
        {{"--cpu-binding", "--numa-binding=node", "./t"},
         {},
         {"--cpu-binding", "conflicts with --numa-binding=node"}},
        {{"--cpu_binding", "./t"},
         {{"DDPRUN_NUMA_BINDING", "socket"}},
         {"--cpu_binding", "DDPRUN_NUMA_BINDING=socket"}},
        {{"--cpu-binding=1", "./t"}, {}, {"--cpu-binding=1", "takes no value"}},
        {{"./t"}, {{"DDPRUN_CPU_BINDING", "maybe"}}, {"DDPRUN_CPU_BINDING=maybe", "1 or 0"}},
    });
}

TEST(CliRejects, Output) {
    expect_rejected({
        {{"--local_ranks_filter=a", "./t"}, {}, {"--local_ranks_filter=a", "e.g."}},
        {{"--local_ranks_filter=0,,1", "./t"}, {}, {"--local_ranks_filter=0,,1"}},
        {{"--local-ranks-filter=-1", "./t"}, {}, {"--local-ranks-filter=-1"}},
        {{"--local_ranks_filter=0;1", "./t"}, {}, {"--local_ranks_filter=0;1"}},
        {{"-r", "4", "./t"}, {}, {"-r=4", "0-3"}},
        {{"-r", "a", "./t"}, {}, {"-r=a", "0-3"}},
        {{"--redirects=0:4", "./t"}, {}, {"--redirects=0:4", "LOCAL_RANK:0-3"}},
        {{"--redirects=0:", "./t"}, {}, {"--redirects=0:"}},
        {{"--redirects=x:1", "./t"}, {}, {"--redirects=x:1"}},
        {{"--redirects=0:1,0:2", "./t"}, {}, {"--redirects=0:1,0:2", "twice"}},
        {{"--redirects=0:1;1:2", "./t"}, {}, {"--redirects=0:1;1:2"}},
        {{"--tee=x", "./t"}, {}, {"--tee=x"}},
        {{"-t", "-1", "./t"}, {}, {"-t=-1"}},
        {{"-r"}, {}, {"-r", "missing value"}},
        {{"--log-prefix={bogus}", "./t"}, {}, {"--log-prefix={bogus}"}},
        {{"-q", "-v", "./t"}, {}, {"-q", "-v"}},
        {{"./t"}, {{"LOGLEVEL", "LOUD"}}, {"LOGLEVEL=LOUD", "DEBUG"}},
    });
}

TEST(CliRejects, UnknownAndMalformedFlags) {
    expect_rejected({
        {{"--nprocs_per_node=2", "./t"},
         {},
         {"--nprocs_per_node", "did you mean --nproc_per_node"}},
        {{"--master-adr", "x", "./t"}, {}, {"--master-adr", "did you mean --master_addr"}},
        {{"--standlone", "./t"}, {}, {"--standlone", "--standalone"}},
        {{"--versoin"}, {}, {"--versoin", "--version"}},
        {{"-nproc_per_node=2", "./t"}, {}, {"-nproc_per_node=2", "--nproc_per_node"}},
        {{"-master_addr=x", "./t"}, {}, {"-master_addr=x", "--master_addr"}},
        {{"--frobnicate", "./t"}, {}, {"--frobnicate", "unknown flag"}},
        {{"-x", "./t"}, {}, {"-x", "unknown flag"}},
        {{"-vx", "./t"}, {}, {"-x", "unknown flag"}},
        {{"--bogus", "3", "./t"}, {}, {"--bogus"}},
        {{"--master", "x", "./t"}, {}, {"--master", "ambiguous", "--master_addr", "--master_port"}},
        {{"--standalone=1", "./t"}, {}, {"--standalone=1", "takes no value"}},
        {{"--dry-run=false", "./t"}, {}, {"--dry-run=false", "takes no value"}},
    });
    // The unknown flag is what is reported, not a missing program.
    EXPECT_EQ(parse_error({"--frobnicate"}).find("no program"), std::string::npos);
}

TEST(CliRejects, BadEnvironmentValuesNameTheVariable) {
    expect_rejected({
        {{"./t"}, {{"PET_NNODES", "abc"}}, {"PET_NNODES=abc", "not a number", "e.g. PET_NNODES="}},
        {{"./t"}, {{"DDPRUN_NPROC_PER_NODE", "0"}}, {"DDPRUN_NPROC_PER_NODE=0", "at least 1"}},
        {{"./t"}, {{"PET_NODE_RANK", "-1"}}, {"PET_NODE_RANK=-1"}},
        {{"./t"}, {{"PET_MASTER_PORT", "99999"}}, {"PET_MASTER_PORT=99999", "0-65535"}},
        {{"./t"}, {{"PET_MAX_RESTARTS", "-2"}}, {"PET_MAX_RESTARTS=-2"}},
        {{"./t"}, {{"PET_RDZV_BACKEND", "etcd-v2"}}, {"PET_RDZV_BACKEND=etcd-v2"}},
        {{"./t"}, {{"PET_RDZV_ENDPOINT", "h:x"}}, {"PET_RDZV_ENDPOINT=h:x"}},
        {{"./t"}, {{"PET_RDZV_CONF", "oops"}}, {"PET_RDZV_CONF=oops"}},
        {{"./t"}, {{"PET_STANDALONE", "maybe"}}, {"PET_STANDALONE=maybe", "1 or 0"}},
        {{"./t"}, {{"PET_SHUTDOWN_TIMEOUT", "-5"}}, {"PET_SHUTDOWN_TIMEOUT=-5"}},
        {{"./t"}, {{"PET_MONITOR_INTERVAL", "0"}}, {"PET_MONITOR_INTERVAL=0"}},
        {{"./t"}, {{"PET_REDIRECTS", "9"}}, {"PET_REDIRECTS=9"}},
        {{"./t"}, {{"PET_TEE", "9"}}, {"PET_TEE=9"}},
        {{"./t"}, {{"PET_LOCAL_RANKS_FILTER", "a"}}, {"PET_LOCAL_RANKS_FILTER=a"}},
        {{"./t"}, {{"PET_SIGNALS_TO_HANDLE", "SIGNOPE"}}, {"PET_SIGNALS_TO_HANDLE=SIGNOPE"}},
        {{"./t"}, {{"DDPRUN_LOG_PREFIX", "{nope}"}}, {"DDPRUN_LOG_PREFIX={nope}"}},
        {{"./t"}, {{"DDPRUN_DRY_RUN", "sure"}}, {"DDPRUN_DRY_RUN=sure"}},
    });
}

TEST(CliClosestFlag, SuggestsNearbyFlagsOnly) {
    struct Case {
        std::string unknown;
        std::string suggestion;
    };
    const std::vector<Case> cases = {
        {"--nprocs_per_node", "--nproc_per_node"},
        {"--nprocs-per-node", "--nproc_per_node"},
        {"--master-adr", "--master_addr"},
        {"--master_prot", "--master_port"},
        {"--NNODES", "--nnodes"},
        {"--node_rnak=1", "--node_rank"},
        {"--dryrun", "--dry-run"},
        {"--logdir", "--log_dir"},
        {"--numa_bindng", "--numa-binding"},
        {"--cpubinding", "--cpu-binding"},
        {"--frobnicate", ""},
        {"--x", ""},
        {"", ""},
        {"--gpus", ""},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.unknown);
        EXPECT_EQ(closest_flag(c.unknown), c.suggestion);
    }
}

TEST(CliEnvironment, FromEnvp) {
    std::string a = "A=1", b = "B=x=y", empty = "EMPTY=", noeq = "NOEQ", dup = "A=2";
    std::vector<char*> envp = {a.data(), b.data(), empty.data(), noeq.data(), dup.data(), nullptr};
    Environment env = environment_from(envp.data());
    EXPECT_EQ(env, (Environment{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
    EXPECT_TRUE(environment_from(nullptr).empty());
}

using Sources = std::vector<std::pair<std::string, std::string>>;

// `srun -N2 --ntasks-per-node=1 --gres=gpu:4 ddprun ./train` on the second node.
Environment slurm_env() {
    return {
        {"SLURM_JOB_ID", "12345"},
        {"SLURM_STEP_ID", "0"},
        {"SLURM_NODEID", "1"},
        {"SLURM_PROCID", "1"},
        {"SLURM_LOCALID", "0"},
        {"SLURM_NNODES", "2"},
        {"SLURM_STEP_NUM_NODES", "2"},
        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
        {"SLURM_JOB_NODELIST", "gpu[07-08]"},
        {"SLURM_STEP_NODELIST", "gpu[07-08]"},
        {"SLURM_GPUS_ON_NODE", "4"},
        {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
    };
}

Environment with(Environment env, const Environment& set,
                 const std::vector<std::string>& unset = {}) {
    for (const auto& [name, value] : set) env[name] = value;
    for (const std::string& name : unset) env.erase(name);
    return env;
}

TEST(CliScheduler, SlurmFillsWhatTheUserLeftOpen) {
    LaunchConfig c = parse_ok({"./train"}, slurm_env());
    EXPECT_EQ(c.scheduler, "slurm");
    EXPECT_EQ(c.nnodes, 2);
    EXPECT_EQ(c.node_rank, 1);
    EXPECT_EQ(c.nproc_per_node.kind, NprocKind::Gpu);
    EXPECT_EQ(c.master_addr, "gpu07");
    EXPECT_EQ(c.master_port, job_ports(12345, 0).master_port);
    EXPECT_EQ(c.rdzv_endpoint, fmt::format("gpu07:{}", job_ports(12345, 0).store_port));
    EXPECT_EQ(c.rdzv_id, "slurm-12345.0");
    const std::string derived = "derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0";
    EXPECT_EQ(c.value_sources,
              (Sources{{"nnodes", "2 (SLURM_STEP_NUM_NODES)"},
                       {"node_rank", "1 (SLURM_NODEID)"},
                       {"nproc_per_node", "gpu (CUDA_VISIBLE_DEVICES of the Slurm step)"},
                       {"master_addr", "gpu07 (first host of SLURM_STEP_NODELIST)"},
                       {"master_port", fmt::format("20390 ({})", derived)},
                       {"rdzv_endpoint", fmt::format("gpu07:20391 ({})", derived)},
                       {"rdzv_id", fmt::format("slurm-12345.0 ({})", derived)}}));
    // Without a device list, the count Slurm gave.
    c = parse_ok({"./train"}, with(slurm_env(), {}, {"CUDA_VISIBLE_DEVICES"}));
    EXPECT_EQ(c.nproc_per_node.kind, NprocKind::Count);
    EXPECT_EQ(c.nproc_per_node.count, 4);
    EXPECT_EQ(c.value_sources[2].second, "4 (SLURM_GPUS_ON_NODE)");
    // A one-node step keeps loopback and a free port.
    c = parse_ok({"./train"},
                 with(slurm_env(), {{"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_NODEID", "0"}}));
    EXPECT_EQ(c.nnodes, 1);
    EXPECT_EQ(c.master_addr, "127.0.0.1");
    EXPECT_FALSE(c.master_port.has_value());
}

TEST(CliScheduler, FlagThenDdprunThenPetThenScheduler) {
    LaunchConfig c = parse_ok({"--nnodes=4", "--node-rank", "3", "--nproc=2",
                               "--master_addr=10.0.0.1", "--master_port=29500", "./t"},
                              slurm_env());
    EXPECT_EQ(c.scheduler, "slurm");
    EXPECT_EQ(c.nnodes, 4);
    EXPECT_EQ(c.node_rank, 3);
    EXPECT_EQ(c.nproc_per_node.count, 2);
    EXPECT_EQ(c.master_addr, "10.0.0.1");
    EXPECT_EQ(c.master_port, 29500);
    EXPECT_EQ(
        c.value_sources,
        (Sources{
            {"nnodes", "4 (flag --nnodes)"},
            {"node_rank", "3 (flag --node-rank)"},
            {"nproc_per_node", "2 (flag --nproc)"},
            {"master_addr", "10.0.0.1 (flag --master_addr)"},
            {"master_port", "29500 (flag --master_port)"},
            {"rdzv_endpoint", "10.0.0.1:20391 (derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0)"},
            {"rdzv_id", "slurm-12345.0 (derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0)"}}));

    Environment env = with(slurm_env(), {{"DDPRUN_MASTER_ADDR", "ddp-host"},
                                         {"PET_MASTER_ADDR", "pet-host"},
                                         {"PET_MASTER_PORT", "29501"},
                                         {"PET_NPROC_PER_NODE", "3"}});
    c = parse_ok({"--nnodes=2", "./t"}, env);
    EXPECT_EQ(c.master_addr, "ddp-host");
    EXPECT_EQ(c.master_port, 29501);
    EXPECT_EQ(c.nproc_per_node.count, 3);
    EXPECT_EQ(
        c.value_sources,
        (Sources{
            {"nnodes", "2 (flag --nnodes)"},
            {"node_rank", "1 (SLURM_NODEID)"},
            {"nproc_per_node", "3 (PET_NPROC_PER_NODE)"},
            {"master_addr", "ddp-host (DDPRUN_MASTER_ADDR)"},
            {"master_port", "29501 (PET_MASTER_PORT)"},
            {"rdzv_endpoint", "ddp-host:20391 (derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0)"},
            {"rdzv_id", "slurm-12345.0 (derived from SLURM_JOB_ID=12345, SLURM_STEP_ID=0)"}}));
}

TEST(CliScheduler, NoSchedulerReportsWhereEachValueCameFrom) {
    LaunchConfig c = parse_ok({"./t"});
    EXPECT_EQ(c.scheduler, "");
    EXPECT_EQ(c.value_sources, (Sources{{"nnodes", "1 (default)"},
                                        {"node_rank", "0 (default)"},
                                        {"nproc_per_node", "1 (default)"},
                                        {"master_addr", "127.0.0.1 (default)"},
                                        {"master_port", "free port (default)"}}));
    c = parse_ok({"--nnodes=2", "--nproc_per_node=gpu", "--master_port=0", "./t"},
                 {{"PET_MASTER_ADDR", "node-a"}});
    EXPECT_EQ(c.value_sources, (Sources{{"nnodes", "2 (flag --nnodes)"},
                                        {"node_rank", "assigned at rendezvous (default)"},
                                        {"nproc_per_node", "gpu (flag --nproc_per_node)"},
                                        {"master_addr", "node-a (PET_MASTER_ADDR)"},
                                        {"master_port", "free port (flag --master_port)"}}));
    c = parse_ok({"--standalone", "--master_addr=10.1.1.1", "./t"}, slurm_env());
    EXPECT_EQ(c.value_sources,
              (Sources{{"nnodes", "1 (flag --standalone)"},
                       {"node_rank", "0 (default)"},
                       {"nproc_per_node", "gpu (CUDA_VISIBLE_DEVICES of the Slurm step)"},
                       {"master_addr", "127.0.0.1 (flag --standalone)"},
                       {"master_port", "free port (default)"}}));
}

TEST(CliScheduler, DetectedValuesAreCheckedLikeFlags) {
    expect_rejected({
        // The user's --nnodes wins, and this node's Slurm rank does not fit it.
        {{"--nnodes=1", "./t"},
         slurm_env(),
         {"SLURM_NODEID=1", "less than the number of nodes (1)"}},
        {{"./t"},
         with(slurm_env(), {{"SLURM_NODEID", "2"}}),
         {"SLURM_NODEID=2", "less than the number of nodes (2)"}},
        {{"./t"},
         with(slurm_env(), {{"SLURM_GPUS_ON_NODE", "99999"}}, {"CUDA_VISIBLE_DEVICES"}),
         {"SLURM_GPUS_ON_NODE=99999", "at most"}},
        {{"./t"},
         with(slurm_env(), {{"SLURM_STEP_NUM_NODES", "100000"}}),
         {"SLURM_STEP_NUM_NODES=100000", "at most"}},
        // Refusals reach the user as one line too.
        {{"./t"},
         with(slurm_env(), {{"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}}),
         {"SLURM_STEP_TASKS_PER_NODE=4(x2)", "srun --ntasks-per-node=1"}},
        {{"./t"},
         with(slurm_env(), {{"SLURM_STEP_NODELIST", "gpu[07-"}}),
         {"SLURM_STEP_NODELIST=gpu[07-", "unclosed"}},
        {{"./t"},
         {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}},
         {"OMPI_COMM_WORLD_SIZE=2", "--master_addr"}},
    });
    // The user's values hide a scheduler variable they override.
    EXPECT_EQ(
        parse_ok({"--nproc_per_node=8", "./t"}, with(slurm_env(), {{"SLURM_GPUS_ON_NODE", "lots"}}))
            .nproc_per_node.count,
        8);
}

TEST(CliScheduler, KubeflowPyTorchJob) {
    // training-operator v1: PET_ variables plus a plain MASTER_ADDR/MASTER_PORT;
    // RANK is the pod's rank and WORLD_SIZE counts processes.
    Environment pod = {{"PET_NNODES", "2"},      {"PET_NPROC_PER_NODE", "4"},
                       {"PET_NODE_RANK", "1"},   {"MASTER_ADDR", "job-master-0"},
                       {"MASTER_PORT", "23456"}, {"RANK", "1"},
                       {"WORLD_SIZE", "8"},      {"PYTHONUNBUFFERED", "0"}};
    LaunchConfig c = parse_ok({"train.py"}, pod);
    EXPECT_EQ(c.scheduler, "kubeflow");
    EXPECT_EQ(c.nnodes, 2);
    EXPECT_EQ(c.node_rank, 1);
    EXPECT_EQ(c.nproc_per_node.count, 4);
    EXPECT_EQ(c.master_addr, "job-master-0");
    EXPECT_EQ(c.master_port, 23456);
    EXPECT_EQ(
        c.value_sources,
        (Sources{
            {"nnodes", "2 (PET_NNODES)"},
            {"node_rank", "1 (PET_NODE_RANK)"},
            {"nproc_per_node", "4 (PET_NPROC_PER_NODE)"},
            {"master_addr", "job-master-0 (MASTER_ADDR (Kubeflow))"},
            {"master_port", "23456 (MASTER_PORT (Kubeflow))"},
            {"rdzv_endpoint",
             "job-master-0:24937 (derived from the Kubeflow job name in MASTER_ADDR=job-master-0)"},
            {"rdzv_id",
             "kubeflow-job (derived from the Kubeflow job name in MASTER_ADDR=job-master-0)"}}));
    // Older operators set no PET_NODE_RANK: the pod's RANK is the node rank.
    c = parse_ok({"train.py"}, with(pod, {}, {"PET_NODE_RANK"}));
    EXPECT_EQ(c.node_rank, 1);
    EXPECT_EQ(c.value_sources[1].second, "1 (RANK (Kubeflow: the pod's rank))");
    expect_rejected({
        {{"train.py"},
         with(pod, {{"RANK", "5"}}, {"PET_NODE_RANK"}),
         {"RANK=5", "less than the number of nodes (2)"}},
        {{"train.py"}, with(pod, {{"MASTER_PORT", "99999"}}), {"MASTER_PORT=99999", "0-65535"}},
    });
    // A plain MASTER_ADDR without the operator's PET_NNODES is not read.
    c = parse_ok({"--nnodes=2", "./t"}, {{"MASTER_ADDR", "x"}, {"RANK", "1"}});
    EXPECT_EQ(c.master_addr, "127.0.0.1");
    EXPECT_FALSE(c.node_rank.has_value());
}

TEST(CliScheduler, MpirunOnePerNode) {
    Environment rank = {{"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_RANK", "2"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
                        {"MASTER_ADDR", "n0"}};
    LaunchConfig c = parse_ok({"--nproc_per_node=8", "./t"}, rank);
    EXPECT_EQ(c.scheduler, "mpi");
    EXPECT_EQ(c.nnodes, 4);
    EXPECT_EQ(c.node_rank, 2);
    EXPECT_EQ(c.master_addr, "n0");
    EXPECT_EQ(c.value_sources, (Sources{{"nnodes", "4 (OMPI_COMM_WORLD_SIZE)"},
                                        {"node_rank", "2 (OMPI_COMM_WORLD_RANK)"},
                                        {"nproc_per_node", "8 (flag --nproc_per_node)"},
                                        {"master_addr", "n0 (MASTER_ADDR)"},
                                        {"master_port", "free port (default)"}}));
}

TEST(CliFanOut, TheAgentsGetTheResolvedOptionsButNotTheLaunchersOwn) {
    LaunchConfig c = parse_ok(
        {"--hosts", "a,b:2", "--nproc_per_node=4", "--max_restarts=1", "--master_port=1234",
         "--env", "A=1", "--env", "B", "--tee=3", "-v", "--ssh-command", "ssh -p 2", "./t", "x"},
        {{"DDPRUN_HANG_TIMEOUT", "60"},
         {"PET_RDZV_CONF", "join_timeout=5"},
         {"DDPRUN_ALL_DEVICES", "0"},
         {"DDPRUN_CPU_BINDING", "1"}});
    EXPECT_TRUE(c.fan_out.given());
    EXPECT_EQ(c.fan_out.hosts, "a,b:2");
    EXPECT_EQ(c.fan_out.ssh_command, "ssh -p 2");
    EXPECT_EQ(c.fan_out.env, (Args{"A=1", "B"}));
    EXPECT_FALSE(c.fan_out.nnodes_given || c.fan_out.master_addr_given ||
                 c.fan_out.rdzv_endpoint_given || c.fan_out.rdzv_id_given);
    // Resolved here, flags or variables alike; the per-host ones and the launcher's own left out.
    EXPECT_EQ(c.fan_out.agent_options,
              (Args{"--cpu-binding", "--hang-timeout=60", "--master_port=1234", "--max_restarts=1",
                    "--rdzv_conf=join_timeout=5", "--tee=3"}));
    EXPECT_EQ(c.program, "./t");
    EXPECT_EQ(c.args, Args{"x"});

    LaunchConfig given =
        parse_ok({"--hostfile=h", "--nnodes=2", "--master_addr=10.0.0.1", "--rdzv_backend=etcd",
                  "--rdzv_endpoint=e1:2379,e2:2379", "--rdzv_id=job7", "-m", "pkg.train"});
    EXPECT_TRUE(given.fan_out.nnodes_given && given.fan_out.master_addr_given &&
                given.fan_out.rdzv_endpoint_given && given.fan_out.rdzv_id_given);
    EXPECT_EQ(given.fan_out.agent_options, (Args{"--module", "--rdzv_backend=etcd"}));
    EXPECT_EQ(given.rdzv_endpoint, "e1:2379,e2:2379");
    // The agents' own flags.
    EXPECT_TRUE(parse_ok({"--lifeline", "./t"}).lifeline);
    EXPECT_TRUE(parse_ok({"--preflight", "./t"}).preflight);
}

TEST(CliFanOut, ConflictsAreOneLine) {
    expect_rejected({
        {{"--hosts=a,b", "--node_rank=1", "./t"},
         {},
         {"--node_rank=1", "conflicts with --hosts=a,b"}},
        {{"--hosts=a,b", "./t"}, {{"PET_NODE_RANK", "0"}}, {"PET_NODE_RANK=0", "conflicts"}},
        {{"--hosts=a,b", "./t"}, slurm_env(), {"SLURM_NODEID=1", "conflicts with --hosts=a,b"}},
        {{"--hostfile=f", "--standalone", "./t"}, {}, {"--standalone", "--hostfile=f"}},
        {{"--hosts=a", "--hostfile=f", "./t"}, {}, {"--hostfile=f", "one way"}},
        {{"--hosts=a", "--nnodes=1:2", "./t"}, {}, {"--nnodes=1:2", "elastic"}},
        {{"--hosts=a", "--lifeline", "./t"}, {}, {"--lifeline", "launcher gives its agents"}},
        {{"--hosts=a", "--preflight", "./t"}, {}, {"--preflight"}},
        {{"--include=a", "./t"}, {}, {"--include=a", "--hosts or --hostfile"}},
        {{"--ssh-command=ssh", "./t"}, {}, {"--ssh-command=ssh", "--hosts or --hostfile"}},
        {{"--env", "A=1", "./t"}, {}, {"--env", "--hosts or --hostfile"}},
        {{"--hosts=a", "--env", "1A=x", "./t"}, {}, {"--env=1A=x", "not a variable name"}},
        {{"--hosts=a", "--env", "=x", "./t"}, {}, {"not a variable name"}},
        {{"--hosts=", "./t"}, {}, {"--hosts=", "must not be empty"}},
    });
}

}  // namespace
}  // namespace ddprun

namespace ddprun {
namespace {

// `ddprun status`: the job's own rendezvous options (flags, DDPRUN_/PET_ variables, a
// scheduler's), no program; --watch and --json are its own.
TEST(CliParses, Status) {
    auto line = parse_command_line(
        {"status", "--rdzv_endpoint=10.0.0.1:29400", "--rdzv_id=job", "--watch", "--json"}, {});
    ASSERT_TRUE(line) << line.error().message;
    EXPECT_EQ(line->action, CommandLine::Action::ShowStatus);
    EXPECT_TRUE(line->watch);
    EXPECT_TRUE(line->json);
    EXPECT_EQ(line->config.rdzv_endpoint, "10.0.0.1:29400");
    EXPECT_EQ(line->config.rdzv_id, "job");
    line = parse_command_line(
        {"status"}, Environment{{"PET_RDZV_ENDPOINT", "gpu01:29400"}, {"PET_RDZV_ID", "j7"}});
    ASSERT_TRUE(line) << line.error().message;
    EXPECT_FALSE(line->watch);
    EXPECT_EQ(line->config.rdzv_endpoint, "gpu01:29400");
    EXPECT_EQ(line->config.rdzv_id, "j7");
    // A program called "status" is run as ./status.
    line = parse_command_line({"./status"}, {});
    ASSERT_TRUE(line);
    EXPECT_EQ(line->action, CommandLine::Action::Run);
}

TEST(CliRejects, Status) {
    expect_rejected({
        {{"status", "./train"}, {}, {"ddprun status takes no program ('./train')"}},
        {{"status", "--rdzv_backend=zk"}, {}, {"--rdzv_backend=zk"}},
        {{"--watch", "./t"}, {}, {"--watch is for `ddprun status`"}},
        {{"--json", "./t"}, {}, {"--json is for `ddprun status`"}},
    });
}

// --straggler-fraction / --straggler-window: with --hang-timeout, whose beats give the rates.
TEST(CliParses, Stragglers) {
    auto c = parse_ok({"--hang-timeout=30", "./t"});
    EXPECT_EQ(c.straggler_fraction, 0.5);
    EXPECT_EQ(c.straggler_window, std::chrono::milliseconds(60000));
    c = parse_ok(
        {"--hang-timeout=30", "--straggler-fraction=0.25", "--straggler_window=2.5", "./t"});
    EXPECT_EQ(c.straggler_fraction, 0.25);
    EXPECT_EQ(c.straggler_window, std::chrono::milliseconds(2500));
    EXPECT_EQ(parse_ok({"--hang-timeout=30", "--straggler-fraction=0", "./t"}).straggler_fraction,
              0);
    expect_rejected({
        {{"--straggler-window=5", "./t"}, {}, {"--straggler-window=5", "needs --hang-timeout"}},
        {{"--hang-timeout=9", "--straggler-fraction=1", "./t"}, {}, {"less than 1", "e.g."}},
        {{"--hang-timeout=9", "--straggler-fraction=-0.1", "./t"}, {}, {"at least 0"}},
        {{"--hang-timeout=9", "--straggler-window=0", "./t"}, {}, {"more than 0"}},
    });
}

}  // namespace
}  // namespace ddprun
