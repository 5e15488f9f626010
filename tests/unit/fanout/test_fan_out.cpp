// `ddprun --hosts`: what each host runs, what its agents' environment holds,
// and what the hosts' answers mean. The command line a host's shell reads is
// checked here word by word (through a real sh), since a quoting mistake
// would run another program than the user's on every host.

#include "ddprun/fanout/fan_out.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "ddprun/base/exit_codes.hpp"

namespace ddprun {
namespace {

using Words = std::vector<std::string>;

FanOutPlan two_hosts() {
    FanOutPlan plan;
    plan.hosts = {{"gpu1", 4, {}}, {"gpu2", std::nullopt, {0, 2}}};
    plan.nproc = {"4", "2"};
    plan.launcher = {"ssh"};
    plan.remote_ddprun = "/opt/ddprun/bin/ddprun";
    plan.cwd = "/home/me/my job";
    plan.env = {{"NCCL_DEBUG", "INFO"}, {"WANDB_TAGS", "a b;$(x)'y"}};
    plan.flags = {"--max_restarts=2", "--log-prefix=[{rank}] "};
    plan.program = {"./train.py", "--lr", "1e-3", "it's"};
    plan.master_addr = "gpu1";
    plan.endpoint = "gpu1:23456";
    plan.run_id = "hosts-0123";
    return plan;
}

// The words a POSIX shell makes of `command` (sh -c 'printf "%s\n" ...').
Words shell_words(const std::string& command) {
    std::string script = "for w in " + command + "; do printf '%s\\0' \"$w\"; done";
    std::string quoted = shell_quote(script);
    FILE* pipe = ::popen(("sh -c " + quoted).c_str(), "r");
    Words words;
    std::string word;
    for (int c; (c = std::fgetc(pipe)) != EOF;) {
        if (c == 0) {
            words.push_back(word);
            word.clear();
        } else {
            word += static_cast<char>(c);
        }
    }
    ::pclose(pipe);
    return words;
}

TEST(FanOutQuote, EveryStringSurvivesTheShell) {
    for (std::string text : {"plain", "", "a b", "it's", "$(rm -rf /)", "`x`", "a\nb", "\\", "'",
                             "\"", "*", "~", "#x", "a;b|c&d", "{host}", "--x=1"}) {
        SCOPED_TRACE(text);
        EXPECT_EQ(shell_words(shell_quote(text)), Words{text});
    }
    EXPECT_EQ(shell_quote("--nproc_per_node=4"), "--nproc_per_node=4");
    EXPECT_EQ(shell_quote("a b"), "'a b'");
}

Words split_ok(std::string_view text) {
    auto words = split_words(text);
    return words ? *words : Words{"error: " + words.error()};
}

TEST(FanOutWords, SplitsAsShDoes) {
    EXPECT_EQ(split_ok("ssh -p 2222"), (Words{"ssh", "-p", "2222"}));
    EXPECT_EQ(split_ok("  ssh   -o 'ProxyJump=bastion host' "),
              (Words{"ssh", "-o", "ProxyJump=bastion host"}));
    EXPECT_EQ(split_ok(R"(kubectl exec {host} -- sh -c)"),
              (Words{"kubectl", "exec", "{host}", "--", "sh", "-c"}));
    EXPECT_EQ(split_ok(R"(a\ b "c \"d\" \x" '\n')"), (Words{"a b", "c \"d\" \\x", "\\n"}));
    EXPECT_EQ(split_ok("''"), Words{""});
    EXPECT_EQ(split_words("ssh 'x").error(), "the single quote at character 5 is never closed");
    EXPECT_EQ(split_words("ssh \\").error(), "it ends with a lone backslash");
    EXPECT_EQ(split_words("  ").error(), "it is empty");
}

