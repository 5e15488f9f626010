// Harness for the integration tests: runs the real ddprun binary the way a
// user does (own process group, captured stdout/stderr, signals from outside)
// and checks afterwards that no process of the job survived it. Every wait is
// bounded, so a hanging ddprun fails a test instead of stalling the suite.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "support/build_paths.hpp"

namespace ddprun_it {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// How long one ddprun run may take before the test calls it a hang.
constexpr Milliseconds k_hang_guard = 60s;
// How long processes left behind by a SIGKILLed ddprun may take to go away.
constexpr Milliseconds k_orphan_grace = 10s;

inline const std::string k_ddprun = ddprun_test::build_paths::ddprun_binary;
inline const std::string k_fake_worker = ddprun_test::build_paths::fake_worker;
inline const std::string k_examples_dir = ddprun_test::build_paths::examples_dir;
inline const std::string k_python = "/usr/bin/python3";

struct RunOptions {
    // The executable to run instead of ddprun (a scheduler's client that starts
    // ddprun itself: srun, sbatch, mpirun); empty: ddprun.
    std::string program;
    std::vector<std::pair<std::string, std::string>> env;  // set or override
    std::vector<std::string> unset_env;                    // remove from the inherited env
    Milliseconds timeout = k_hang_guard;
    std::string cwd;  // empty: the test's cwd
    // SIGKILL the process when the test binary dies (PR_SET_PDEATHSIG), for
    // clients that would otherwise wait on for a cluster the crash took down
    // (srun, mpirun). Start such a process from the main thread: the signal
    // fires when the thread that forked it ends.
    bool dies_with_test = false;
    // On a machine with NVIDIA GPUs, CUDA_VISIBLE_DEVICES="" (no device) unless
    // the test sets it, so the job's shape does not depend on the machine.
    bool hide_machine_gpus = true;
    // ddprun's stdin is a pipe the test writes to (DdprunProcess::write_stdin) and
    // closes (close_stdin), as a --hosts launcher's ssh channel is; else /dev/null.
    bool stdin_pipe = false;
    // Runs right after ddprun is reaped (after the fixture's own snapshot): a
    // test's check of what the world looked like the moment this ddprun exited,
    // e.g. whether another node's workers had finished by then.
    std::function<void()> after_exit;
};

struct RunResult {
    int exit_code = -1;  // the exit status, or 128+N when ddprun died of signal N
    std::string out;
    std::string err;
    bool timed_out = false;        // the hang guard fired and the group was SIGKILLed
    bool pipes_left_open = false;  // someone still held ddprun's stdout/stderr after it exited
    Milliseconds elapsed{0};
    Clock::time_point exited_at{};  // when the harness saw ddprun exit (reaped)

    // Everything a failure message needs.
    std::string describe() const;
};

// ddprun's environment: the test's own, minus everything that would change what
// ddprun or a worker does (DDPRUN_*, PET_*, torch variables, CUDA_VISIBLE_DEVICES,
// PYTHONUNBUFFERED, ...), with USE_LIBUV=0 (Debian's torch 2.x has no libuv), plus
// `options.env`.
std::vector<std::string> ddprun_environment(const RunOptions& options);

using OnExit = std::function<void(bool killed_by_harness)>;

// A running ddprun. The destructor SIGKILLs its process group if it still runs.
class DdprunProcess {
  public:
    // on_exit runs right after ddprun is reaped, before its output is drained
    // (the fixture takes its snapshot of surviving processes there). Its
    // argument is true when the harness itself SIGKILLed ddprun (hang guard,
    // or a test that ended early).
    DdprunProcess(const std::vector<std::string>& args, const RunOptions& options,
                  OnExit on_exit = {});
    ~DdprunProcess();
    DdprunProcess(const DdprunProcess&) = delete;
    DdprunProcess& operator=(const DdprunProcess&) = delete;

    pid_t pid() const { return m_pid; }
    bool running() const { return !m_reaped; }
    void send_signal(int signal) const;

    // With RunOptions::stdin_pipe: writes `text` to ddprun's stdin (false if it cannot:
    // ddprun is gone, or the pipe was closed); closes it (ddprun reads end of file).
    bool write_stdin(std::string_view text);
    void close_stdin();
    // Closes the test's ends of ddprun's stdout and stderr, as a dropped ssh
    // connection does: ddprun's writes fail with EPIPE from then on. What it
    // wrote so far stays in out_so_far()/err_so_far() and the result.
    void close_output();

