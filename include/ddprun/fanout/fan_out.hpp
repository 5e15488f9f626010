// One command for the whole job: `ddprun --hosts h1,h2 ./train` (or
// --hostfile) starts one ddprun agent per host over ssh, all at once, and
// behaves as the job: every host's lines on one console, the job's exit code,
// Ctrl-C to every host. Why it exists: without a scheduler, users log into
// every node and type the same command with another --node_rank, or write
// their own ssh loop, which never tells one node that another failed and
// leaves workers behind when it is interrupted.
//
// The launcher runs no worker itself. Each agent gets `--lifeline`: its
// standard input is the launcher's link (the ssh channel). A line "signal N"
// on it acts as signal N (that is how Ctrl-C reaches every host); end of file
// means the launcher or its ssh connection is gone, and the agent kills its
// workers at once and tells every other node through the rendezvous. So no
// remote process is ever found by name: each agent ends its own process tree.
//
// Before anything starts, every host is asked, in parallel, to run the same
// command with `--preflight` (reachable, the same ddprun version, the program
// there, node 0's store port free); one failing host is one line and nothing
// starts anywhere.
//
// This header is the pure part (what each host runs, and what its answers
// mean); fan_out_run.cpp does the I/O.
#pragma once

#include <cstddef>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/fanout/host_plan.hpp"

namespace ddprun {

using Variables = std::vector<std::pair<std::string, std::string>>;

// What every host's command is made of, decided once before anything starts.
struct FanOutPlan {
    std::vector<PlannedHost> hosts;  // node i runs on hosts[i]
    std::vector<std::string> nproc;  // per host: its --nproc_per_node value ("4", "gpu")
    // --ssh-command's words, e.g. {"ssh", "-p", "2222"}. Without "{host}" in
    // them the launcher is ssh: BatchMode and a connect timeout are added, then
    // the host, then the command line. With "{host}" (kubectl exec {host} --
    // sh -c) each one is replaced by the host and the command line follows.
    std::vector<std::string> launcher;
    std::string remote_ddprun;         // ddprun's path on the hosts
    std::string cwd;                   // where the agents (and so the workers) run
    Variables env;                     // set for every agent, in this order
    std::vector<std::string> flags;    // every agent's options (LaunchConfig::fan_out)
    std::vector<std::string> program;  // the program and its arguments, untouched
    std::string master_addr;           // --master_addr, or the first host
    std::string endpoint;              // node 0's store: given, or master_addr:port
    std::string run_id;                // --rdzv_id, or a fresh one
    int verbosity = 0;
    // The agents read the job's secret from their lifeline's first line, before
    // anything else (job_secret.hpp): their command line gets
    // DDPRUN_RDZV_SECRET_ON_STDIN=1, never the secret, which is not in the plan.
    bool secret_on_stdin = false;
};

// Why the launcher is given a connect timeout (ssh's ConnectTimeout): an
// unreachable host must not hold the preflight for the TCP default (minutes).
constexpr int k_ssh_connect_timeout_s = 10;

// A name an environment variable may have (letters, digits, '_', not starting
// with a digit): what --env and .ddprunenv accept.
bool is_variable_name(std::string_view name);

// The words of --ssh-command, split as sh would split them (single and double
// quotes, backslash escapes; nothing is expanded). Errors: one line.
std::expected<std::vector<std::string>, std::string> split_words(std::string_view text);

// `text` as one word of a POSIX shell command line: 'text', with each ' as '\''.
// Words made only of safe characters (letters, digits, and -_./=:,@%+) stay bare
// so that the dry run reads well.
std::string shell_quote(std::string_view text);

enum class RemoteMode { Preflight, Run };

// The shell command line that host `index` runs (its login shell reads it):
//   cd -- DIR && exec env NAME=VALUE... DDPRUN --lifeline --nnodes=N
//   --node_rank=I --nproc_per_node=P --local_addr=HOST --master_addr=M
//   --rdzv_endpoint=E --rdzv_id=ID FLAGS... PROGRAM ARGS...
// Node 0's --local_addr is M (the agents take MASTER_ADDR from node 0's address).
// Run with secret_on_stdin: DDPRUN_RDZV_SECRET_ON_STDIN=1 is the last variable.
// A host narrowed by --include/--exclude also gets CUDA_VISIBLE_DEVICES=its slots.
std::string remote_command(const FanOutPlan& plan, std::size_t index, RemoteMode mode);

// The local argv that runs remote_command() on host `index`.
std::vector<std::string> host_argv(const FanOutPlan& plan, std::size_t index, RemoteMode mode);

// The variables of the launcher's environment that go to every host: names
// starting with NCCL_, PYTHON, CUDA_, TORCH, OMP_, UCX_, FI_ or MASTER_, but
// not CUDA_VISIBLE_DEVICES (the launcher's own devices mean nothing on another
// host; --include chooses theirs). Sorted by name.
Variables forwarded_variables(const Environment& env);

// A .ddprunenv file (as DeepSpeed's .deepspeed_env): one NAME=VALUE a line,
// the value verbatim to the end of the line; blank lines and lines starting
// with '#' are skipped. Errors: "PATH line N: ...: <problem> (<fix>)".
std::expected<Variables, std::string> parse_env_file(std::string_view text, std::string_view path);

// Every agent's environment, later sources winning: forwarded_variables(env),
// then each of `files` in order (home's, then the current directory's), then
// --env NAME=VALUE, or --env NAME for the launcher's own value (an error if it
// has none). One entry per name, in first-seen order.
std::expected<Variables, std::string> remote_environment(const Environment& env,
                                                         const std::vector<Variables>& files,
                                                         const std::vector<std::string>& env_flags);

// What one host's preflight said. `code` is the launcher's exit code for it:
// 75 unreachable or no (or another) ddprun there, 126/127 the program, 2 a bad
// value on that host (e.g. --nproc_per_node=gpu where there is none).
struct PreflightProblem {
    int code = 0;
    std::string reason;  // one line, without the host's name
};

// Reads one host's preflight: the exit status of host_argv(Preflight) (255:
// ssh itself failed), what it printed, and the version the launcher expects.
// Returns nothing when the host is ready.
std::optional<PreflightProblem> check_preflight(int status, std::string_view out,
                                                std::string_view err, std::string_view version,
                                                const FanOutPlan& plan);

// The first line of a preflight's answer: "ddprun-preflight VERSION".
constexpr std::string_view k_preflight_answer = "ddprun-preflight ";

// The launcher's exit code from its hosts' ssh exit statuses (255: ssh itself
// failed, e.g. the connection dropped). The agents of a job agree on one code;
// it is that code, taken from the hosts whose ssh did not fail (the most
// common one, the lowest node first on a tie); 75 when every ssh failed.
int fan_out_exit_code(const std::vector<int>& statuses);

// `ddprun --hosts ...`: plans, preflights and runs the job on its hosts (or,
// with --dry-run, prints each host's command line). The job's secret is the
// user's (job_secret.hpp) or 32 fresh random bytes; each agent gets it as the
// first line of its lifeline. Returns the exit code.
int run_fan_out(const LaunchConfig& config, const Environment& env);

}  // namespace ddprun