TEST(FanOutCommand, EachHostGetsItsNodeRankSlotsAndTheSameEverythingElse) {
    FanOutPlan plan = two_hosts();
    std::string command = remote_command(plan, 1, RemoteMode::Run);
    // What the host's shell runs: cd, then exec env ... ddprun ...
    ASSERT_TRUE(command.starts_with("cd -- '/home/me/my job' && exec env ")) << command;
    Words words = shell_words(command.substr(command.find("&& exec ") + 8));
    EXPECT_EQ(words,
              (Words{"env", "NCCL_DEBUG=INFO", "WANDB_TAGS=a b;$(x)'y", "CUDA_VISIBLE_DEVICES=0,2",
                     "/opt/ddprun/bin/ddprun", "--lifeline", "--nnodes=2", "--node_rank=1",
                     "--nproc_per_node=2", "--local_addr=gpu2", "--master_addr=gpu1",
                     "--rdzv_endpoint=gpu1:23456", "--rdzv_id=hosts-0123", "--max_restarts=2",
                     "--log-prefix=[{rank}] ", "./train.py", "--lr", "1e-3", "it's"}));
    // Node 0: all its slots, so no CUDA_VISIBLE_DEVICES of the launcher's choosing.
    std::string zero = remote_command(plan, 0, RemoteMode::Preflight);
    EXPECT_EQ(zero.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << zero;
    EXPECT_NE(zero.find(" --preflight --nnodes=2 --node_rank=0 --nproc_per_node=4 "),
              std::string::npos)
        << zero;
    plan.env.clear();
    plan.verbosity = 2;
    std::string bare = remote_command(plan, 0, RemoteMode::Run);
    EXPECT_NE(bare.find("&& exec /opt/ddprun/bin/ddprun --lifeline "), std::string::npos) << bare;
    EXPECT_NE(bare.find(" -v -v "), std::string::npos) << bare;
    plan.verbosity = -1;
    EXPECT_NE(remote_command(plan, 0, RemoteMode::Run).find(" -q "), std::string::npos);
}

TEST(FanOutCommand, SshGetsBatchModeAndATimeoutATemplateGetsTheHost) {
    FanOutPlan plan = two_hosts();
    plan.launcher = {"ssh", "-p", "2222"};
    Words argv = host_argv(plan, 1, RemoteMode::Run);
    ASSERT_EQ(argv.size(), 9u);
    EXPECT_EQ(
        Words(argv.begin(), argv.end() - 1),
        (Words{"ssh", "-p", "2222", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "gpu2"}));
    EXPECT_EQ(argv.back(), remote_command(plan, 1, RemoteMode::Run));
    plan.launcher = {"kubectl", "exec", "pod-{host}", "--", "sh", "-c"};
    argv = host_argv(plan, 0, RemoteMode::Preflight);
    EXPECT_EQ(Words(argv.begin(), argv.end() - 1),
              (Words{"kubectl", "exec", "pod-gpu1", "--", "sh", "-c"}));
    EXPECT_EQ(argv.back(), remote_command(plan, 0, RemoteMode::Preflight));
}

TEST(FanOutEnvironment, PrefixesThenFilesThenFlags) {
    Environment env = {{"NCCL_IB_HCA", "mlx5"},  {"PYTHONPATH", "/src"},
                       {"CUDA_HOME", "/cuda"},   {"CUDA_VISIBLE_DEVICES", "0"},
                       {"TORCH_HOME", "/t"},     {"OMP_NUM_THREADS", "4"},
                       {"UCX_TLS", "rc"},        {"FI_PROVIDER", "efa"},
                       {"MASTER_ADDR", "x"},     {"HOME", "/root"},
                       {"SECRET_TOKEN", "s"},    {"LD_LIBRARY_PATH", "/l"},
                       {"WANDB_API_KEY", "key"}, {"NCCLX", "no"}};
    auto forwarded = forwarded_variables(env);
    Variables expected = {{"CUDA_HOME", "/cuda"},  {"FI_PROVIDER", "efa"},   {"MASTER_ADDR", "x"},
                          {"NCCL_IB_HCA", "mlx5"}, {"OMP_NUM_THREADS", "4"}, {"PYTHONPATH", "/src"},
                          {"TORCH_HOME", "/t"},    {"UCX_TLS", "rc"}};
    EXPECT_EQ(forwarded, expected);

    Variables home = {{"OMP_NUM_THREADS", "8"}, {"A", "home"}};
    Variables here = {{"A", "here"}, {"B", "x=y"}};
    auto all = remote_environment(env, {home, here}, {"WANDB_API_KEY", "B=flag", "C="});
    ASSERT_TRUE(all) << all.error();
    expected[4].second = "8";
    expected.insert(expected.end(),
                    {{"A", "here"}, {"B", "flag"}, {"WANDB_API_KEY", "key"}, {"C", ""}});
    EXPECT_EQ(*all, expected);
    EXPECT_EQ(remote_environment(env, {}, {"NOT_SET"}).error(),
              "--env NOT_SET: NOT_SET is not set here (give its value: --env NOT_SET=VALUE)");
}

TEST(FanOutEnvironment, DdprunenvFiles) {
    auto parsed =
        parse_env_file("# comment\n\nNCCL_DEBUG=INFO\r\n  WANDB_MODE = offline \nX==a=b\nEMPTY=\n",
                       "~/.ddprunenv");
    ASSERT_TRUE(parsed) << parsed.error();
    EXPECT_EQ(
        *parsed,
        (Variables{
            {"NCCL_DEBUG", "INFO"}, {"WANDB_MODE", " offline"}, {"X", "=a=b"}, {"EMPTY", ""}}));
    EXPECT_EQ(parse_env_file("A=1\nexport B=2\n", "/w/.ddprunenv").error(),
              "/w/.ddprunenv line 2: 'export B=2': not a variable name before '=' (write "
              "NAME=VALUE, one a line)");
    EXPECT_EQ(parse_env_file("\n\nNOEQUALS\n", "f").error(),
              "f line 3: 'NOEQUALS': no '=' (write NAME=VALUE, one a line)");
}

TEST(FanOutPreflight, EachAnswerIsOneLineWithTheRightCode) {
    FanOutPlan plan = two_hosts();
    const std::string ok = std::string(k_preflight_answer) + "0.1.0 nproc=4\n";
    EXPECT_FALSE(check_preflight(0, ok, "", "0.1.0", plan));
    struct Case {
        int status;
        std::string out, err;
        int code;
        std::string reason;
    };
    const Case cases[] = {
        {0, std::string(k_preflight_answer) + "0.0.9 nproc=4\n", "", exit_code::kRendezvous,
         "/opt/ddprun/bin/ddprun is ddprun 0.0.9, this one is 0.1.0 (install one of the same "
         "version)"},
        {255, "", "ssh: connect to host gpu2 port 22: Connection refused\r\n",
         exit_code::kRendezvous, "ssh: connect to host gpu2 port 22: Connection refused"},
        {255, "", "Permission denied (publickey).\n", exit_code::kRendezvous,
         "ssh: Permission denied (publickey)."},
        {255, "", "", exit_code::kRendezvous, "ssh failed (exit 255)"},
        {127, "", "sh: 1: exec: /opt/ddprun/bin/ddprun: not found\n", exit_code::kRendezvous,
         "cannot run /opt/ddprun/bin/ddprun there (sh: 1: exec: /opt/ddprun/bin/ddprun: not "
         "found): install it there, or give --remote-ddprun PATH"},
        {127, "", "ddprun: error: ./train.py: no such file\n", exit_code::kNotFound,
         "./train.py: no such file"},
        {2, "", "ddprun: error: --nproc_per_node=gpu: no GPU on this node\n", exit_code::kUsage,
         "--nproc_per_node=gpu: no GPU on this node"},
        {75, "", "ddprun: error: node 0's rendezvous port 1 is taken\n", exit_code::kRendezvous,
         "node 0's rendezvous port 1 is taken"},
        {2, "", "sh: 1: cd: can't cd to /home/me/my job\n", exit_code::kRendezvous,
         "exited 2: sh: 1: cd: can't cd to /home/me/my job"},
        // An error line with nothing after it is no message: what else it said.
        {2, "", "ddprun: error: \nsh: 1: cd: can't cd to /x\n", exit_code::kRendezvous,
         "exited 2: sh: 1: cd: can't cd to /x"},
        {0, "hello\n", "", exit_code::kRendezvous,
         "/opt/ddprun/bin/ddprun answered, but not as ddprun does (is it ddprun? install it "
         "there, or give --remote-ddprun PATH)"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.err + c.out);
        auto problem = check_preflight(c.status, c.out, c.err, "0.1.0", plan);
        ASSERT_TRUE(problem);
        EXPECT_EQ(problem->code, c.code);
        EXPECT_EQ(problem->reason, c.reason);
    }
}

TEST(FanOutExitCode, TheAgentsCodeNotSshs) {
    EXPECT_EQ(fan_out_exit_code({0, 0, 0}), 0);
    EXPECT_EQ(fan_out_exit_code({3, 3, 3}), 3);
    // A dropped connection: that host's ssh says 255, its agent and the others 137.
    EXPECT_EQ(fan_out_exit_code({137, 255, 137}), 137);
    EXPECT_EQ(fan_out_exit_code({255, 255}), exit_code::kRendezvous);
    EXPECT_EQ(fan_out_exit_code({130, 1, 1}), 1);
    EXPECT_EQ(fan_out_exit_code({130, 1}), 130);
}

}  // namespace
}  // namespace ddprun