    // Waits for ddprun to exit, bounded by the run's timeout (counted from the
    // start); on timeout the process group is SIGKILLed and timed_out is set.
    RunResult wait();
    // Waits at most `timeout` (and never past the hang guard) for ddprun to
    // exit; true once it has (it is reaped then; wait() collects the result).
    bool wait_exit_for(Milliseconds timeout);
    // Never blocks (except to reap what it SIGKILLs): reaps ddprun if it has
    // exited, or SIGKILLs its process group once the hang guard has passed.
    // True once ddprun is reaped.
    bool reap_if_exited();
    Clock::time_point deadline() const { return m_started + m_timeout; }

    std::string out_so_far() const;
    std::string err_so_far() const;
    // True once `needle` appeared in the stdout (or stderr) seen so far.
    bool wait_for_output(std::string_view needle, Milliseconds timeout, bool in_stderr = false);

  private:
    void read_pipes();
    void mark_reaped(bool killed_by_harness);

    pid_t m_pid = -1;
    bool m_reaped = false;
    int m_status = 0;
    bool m_timed_out = false;
    Clock::time_point m_started;
    Clock::time_point m_exited_at{};
    Milliseconds m_timeout;
    OnExit m_on_exit;
    std::function<void()> m_after_exit;

    int m_stdin_fd = -1;  // the write end of ddprun's stdin, with RunOptions::stdin_pipe
    int m_out_fd = -1;
    int m_err_fd = -1;
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    std::string m_out;
    std::string m_err;
    bool m_out_open = true;
    bool m_err_open = true;
    bool m_stop_reading = false;
    std::thread m_reader;
};

// Runs ddprun to completion.
RunResult run_ddprun(const std::vector<std::string>& args, const RunOptions& options = {},
                     OnExit on_exit = {});
// Runs argv[0] (an absolute path) with the rest as its arguments to completion,
// with ddprun's hermetic environment and bounds (a scheduler's client or tool).
RunResult run_command(const std::vector<std::string>& argv, RunOptions options = {});

// Waits for several ddprun processes at once (the agents of a multi-node job),
// each bounded by its own hang guard and reaped the moment it exits, so one
// that hangs neither delays noticing the others nor hides their exit times.
// Results in the order given.
std::vector<RunResult> wait_all(const std::vector<DdprunProcess*>& processes);

// --metrics-port: the port an agent said it serves on ("metrics at
// http://ADDR:PORT/metrics"), -1 if it did not within 20 s.
int announced_metrics_port(DdprunProcess& agent);
// A GET through curl (k_curl): the status code (0: no answer) and the body.
inline const std::string k_curl = "/usr/bin/curl";
struct HttpAnswer {
    int status = 0;
    std::string body;
};
HttpAnswer http_get(const std::string& host, int port, const std::string& path);
// Reads http://host:port/metrics until `ready` holds for its body (true) or
// `timeout` passes; `last` is the last answer either way.
bool wait_for_metrics(const std::string& host, int port,
                      const std::function<bool(const std::string&)>& ready, HttpAnswer& last,
                      Milliseconds timeout);
// Whether a Prometheus text has `sample` ("name{labels} value") as a line of its own.
bool has_sample(const std::string& text, const std::string& sample);

// Bounded polls; true when the condition held before the timeout.
bool wait_until(const std::function<bool()>& condition, Milliseconds timeout);
bool wait_for_file(const std::string& path, Milliseconds timeout);

// Output helpers.
std::vector<std::string> split_lines(std::string_view text);
// "[<rank>]: <text>" -> {rank, text}; nullopt for a line without that prefix.
std::optional<std::pair<int, std::string_view>> split_prefix(std::string_view line);
// Lines of the form "[<rank>]: <text>", by rank, in order; other lines are ignored.
std::map<int, std::vector<std::string>> lines_by_rank(std::string_view text);
// "KEY=VALUE" lines of each rank's output (fake_worker's `env`).
std::map<int, std::map<std::string, std::string>> env_by_rank(std::string_view text);
std::size_t count_occurrences(std::string_view text, std::string_view needle);

std::string read_text_file(const std::string& path);
void write_text_file(const std::string& path, const std::string& content, unsigned mode = 0644);

// Whether a TCPStore made with /usr/bin/python3's torch's defaults starts: false where
// they ask for libuv and the build has none (Debian's 2.x), or there is no torch. The
// question ddprun's plugin asks its libtorch, asked of the workers' torch (once).
bool torch_defaults_start();

// GPUs the NVIDIA driver lists under /proc (0 on the build machines).
int machine_gpu_count();

// A TCP port nothing listens on right now, outside the ephemeral range
// (support/free_port.hpp says why).
int free_port();
// True when something accepts TCP connections on host:port right now.
bool port_accepts(const std::string& host, int port);

// A process as /proc shows it.
struct ProcessInfo {
    pid_t pid = 0;
    pid_t ppid = 0;
    char state = '?';  // 'Z': a zombie
    std::string cmdline;
};
std::string describe(const std::vector<ProcessInfo>& processes);
std::optional<ProcessInfo> process_info(pid_t pid);
// Every process /proc lists now, by pid (gone ones may still be listed).
std::vector<pid_t> all_pids();
// The live (not zombie) children of `parent`.
std::vector<pid_t> children_of(pid_t parent);
// The process exists and is not a zombie.
bool process_alive(pid_t pid);

// Live (not zombie) processes whose process group or session is one of
// `leaders`. Every worker leads its own process group and a setsid()
// grandchild its own session, so passing the pids the job recorded finds what
// is left of it by process group, without relying on names or parentage.
std::vector<ProcessInfo> live_in_groups_or_sessions(const std::set<pid_t>& leaders);

// The pids fake workers (and their grandchildren) appended to `pidfile`.
std::vector<pid_t> pids_in_file(const std::string& pidfile);
// Those of them that are still alive (not zombies) and still fake_worker.
std::vector<ProcessInfo> live_fake_workers(const std::string& pidfile);

// Every test: a temp dir, the pidfile fake workers append to, and the check
// that nothing the job started outlives it.
class IntegrationTest : public ::testing::Test {
  protected:
    void SetUp() override;
    void TearDown() override;

    // A path inside the test's temp dir.
    std::string path(const std::string& name) const;

    // Run / start ddprun with FAKE_WORKER_PIDFILE set. Surviving job processes
    // are recorded right after ddprun exits and reported by TearDown.
    RunResult run(const std::vector<std::string>& args, RunOptions options = {});
    std::unique_ptr<DdprunProcess> start(const std::vector<std::string>& args,
                                         RunOptions options = {});

    // Pids fake workers recorded (workers and grandchildren).
    std::vector<pid_t> recorded_pids() const;
    // The workers among them, by the RANK they were started with.
    std::map<int, std::vector<pid_t>> recorded_workers() const;
    // Processes of the job still alive (not zombies): recorded fake workers and
    // any live child of the test process (orphans reparented to us).
    std::vector<ProcessInfo> live_job_processes() const;
    // Waits (bounded) until no process of the job is alive, reaping zombies the
    // test inherited; returns what is still alive at the end.
    std::vector<ProcessInfo> wait_job_gone(Milliseconds timeout);

    // Fails the test if a job process was alive right after ddprun exited (or
    // is alive now); then SIGKILLs and reaps whatever is left.
    void assert_no_leftovers();

    // After SIGKILLing ddprun itself, its orphans get k_orphan_grace to go
    // away instead of having to be gone the moment it died.
    void expect_orphans_to_clean_up() { m_orphans_allowed_grace = true; }

    // A service the test started itself (an etcd): a child of the test that is
    // not part of any job, so never a leftover. The test stops it by pid.
    void add_service(pid_t pid) { m_services.insert(pid); }

    std::string m_dir;
    std::string m_pidfile;

  private:
    void record_survivors();

    void on_ddprun_exit(pid_t pid, bool killed_by_harness);

    std::vector<ProcessInfo> m_survivors;  // alive right after some ddprun exited
    std::set<pid_t> m_running;             // ddprun processes this test started that still run
    bool m_orphans_allowed_grace = false;
    std::set<pid_t> m_services;
};

// fake_worker actions: every worker of the job reports ready ("<dir>/ready.<rank>");
// rank `failing` waits until all `world` workers are, then runs `failure` (pairs
// of action and argument); the others sleep far beyond any hang guard, so only
// ddprun stops them.
std::vector<std::string> fail_when_all_ready(const std::string& dir, int world, int failing,
                                             const std::vector<std::string>& failure);

// Output helpers shared by the integration suites.
bool contains(const std::string& text, const std::string& needle);
std::vector<std::string> non_empty_lines(const std::string& text);
// The lines of ddprun's stderr that are not prefixed worker output: its own
// messages and the summary box.
std::vector<std::string> ddprun_own_lines(const std::string& err);
// ddprun's own stderr lines joined: where the summary box is.
std::string ddprun_messages(const std::string& err);

}  // namespace ddprun_it
