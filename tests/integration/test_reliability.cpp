// The reliability suite: every fault a job can meet (a worker that crashes,
// hangs, floods or misbehaves; an agent that is killed, frozen, signalled,
// loses its terminal, its stdout or its disk; a rendezvous that is broken,
// late, contested or cut; bad flags and environment), each on one agent and,
// where a second node changes what can go wrong, on two agents on loopback.
// Cases the other suites already cover are not repeated here:
// docs/reliability.md maps every fault to the test that checks it.
//
// The two-agent tests run over both rendezvous backends ("/c10d", "/etcd", or
// "<case>_c10d", "<case>_etcd": backend.hpp) wherever the fault means the same
// on both; those about the c10d store itself (its port, its host mid-join, a
// stray client of it, a partition from it) stay c10d-only, and test_etcd.cpp
// has etcd's own.
//
// What every test asserts: the exit code and the message; that no process of
// the job is left afterwards, found by process group and session (every
// worker leads its own group, a setsid() grandchild its own session) and by
// the test's subreaper children, never by name; that no line of output is
// lost or cut; and that every wait is bounded (a hang fails, it never stalls).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "backend.hpp"
#include "harness.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

constexpr int k_usage_exit = 2;
constexpr int k_rendezvous_exit = 75;
// One agent of a two-agent job: long enough to start, join and run short
// workers on a loaded 2-core machine, short enough that a node left waiting
// for something it should not wait for fails the test instead of stalling it.
constexpr Milliseconds k_node_guard = 30s;

const std::string k_store_client = ddprun_test::build_paths::store_client;

// --- output helpers -------------------------------------------------------------

// "ddprun: error: ..." lines: what ddprun says went wrong.
std::vector<std::string> error_lines(const std::string& err) {
    std::vector<std::string> lines;
    for (auto& line : ddprun_own_lines(err)) {
        if (line.starts_with("ddprun: error:")) lines.push_back(line);
    }
    return lines;
}

// Signs that ddprun crashed or dumped an exception instead of saying what is wrong.
std::string crash_sign(const std::string& text) {
    for (const char* sign :
         {"terminate called", "what():", "Segmentation fault", "Aborted", "AddressSanitizer",
          "runtime error:", "stack trace", "Traceback", "core dumped", "CLI11"}) {
        if (contains(text, sign)) return sign;
    }
    return {};
}

std::vector<std::string> numbered(const std::string& what, int count, int rank) {
    std::vector<std::string> lines;
    for (int i = 0; i < count; ++i) lines.push_back(fmt::format("{} {} rank {}", what, i, rank));
    return lines;
}

std::vector<std::string> lines_of(const std::map<int, std::vector<std::string>>& by_rank,
                                  int rank) {
    auto it = by_rank.find(rank);
    return it == by_rank.end() ? std::vector<std::string>{} : it->second;
}

// Checks that `out` holds exactly fake_worker's `flood <lines>` of each of
// `ranks`: every line whole, prefixed, in order, none missing.
void expect_flood_complete(const std::string& out, const std::vector<int>& ranks, int lines) {
    std::size_t unprefixed = 0;
    for (const auto& line : split_lines(out)) {
        if (!split_prefix(line)) ++unprefixed;
    }
    EXPECT_EQ(unprefixed, 0u) << "lines cut, merged across workers or without prefix";
    auto by_rank = lines_by_rank(out);
    for (int rank : ranks) {
        const auto& got = by_rank[rank];
        ASSERT_EQ(got.size(), static_cast<std::size_t>(lines)) << "rank " << rank;
        for (int i = 0; i < lines; ++i) {
            std::string expected = fmt::format("flood {} {} ", rank, i);
            expected.resize(99, 'x');
            ASSERT_EQ(got[static_cast<std::size_t>(i)], expected) << "rank " << rank;
        }
    }
}

std::string describe_all(const std::vector<RunResult>& results) {
    std::string text;
    for (std::size_t i = 0; i < results.size(); ++i) {
        text += fmt::format("=== agent {} ===\n{}\n", i, results[i].describe());
    }
    return text;
}

// --- fake_worker programs -----------------------------------------------------

using Action = std::vector<std::string>;  // one fake_worker action and its arguments

std::vector<std::string> flat(const std::vector<Action>& actions) {
    std::vector<std::string> words;
    for (const auto& action : actions) words.insert(words.end(), action.begin(), action.end());
    return words;
}

// `actions`, each run by worker `rank` only.
std::vector<std::string> on_rank(int rank, const std::vector<Action>& actions) {
    std::vector<std::string> words;
    for (const auto& action : actions) {
        words.insert(words.end(), {"if-rank", std::to_string(rank)});
        words.insert(words.end(), action.begin(), action.end());
    }
    return words;
}

std::vector<std::string> concat(std::vector<std::vector<std::string>> parts) {
    std::vector<std::string> all;
    for (auto& part : parts) all.insert(all.end(), part.begin(), part.end());
    return all;
}

// Every worker runs `setup` and reports ready; worker `victim` waits until all
// `world` are ready and runs `fault`; then every worker runs `rest`.
std::vector<std::string> when_all_ready(const std::string& dir, int world, int victim,
                                        const std::vector<Action>& setup,
                                        const std::vector<Action>& fault,
                                        const std::vector<Action>& rest) {
    std::vector<Action> wait;
    for (int rank = 0; rank < world; ++rank) {
        if (rank != victim) wait.push_back({"wait-file", fmt::format("{}/ready.{}", dir, rank)});
    }
    return concat({flat(setup),
                   {"ready", dir + "/ready.{rank}"},
                   on_rank(victim, wait),
                   on_rank(victim, fault),
                   flat(rest)});
}

// ddprun flags, then fake_worker and its actions.
std::vector<std::string> job(std::vector<std::string> flags,
                             const std::vector<std::string>& actions) {
    flags.push_back(k_fake_worker);
    flags.insert(flags.end(), actions.begin(), actions.end());
    return flags;
}

// --- ddprun with stdio the test controls ----------------------------------------

int decode(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

// Reads a pipe (or a terminal's master side) on a thread of its own, as fast
// as it can or throttled like a slow console, until EOF or until the test
// closes it. Every wait is bounded.
class StreamReader {
  public:
    struct Pace {
        Milliseconds initial_delay{0};  // read nothing for this long first
        std::size_t chunk = 64 * 1024;  // bytes per read
        Milliseconds pause{0};          // after each read
    };

    explicit StreamReader(int fd, Pace pace) : m_fd(fd), m_pace(pace) {
        m_thread = std::thread([this] { loop(); });
    }
    explicit StreamReader(int fd) : StreamReader(fd, Pace{}) {}
    ~StreamReader() { close_now(); }
    StreamReader(const StreamReader&) = delete;
    StreamReader& operator=(const StreamReader&) = delete;

    std::string text() const {
        std::lock_guard lock(m_mutex);
        return m_text;
    }
    bool wait_for(std::string_view needle, Milliseconds timeout) {
        std::unique_lock lock(m_mutex);
        return m_changed.wait_for(lock, timeout,
                                  [&] { return m_text.find(needle) != std::string::npos; });
    }
    // Waits (bounded) for EOF; true when it came.
    bool wait_eof(Milliseconds timeout) {
        std::unique_lock lock(m_mutex);
        return m_changed.wait_for(lock, timeout, [&] { return m_eof; });
    }
    // Stops reading and closes the descriptor: the writer's next write fails.
    void close_now() {
        m_stop = true;
        if (m_thread.joinable()) m_thread.join();
        if (m_fd >= 0) ::close(m_fd);
        m_fd = -1;
    }

  private:
    void loop() {
        auto until = Clock::now() + m_pace.initial_delay;
        while (!m_stop && Clock::now() < until) std::this_thread::sleep_for(10ms);
        std::vector<char> buffer(m_pace.chunk);
        while (!m_stop) {
            pollfd pfd{m_fd, POLLIN, 0};
            int ready = ::poll(&pfd, 1, 50);
            if (ready < 0 && errno == EINTR) continue;
            if (ready <= 0) continue;
            ssize_t n = ::read(m_fd, buffer.data(), buffer.size());
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            std::lock_guard lock(m_mutex);
            if (n <= 0) {  // EOF, or EIO from a terminal nobody holds any more
                m_eof = true;
                m_changed.notify_all();
                return;
            }
            m_text.append(buffer.data(), static_cast<std::size_t>(n));
            m_changed.notify_all();
            if (m_pace.pause > 0ms) std::this_thread::sleep_for(m_pace.pause);
        }
    }

    int m_fd;
    Pace m_pace;
    std::atomic<bool> m_stop{false};
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    std::string m_text;
    bool m_eof = false;
    std::thread m_thread;
};

// ddprun started with a terminal, a pipe the test closes or reads slowly, an
// open stdin, or in a network namespace: what the harness's DdprunProcess
// does not offer. It runs in its own process group (its own session with a
// terminal); the destructor SIGKILLs whatever of it is left.
class CustomDdprun {
  public:
    struct Stdio {
        int in = -1;  // -1: /dev/null
        int out = -1;
        int err = -1;
        std::string terminal = {};  // non-empty: a new session with this as controlling terminal
        int netns_fd = -1;          // >= 0: setns() into this network namespace first
    };

    CustomDdprun(const std::vector<std::string>& args, std::vector<std::string> env,
                 const Stdio& stdio) {
        std::vector<std::string> argv_storage{k_ddprun};
        argv_storage.insert(argv_storage.end(), args.begin(), args.end());
        std::vector<char*> argv;
        for (auto& arg : argv_storage) argv.push_back(arg.data());
        argv.push_back(nullptr);
        std::vector<char*> envp;
        for (auto& entry : env) envp.push_back(entry.data());
        envp.push_back(nullptr);
        int dev_null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
        const char* terminal = stdio.terminal.empty() ? nullptr : stdio.terminal.c_str();

        m_pid = ::fork();
        if (m_pid == 0) {
            // Only async-signal-safe calls from here on: the test has threads.
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            if (stdio.netns_fd >= 0 && ::setns(stdio.netns_fd, CLONE_NEWNET) != 0) ::_exit(125);
            if (terminal != nullptr) {
                ::setsid();
                int tty = ::open(terminal, O_RDWR);
                if (tty < 0 || ::ioctl(tty, TIOCSCTTY, 0) != 0) ::_exit(125);
                ::dup2(tty, 0);
                ::dup2(tty, 1);
                ::dup2(tty, 2);
            } else {
                ::setpgid(0, 0);
                ::dup2(stdio.in >= 0 ? stdio.in : dev_null, 0);
                ::dup2(stdio.out >= 0 ? stdio.out : dev_null, 1);
                ::dup2(stdio.err >= 0 ? stdio.err : dev_null, 2);
            }
            ::execve(argv[0], argv.data(), envp.data());
            ::_exit(125);
        }
        if (terminal == nullptr) ::setpgid(m_pid, m_pid);
        ::close(dev_null);
    }

    ~CustomDdprun() {
        if (m_reaped || m_pid <= 0) return;
        ::kill(-m_pid, SIGKILL);
        ::kill(m_pid, SIGKILL);
        int status = 0;
        while (::waitpid(m_pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    CustomDdprun(const CustomDdprun&) = delete;
    CustomDdprun& operator=(const CustomDdprun&) = delete;

    pid_t pid() const { return m_pid; }

    // ddprun's exit code (128+N for signal N) once it exits within `timeout`;
    // nullopt if it still runs then.
    std::optional<int> wait_exit(Milliseconds timeout) {
        if (m_reaped) return m_code;
        auto deadline = Clock::now() + timeout;
        for (;;) {
            int status = 0;
            if (::waitpid(m_pid, &status, WNOHANG) == m_pid) {
                m_reaped = true;
                m_code = decode(status);
                return m_code;
            }
            if (Clock::now() >= deadline) return std::nullopt;
            std::this_thread::sleep_for(5ms);
        }
    }

  private:
    pid_t m_pid = -1;
    bool m_reaped = false;
    int m_code = -1;
};

struct Pipe {
    int read = -1;
    int write = -1;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
        read = fds[0];
        write = fds[1];
    }
    ~Pipe() {
        close_read();
        close_write();
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    // The reader takes ownership of the read end.
    int release_read() { return std::exchange(read, -1); }
    void close_read() {
        if (read >= 0) ::close(read);
        read = -1;
    }
    void close_write() {
        if (write >= 0) ::close(write);
        write = -1;
    }
};

// A pseudo-terminal: ddprun's controlling terminal in the SIGHUP tests.
struct Terminal {
    int master = -1;
    std::string slave;
    std::string error;  // why there is none (no /dev/pts in this container)
    Terminal() {
        master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        char name[128];
        if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0 ||
            ::ptsname_r(master, name, sizeof name) != 0) {
            error = std::string("posix_openpt: ") + std::strerror(errno);
            return;
        }
        slave = name;
    }
    ~Terminal() {
        if (master >= 0) ::close(master);
    }
    Terminal(const Terminal&) = delete;
    Terminal& operator=(const Terminal&) = delete;
};

// --- the fixture ------------------------------------------------------------------

class Reliability : public BackendTest {
  protected:
    void TearDown() override {
        // Whatever is alive now in a process group or session of the job
        // outlived it (or, after a SIGKILLed ddprun, its grace).
        std::vector<ProcessInfo> live;
        wait_until(
            [&] {
                live = live_in_groups_or_sessions(job_leaders());
                return live.empty();
            },
            m_orphan_grace ? k_orphan_grace : 0ms);
        EXPECT_TRUE(live.empty()) << "processes in the job's process groups or sessions at the "
                                     "end of the test:\n"
                                  << describe(live);
        EXPECT_TRUE(m_group_survivors.empty())
            << "processes in the job's process groups or sessions right after ddprun exited:\n"
            << describe(m_group_survivors);
        IntegrationTest::TearDown();
    }

    // Runs tests/integration/store_client against the job's store (its output in
    // store_client.log); its exit code.
    int store_client(const std::vector<std::string>& operations) {
        std::string command = k_store_client + " 127.0.0.1 " + std::to_string(m_port);
        for (const auto& word : operations) command += " '" + word + "'";
        command += " >" + path("store_client.log") + " 2>&1";
        int status = std::system(command.c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

    // The pids the job's processes recorded: every worker leads its own process
    // group, and a setsid() grandchild its own session.
    std::set<pid_t> job_leaders() const {
        auto pids = recorded_pids();
        return {pids.begin(), pids.end()};
    }

    // Records what of the job is alive now: called the moment the last agent
    // of a job has exited, when nothing of the job may be left.
    void snapshot_groups() {
        for (const auto& info : live_in_groups_or_sessions(job_leaders())) {
            bool known = std::any_of(m_group_survivors.begin(), m_group_survivors.end(),
                                     [&](const ProcessInfo& seen) { return seen.pid == info.pid; });
            if (!known) m_group_survivors.push_back(info);
        }
    }

    // For a ddprun killed by the test: its orphans get the harness's grace.
    void allow_orphan_grace() {
        m_orphan_grace = true;
        expect_orphans_to_clean_up();
    }

    // One agent, run to completion, with the group check at its exit.
    RunResult run_checked(const std::vector<std::string>& args, RunOptions options = {}) {
        auto previous = options.after_exit;
        options.after_exit = [this, previous] {
            if (previous) previous();
            snapshot_groups();
        };
        return run(args, std::move(options));
    }

    // The environment the harness gives ddprun, for a CustomDdprun.
    std::vector<std::string> job_env(RunOptions options = {}) const {
        options.env.emplace_back("FAKE_WORKER_PIDFILE", m_pidfile);
        return ddprun_environment(options);
    }

    // A CustomDdprun's exit: bounded by the hang guard, then the group check.
    std::optional<int> wait_custom(CustomDdprun& ddprun, Milliseconds timeout = k_hang_guard) {
        auto code = ddprun.wait_exit(timeout);
        if (code) {
            snapshot_groups();
        } else {
            allow_orphan_grace();  // the test's end SIGKILLs it
        }
        return code;
    }

    void wait_ready(int world, const std::function<std::string()>& progress) {
        for (int rank = 0; rank < world; ++rank) {
            ASSERT_TRUE(wait_for_file(path(fmt::format("ready.{}", rank)), 30s))
                << "worker " << rank << " never started\n"
                << progress();
        }
    }

    // --- two agents on loopback ---

    struct Node {
        int node_rank = 0;
        std::string addr;
        std::vector<std::string> flags = {};  // this agent's own
    };

    std::vector<std::string> agent_args(const Node& node, int nnodes, int nproc,
                                        const std::vector<std::string>& flags,
                                        const std::vector<std::string>& program) const {
        std::vector<std::string> args{
            fmt::format("--nnodes={}", nnodes),
            fmt::format("--nproc_per_node={}", nproc),
            "--rdzv_id=" + m_run_id,
            fmt::format("--node_rank={}", node.node_rank),
            "--local_addr=" + node.addr,
        };
        auto rendezvous = rendezvous_flags(etcd(), m_port);
        args.insert(args.end(), rendezvous.begin(), rendezvous.end());
        args.insert(args.end(), flags.begin(), flags.end());
        args.insert(args.end(), node.flags.begin(), node.flags.end());
        args.insert(args.end(), program.begin(), program.end());
        return args;
    }

    // For an agent whose endpoint is a program of the test's on m_port, not a
    // store: over c10d it is already; over etcd it replaces the shared etcd.
    std::vector<std::string> endpoint_is_m_port() const {
        if (!etcd()) return {};
        return {fmt::format("--rdzv_endpoint=127.0.0.1:{}", m_port)};
    }

    // The rendezvous settings of these tests: a join that cannot complete
    // ends with a message long before the guard.
    static std::vector<std::string> with_conf(std::vector<std::string> flags,
                                              const std::string& conf = "join_timeout=20") {
        flags.insert(flags.begin(), "--rdzv_conf=" + conf);
        return flags;
    }

    std::unique_ptr<DdprunProcess> start_agent(const Node& node,
                                               const std::vector<std::string>& flags,
                                               const std::vector<std::string>& program,
                                               RunOptions options = {}, int nnodes = 2,
                                               int nproc = 2) {
        if (options.timeout == k_hang_guard) options.timeout = k_node_guard;
        return start(agent_args(node, nnodes, nproc, flags, program), std::move(options));
    }

    std::vector<RunResult> wait_agents(const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        std::vector<DdprunProcess*> raw;
        for (const auto& agent : agents) raw.push_back(agent.get());
        auto results = wait_all(raw);
        snapshot_groups();
        return results;
    }

    static std::string stderr_of(const std::vector<std::unique_ptr<DdprunProcess>>& agents) {
        std::string text;
        for (std::size_t i = 0; i < agents.size(); ++i) {
            text += fmt::format("--- agent {} stderr so far ---\n{}\n", i, agents[i]->err_so_far());
        }
        return text;
    }

    int m_port = free_port();
    std::string m_run_id = run_id_for_this_test();

  private:
    static std::string run_id_for_this_test() {
        // Parameterized names hold '/', which a run id had better not (etcd keys, log dirs).
        std::string id =
            std::string("rel-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
        std::replace(id.begin(), id.end(), '/', '-');
        return id;
    }

    std::vector<ProcessInfo> m_group_survivors;
    bool m_orphan_grace = false;
};

// A test run over each backend; its parameter is the backend.
class OnEachBackend : public Reliability, public ::testing::WithParamInterface<std::string> {
  protected:
    bool etcd() const override { return GetParam() == "etcd"; }
};

// A two-agent test with cases of its own, each over each backend.
template <class Case>
class TwoAgentCaseTest : public Reliability, public ::testing::WithParamInterface<OnBackend<Case>> {
  protected:
    bool etcd() const override { return this->GetParam().backend == "etcd"; }
    const Case& the_case() const { return this->GetParam().c; }
};

// The agent process under a ddprun (its supervisor's only child).
pid_t agent_of(pid_t ddprun) {
    auto children = children_of(ddprun);
    return children.size() == 1 ? children[0] : -1;
}

// ============================================================================
// Worker faults, on one agent and on two
// ============================================================================

// What one fault needs: the job (for `world` workers, `victim` the one that
// misbehaves, `dir` the test's directory) and what every agent must report.
struct FaultJob {
    std::vector<std::string> flags;    // more ddprun flags
    std::vector<std::string> program;  // the program and its arguments
};

struct WorkerFault {
    std::string name;
    std::function<FaultJob(const std::string& dir, int world, int victim)> make;
    int exit_code = 0;
    std::vector<std::string>
        summary;                   // every agent's messages mention these; "{victim}" is replaced
    int processes_per_worker = 1;  // fake_worker processes each worker records (0: none start)
    // Checks one agent's output; `ranks` are its workers'.
    std::function<void(const RunResult&, const std::vector<int>& ranks, int victim)> check;
};

void PrintTo(const WorkerFault& fault, std::ostream* os) {
    *os << fault.name;
}

std::vector<std::string> fake_worker(std::vector<std::string> actions) {
    actions.insert(actions.begin(), k_fake_worker);
    return actions;
}

// The victim fails once everyone is ready; the others sleep far beyond any
// guard, so only ddprun can stop them, and a 300 s grace means it must not
// wait for it.
WorkerFault fails_while_others_run(std::string name, std::vector<Action> failure, int exit_code,
                                   std::vector<std::string> summary) {
    WorkerFault fault;
    fault.name = std::move(name);
    fault.make = [failure](const std::string& dir, int world, int victim) {
        return FaultJob{
            {"--shutdown_timeout=300"},
            fake_worker(when_all_ready(dir, world, victim, {}, failure, {{"sleep", "300"}}))};
    };
    fault.exit_code = exit_code;
    fault.summary = std::move(summary);
    return fault;
}

void expect_error_naming(const RunResult& r, const std::string& what) {
    auto errors = error_lines(r.err);
    ASSERT_EQ(errors.size(), 1u) << "one line naming the problem\n" << r.describe();
    EXPECT_TRUE(contains(errors[0], what)) << errors[0];
}

std::vector<WorkerFault> worker_faults() {
    std::vector<WorkerFault> faults;
    faults.push_back(fails_while_others_run("ExitsNonZero", {{"exit", "3"}}, 3,
                                            {"root cause: rank {victim} ", "exit code: 3"}));
    faults.push_back(fails_while_others_run("DiesOfSigsegv", {{"raise", "SIGSEGV"}}, 128 + SIGSEGV,
                                            {"root cause: rank {victim} ", "SIGSEGV"}));
    faults.push_back(fails_while_others_run("DiesOfSigabrt", {{"raise", "SIGABRT"}}, 128 + SIGABRT,
                                            {"root cause: rank {victim} ", "SIGABRT"}));
    faults.push_back(fails_while_others_run("DiesOfSigkill", {{"raise", "SIGKILL"}}, 128 + SIGKILL,
                                            {"root cause: rank {victim} ", "SIGKILL"}));
    {
        // Every worker ignores SIGTERM: they are SIGKILLed after the 1 s grace.
        WorkerFault fault;
        fault.name = "OthersIgnoreSigterm";
        fault.make = [](const std::string& dir, int world, int victim) {
            return FaultJob{{"--shutdown_timeout=1"},
                            fake_worker(when_all_ready(dir, world, victim, {{"ignore-term"}},
                                                       {{"exit", "4"}}, {{"sleep", "300"}}))};
        };
        fault.exit_code = 4;
        fault.summary = {"root cause: rank {victim} ", "exit code: 4"};
        faults.push_back(fault);
    }
    {
        // The victim succeeds at once; the others go on and must not be stopped.
        WorkerFault fault;
        fault.name = "ExitsZeroEarly";
        fault.make = [](const std::string& dir, int world, int victim) {
            auto actions =
                when_all_ready(dir, world, victim, {}, {{"ready", dir + "/early"}, {"exit", "0"}},
                               {{"wait-file", dir + "/early"}, {"sleep", "0.5"}, {"print", "2"}});
            return FaultJob{{}, fake_worker(actions)};
        };
        fault.check = [](const RunResult& r, const std::vector<int>& ranks, int victim) {
            auto out = lines_by_rank(r.out);
            for (int rank : ranks) {
                if (rank == victim) continue;
                EXPECT_EQ(lines_of(out, rank), numbered("line", 2, rank))
                    << "rank " << rank << " must run to its end\n"
                    << r.describe();
            }
        };
        faults.push_back(fault);
    }
    {
        WorkerFault fault;
        fault.name = "GrandchildrenOutliveIt";
        fault.make = [](const std::string&, int, int) {
            return FaultJob{
                {}, fake_worker({"spawn-grandchild", "spawn-grandchild", "setsid", "print", "1"})};
        };
        fault.processes_per_worker = 3;
        faults.push_back(fault);
    }
    {
        WorkerFault fault = fails_while_others_run("GrandchildrenOfAFailedJob", {{"exit", "5"}}, 5,
                                                   {"root cause: rank {victim} "});
        fault.make = [](const std::string& dir, int world, int victim) {
            return FaultJob{
                {"--shutdown_timeout=300"},
                fake_worker(when_all_ready(dir, world, victim,
                                           {{"spawn-grandchild"}, {"spawn-grandchild", "setsid"}},
                                           {{"exit", "5"}}, {{"sleep", "300"}}))};
        };
        fault.processes_per_worker = 3;
        faults.push_back(fault);
    }
    {
        WorkerFault fault;
        fault.name = "ClosesStdoutAndKeepsRunning";
        fault.make = [](const std::string&, int, int) {
            return FaultJob{
                {}, fake_worker({"print", "1", "stdout-close", "sleep", "0.3", "stderr", "2"})};
        };
        fault.check = [](const RunResult& r, const std::vector<int>& ranks, int) {
            auto out = lines_by_rank(r.out);
            auto err = lines_by_rank(r.err);
            for (int rank : ranks) {
                EXPECT_EQ(lines_of(out, rank), numbered("line", 1, rank)) << r.describe();
                EXPECT_EQ(lines_of(err, rank), numbered("err", 2, rank)) << r.describe();
            }
        };
        faults.push_back(fault);
    }
    {
        // 3 MiB without a newline, then exit: shown in prefixed pieces, every
        // byte of it, and nobody else's output is cut by it.
        constexpr int k_bytes = 3 * 1024 * 1024;
        WorkerFault fault;
        fault.name = "WritesAHugeLineWithoutNewline";
        fault.make = [](const std::string&, int, int victim) {
            return FaultJob{
                {},
                fake_worker(concat(
                    {on_rank(victim, {{"huge-line", std::to_string(k_bytes)}}), {"print", "1"}}))};
        };
        fault.check = [](const RunResult& r, const std::vector<int>& ranks, int victim) {
            auto out = lines_by_rank(r.out);
            for (int rank : ranks) {
                if (rank != victim) {
                    EXPECT_EQ(lines_of(out, rank), numbered("line", 1, rank)) << "rank " << rank;
                    continue;
                }
                // The huge line's pieces, then "line 0 ..." (possibly glued to the
                // last piece: the worker wrote no newline between them).
                std::string joined;
                for (const auto& piece : lines_of(out, rank)) joined += piece;
                std::string expected(k_bytes, 'h');
                expected += fmt::format("line 0 rank {}", rank);
                EXPECT_EQ(joined.size(), expected.size()) << "bytes lost or added";
                EXPECT_TRUE(joined == expected) << "the huge line arrived altered";
            }
            for (const auto& line : split_lines(r.out)) {
                ASSERT_TRUE(split_prefix(line)) << "unprefixed piece: " << line.substr(0, 80);
            }
        };
        faults.push_back(fault);
    }
    {
        constexpr int k_lines = 10000;
        WorkerFault fault;
        fault.name = "FloodsOutput";
        fault.make = [](const std::string&, int, int) {
            return FaultJob{{}, fake_worker({"flood", std::to_string(k_lines)})};
        };
        fault.check = [](const RunResult& r, const std::vector<int>& ranks, int) {
            expect_flood_complete(r.out, ranks, k_lines);
        };
        faults.push_back(fault);
    }
    {
        WorkerFault fault;
        fault.name = "ReadsStdin";
        fault.make = [](const std::string&, int, int) {
            return FaultJob{{}, fake_worker({"read-stdin", "print", "1"})};
        };
        fault.check = [](const RunResult& r, const std::vector<int>& ranks, int) {
            auto out = lines_by_rank(r.out);
            for (int rank : ranks) {
                EXPECT_EQ(lines_of(out, rank),
                          (std::vector<std::string>{"stdin: eof after 0 bytes",
                                                    fmt::format("line 0 rank {}", rank)}))
                    << r.describe();
            }
        };
        faults.push_back(fault);
    }
    {
        WorkerFault fault;
        fault.name = "IsNotExecutable";
        fault.make = [](const std::string& dir, int, int) {
            std::string program = dir + "/not_executable.sh";
            write_text_file(program, "#!/bin/sh\necho should not run\n", 0644);
            return FaultJob{{}, {program}};
        };
        fault.exit_code = 126;
        fault.processes_per_worker = 0;
        fault.check = [](const RunResult& r, const std::vector<int>&, int) {
            expect_error_naming(r, "not_executable.sh");
            EXPECT_FALSE(contains(r.out, "should not run"));
        };
        faults.push_back(fault);
    }
    {
        WorkerFault fault;
        fault.name = "IsADanglingSymlink";
        fault.make = [](const std::string& dir, int, int) {
            std::string program = dir + "/dangling";
            std::filesystem::create_symlink(dir + "/missing/program", program);
            return FaultJob{{}, {program}};
        };
        fault.exit_code = 127;
        fault.processes_per_worker = 0;
        fault.check = [](const RunResult& r, const std::vector<int>&, int) {
            expect_error_naming(r, "dangling");
        };
        faults.push_back(fault);
    }
    return faults;
}

std::string substitute_victim(std::string text, int victim) {
    auto at = text.find("{victim}");
    if (at != std::string::npos) text.replace(at, 8, std::to_string(victim));
    return text;
}

void expect_agent_outcome(const WorkerFault& fault, const RunResult& r,
                          const std::vector<int>& ranks, int victim, const std::string& all) {
    EXPECT_FALSE(r.timed_out) << "a hang\n" << all;
    EXPECT_EQ(r.exit_code, fault.exit_code) << all;
    EXPECT_EQ(crash_sign(r.err), "") << all;
    std::string messages = ddprun_messages(r.err);
    for (const auto& mention : fault.summary) {
        EXPECT_TRUE(contains(messages, substitute_victim(mention, victim)))
            << "the summary must mention '" << substitute_victim(mention, victim) << "'\n"
            << all;
    }
    if (fault.check) fault.check(r, ranks, victim);
}

class WorkerFaultOnOneAgent : public Reliability,
                              public ::testing::WithParamInterface<WorkerFault> {};
class WorkerFaultOnTwoAgents : public TwoAgentCaseTest<WorkerFault> {};

TEST_P(WorkerFaultOnOneAgent, EndsAsDocumented) {
    const WorkerFault& fault = GetParam();
    constexpr int k_world = 2;
    constexpr int k_victim = 1;
    FaultJob plan = fault.make(m_dir, k_world, k_victim);
    std::vector<std::string> args{fmt::format("--nproc_per_node={}", k_world)};
    args.insert(args.end(), plan.flags.begin(), plan.flags.end());
    args.insert(args.end(), plan.program.begin(), plan.program.end());
    auto r = run_checked(args);
    expect_agent_outcome(fault, r, {0, 1}, k_victim, r.describe());
    EXPECT_EQ(recorded_pids().size(),
              static_cast<std::size_t>(k_world * fault.processes_per_worker))
        << r.describe();
}

TEST_P(WorkerFaultOnTwoAgents, EveryAgentEndsAsDocumented) {
    const WorkerFault& fault = the_case();
    constexpr int k_world = 4;
    constexpr int k_victim = 3;  // on node 1: the failure must travel to node 0
    FaultJob plan = fault.make(m_dir, k_world, k_victim);
    auto flags = with_conf(plan.flags);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, plan.program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, plan.program));
    auto r = wait_agents(agents);
    std::string all = describe_all(r);
    expect_agent_outcome(fault, r[0], {0, 1}, k_victim, all);
    expect_agent_outcome(fault, r[1], {2, 3}, k_victim, all);
    EXPECT_EQ(recorded_pids().size(),
              static_cast<std::size_t>(k_world * fault.processes_per_worker))
        << all;
}

std::string fault_name(const ::testing::TestParamInfo<WorkerFault>& param_info) {
    return param_info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Reliability, WorkerFaultOnOneAgent, ::testing::ValuesIn(worker_faults()),
                         fault_name);
INSTANTIATE_TEST_SUITE_P(Reliability, WorkerFaultOnTwoAgents,
                         ::testing::ValuesIn(on_backends(worker_faults())),
                         case_and_backend<WorkerFault>);

// --- worker faults that need control of ddprun's own stdio ---------------------

class WorkerStdio : public Reliability {};

// A worker that reads stdin gets EOF at once, even when ddprun's own stdin is
// an open pipe (or a terminal) that would block it forever.
TEST_F(WorkerStdio, StdinIsNeverTheLaunchersEvenWhenItStaysOpen) {
    Pipe in;
    Pipe out;
    Pipe err;
    CustomDdprun ddprun(job({"--nproc_per_node=2"}, {"read-stdin", "print", "1"}), job_env(),
                        {.in = in.read, .out = out.write, .err = err.write});
    in.close_read();
    out.close_write();
    err.close_write();
    StreamReader out_reader(out.release_read());
    StreamReader err_reader(err.release_read());
    std::string greeting = "typed at the launcher's terminal\n";
    ASSERT_EQ(::write(in.write, greeting.data(), greeting.size()),
              static_cast<ssize_t>(greeting.size()));
    auto code = wait_custom(ddprun);  // stdin stays open all along
    ASSERT_TRUE(code) << "ddprun hung: a worker was blocked on the launcher's stdin\n"
                      << err_reader.text();
    EXPECT_EQ(*code, 0) << err_reader.text();
    ASSERT_TRUE(out_reader.wait_eof(10s));
    auto lines = lines_by_rank(out_reader.text());
    for (int rank : {0, 1}) {
        EXPECT_EQ(lines_of(lines, rank),
                  (std::vector<std::string>{"stdin: eof after 0 bytes",
                                            fmt::format("line 0 rank {}", rank)}))
            << out_reader.text();
    }
}

// Workers write far faster than the console reads: they are slowed down
// (the pipes fill), and nothing is dropped, cut or reordered.
TEST_F(WorkerStdio, FloodIntoASlowConsoleLosesNothing) {
    constexpr int k_workers = 8;
    constexpr int k_lines = 5000;  // 4 MB in all
    Pipe out;
    Pipe err;
    CustomDdprun ddprun(
        job({fmt::format("--nproc_per_node={}", k_workers)}, {"flood", std::to_string(k_lines)}),
        job_env(), {.out = out.write, .err = err.write});
    out.close_write();
    err.close_write();
    // Nothing read for a second, then 4 KiB per millisecond at most.
    StreamReader out_reader(out.release_read(), {.initial_delay = 1s, .chunk = 4096, .pause = 1ms});
    StreamReader err_reader(err.release_read());
    auto code = wait_custom(ddprun);
    ASSERT_TRUE(code) << err_reader.text();
    EXPECT_EQ(*code, 0) << err_reader.text();
    ASSERT_TRUE(out_reader.wait_eof(30s));
    std::vector<int> ranks(k_workers);
    for (int rank = 0; rank < k_workers; ++rank) ranks[static_cast<std::size_t>(rank)] = rank;
    expect_flood_complete(out_reader.text(), ranks, k_lines);
}

// ============================================================================
// Load
// ============================================================================

class Load : public Reliability {};

TEST_F(Load, SixtyFourWorkersPrintingTenThousandLinesEachLoseNothing) {
    constexpr int k_workers = 64;
    constexpr int k_lines = 10000;  // 64 MB through one ddprun
    RunOptions options;
    options.timeout = 120s;
    auto r = run_checked(
        job({fmt::format("--nproc_per_node={}", k_workers)}, {"flood", std::to_string(k_lines)}),
        options);
    ASSERT_FALSE(r.timed_out) << "ddprun did not carry 64 MB within 120 s";
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<int> ranks(k_workers);
    for (int rank = 0; rank < k_workers; ++rank) ranks[static_cast<std::size_t>(rank)] = rank;
    expect_flood_complete(r.out, ranks, k_lines);
}

// ============================================================================
// Agent faults
// ============================================================================

class AgentFaults : public Reliability {};

// Workers that report ready and sleep far beyond any guard.
std::vector<std::string> sleepers(const std::string& dir, std::vector<std::string> setup = {}) {
    setup.insert(setup.end(), {"ready", dir + "/ready.{rank}", "sleep", "300"});
    return setup;
}

TEST_F(AgentFaults, SigkillOfTheAgentProcessLeavesNoWorkerOrGrandchild) {
    auto ddprun = start(job({"--nproc_per_node=2"},
                            sleepers(m_dir, {"spawn-grandchild", "spawn-grandchild", "setsid"})));
    wait_ready(2, [&] { return ddprun->err_so_far(); });
    if (HasFatalFailure()) return;
    ASSERT_EQ(recorded_pids().size(), 6u) << "2 workers and 4 grandchildren";
    pid_t agent = agent_of(ddprun->pid());
    ASSERT_GT(agent, 0) << "no agent process under ddprun " << ddprun->pid();
    ::kill(agent, SIGKILL);  // as the OOM killer would
    allow_orphan_grace();
    auto r = ddprun->wait();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.describe();
    EXPECT_EQ(error_lines(r.err).size(), 1u) << "ddprun must say its agent died\n" << r.describe();
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << "survivors of the job:\n" << describe(live);
}

// Frozen longer than a heartbeat timeout, then thawed: a single node has no
// peer to lose, so the job just goes on and ends normally, nothing lost.
TEST_F(AgentFaults, StoppedAndContinuedAgentFinishesTheJob) {
    std::string go = path("go");
    auto ddprun = start(job({"--nproc_per_node=2", "--rdzv_conf=heartbeat_timeout=1"},
                            {"ready", path("ready.{rank}"), "wait-file", go, "print", "3"}));
    wait_ready(2, [&] { return ddprun->err_so_far(); });
    if (HasFatalFailure()) return;
    pid_t agent = agent_of(ddprun->pid());
    ASSERT_GT(agent, 0);
    ::kill(agent, SIGSTOP);
    ::kill(ddprun->pid(), SIGSTOP);
    // The workers finish while ddprun is frozen: their exits and output wait for it.
    write_text_file(go, "");
    std::this_thread::sleep_for(2500ms);
    ::kill(ddprun->pid(), SIGCONT);
    ::kill(agent, SIGCONT);
    auto r = ddprun->wait();
    snapshot_groups();
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank : {0, 1}) EXPECT_EQ(lines_of(out, rank), numbered("line", 3, rank));
}

TEST_F(AgentFaults, SecondSigtermKillsAtOnce) {
    // The workers survive SIGTERM and the grace outlasts the guard: only the
    // second SIGTERM can end the job in time.
    auto ddprun = start(job({"--nproc_per_node=2", "--shutdown_timeout=300"},
                            sleepers(m_dir, {"trap", "SIGTERM"})));
    wait_ready(2, [&] { return ddprun->err_so_far(); });
    if (HasFatalFailure()) return;
    ddprun->send_signal(SIGTERM);
    ASSERT_TRUE(ddprun->wait_for_output("[0]: got SIGTERM", 30s)) << ddprun->err_so_far();
    ddprun->send_signal(SIGTERM);
    auto r = ddprun->wait();
    snapshot_groups();
    ASSERT_FALSE(r.timed_out) << "the second SIGTERM did not kill the workers\n" << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.describe();
    EXPECT_EQ(crash_sign(r.err), "") << r.describe();
}

// The terminal ddprun runs in goes away (ssh dropped, window closed): the
// kernel sends SIGHUP; ddprun stops the job like any stop signal, although
// its own stdout and stderr are dead (EIO) by then.
TEST_F(AgentFaults, TerminalHangupStopsTheJobWith129) {
    Terminal terminal;
    if (!terminal.error.empty()) GTEST_SKIP() << "no pseudo-terminal here: " << terminal.error;
    CustomDdprun ddprun(job({"--nproc_per_node=2", "--shutdown_timeout=300"},
                            sleepers(m_dir, {"trap-exit", "SIGHUP", "trap-exit", "SIGTERM"})),
                        job_env(), {.terminal = terminal.slave});
    StreamReader screen(::dup(terminal.master));
    wait_ready(2, [&] { return screen.text(); });
    if (HasFatalFailure()) return;
    screen.close_now();
    ::close(std::exchange(terminal.master, -1));  // the hangup
    auto code = wait_custom(ddprun);
    ASSERT_TRUE(code) << "ddprun did not stop after its terminal went away";
    EXPECT_EQ(*code, 128 + SIGHUP);
}

// ddprun's own stdout is a pipe whose reader goes away mid-run (`ddprun ... |
// head`): writes fail with EPIPE. The workers must keep running to their end
// (their stderr still arrives), ddprun must not die of SIGPIPE, and it must
// say that output was lost.
TEST_F(AgentFaults, OwnStdoutClosedWorkersRunOnAndItIsReported) {
    std::string go = path("go");
    Pipe out;
    Pipe err;
    CustomDdprun ddprun(
        job({"--nproc_per_node=2"}, {"print", "1", "ready", path("ready.{rank}"), "wait-file", go,
                                     "print", "200", "sleep", "0.2", "stderr", "1"}),
        job_env(), {.out = out.write, .err = err.write});
    out.close_write();
    err.close_write();
    StreamReader out_reader(out.release_read());
    StreamReader err_reader(err.release_read());
    wait_ready(2, [&] { return err_reader.text(); });
    if (HasFatalFailure()) return;
    out_reader.close_now();  // the console goes away
    write_text_file(go, "");
    auto code = wait_custom(ddprun);
    ASSERT_TRUE(code) << err_reader.text();
    ASSERT_TRUE(err_reader.wait_eof(10s));
    std::string err_text = err_reader.text();
    EXPECT_EQ(*code, 0) << "the workers succeeded\n" << err_text;
    auto err_lines = lines_by_rank(err_text);
    for (int rank : {0, 1}) {
        EXPECT_EQ(lines_of(err_lines, rank), numbered("err", 1, rank))
            << "rank " << rank << " did not run to its end\n"
            << err_text;
    }
    auto lines = ddprun_own_lines(err_text);
    bool reported = std::any_of(lines.begin(), lines.end(),
                                [](const std::string& line) { return contains(line, "stdout"); });
    EXPECT_TRUE(reported) << "ddprun must say that its stdout was lost\n" << err_text;
}

// A tmpfs of 64 KiB as --log_dir stands for a full disk.
class SmallFilesystem {
  public:
    explicit SmallFilesystem(const std::string& dir, const std::string& options) : m_dir(dir) {
        std::filesystem::create_directories(dir);
        m_mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0;
        if (!m_mounted) m_error = std::strerror(errno);
    }
    ~SmallFilesystem() {
        if (m_mounted) ::umount2(m_dir.c_str(), MNT_DETACH);
    }
    SmallFilesystem(const SmallFilesystem&) = delete;
    SmallFilesystem& operator=(const SmallFilesystem&) = delete;
    bool mounted() const { return m_mounted; }
    const std::string& error() const { return m_error; }

  private:
    std::string m_dir;
    bool m_mounted = false;
    std::string m_error;
};

TEST_F(AgentFaults, FullDiskUnderLogDirWorkersRunOnAndItIsReported) {
    SmallFilesystem disk(path("logs"), "size=64k");
    if (!disk.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << disk.error();
    auto r = run_checked(job({"--nproc_per_node=2", "--log_dir", path("logs"), "--rdzv_id=full"},
                             {"flood", "2000", "print", "2"}));
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, 0) << "the workers succeeded\n" << r.describe();
    // The console still got everything; the files got what fitted.
    for (int rank : {0, 1}) {
        auto lines = lines_of(lines_by_rank(r.out), rank);
        ASSERT_EQ(lines.size(), 2002u) << r.describe();
        EXPECT_EQ(lines[2000], fmt::format("line 0 rank {}", rank));
        EXPECT_EQ(lines[2001], fmt::format("line 1 rank {}", rank));
    }
    auto errors = error_lines(r.err);
    ASSERT_FALSE(errors.empty()) << "the full disk must be reported\n" << r.describe();
    EXPECT_TRUE(contains(errors[0], path("logs")) && contains(errors[0], "No space left"))
        << errors[0];
}

// --- agent faults on two agents --------------------------------------------------

class TwoAgentFaults : public OnEachBackend {};
INSTANTIATE_TEST_SUITE_P(Reliability, TwoAgentFaults, ::testing::ValuesIn(k_backends),
                         backend_name);

struct AgentKill {
    std::string name;
    int node;         // which agent is killed
    bool supervisor;  // the ddprun the user started, else the agent process under it
};

class TwoAgentKill : public TwoAgentCaseTest<AgentKill> {};

// Unlike test_multi_node's killed-node tests, every worker has grandchildren
// (one daemonized with setsid): none may survive on either node.
TEST_P(TwoAgentKill, NoWorkerOrGrandchildSurvivesOnEitherNode) {
    const AgentKill& c = the_case();
    auto flags = with_conf({"--shutdown_timeout=300"}, "join_timeout=20,heartbeat_timeout=2");
    auto program = fake_worker(sleepers(m_dir, {"spawn-grandchild", "spawn-grandchild", "setsid"}));
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    wait_ready(4, [&] { return stderr_of(agents); });
    if (HasFatalFailure()) return;
    ASSERT_EQ(recorded_pids().size(), 12u) << "4 workers and 8 grandchildren";
    auto& victim = *agents[static_cast<std::size_t>(c.node)];
    pid_t target = c.supervisor ? victim.pid() : agent_of(victim.pid());
    ASSERT_GT(target, 0);
    ::kill(target, SIGKILL);
    allow_orphan_grace();
    auto r = wait_agents(agents);
    const auto& survivor = r[static_cast<std::size_t>(1 - c.node)];
    EXPECT_FALSE(survivor.timed_out) << "the lost node was not noticed in time\n"
                                     << describe_all(r);
    EXPECT_TRUE(survivor.exit_code == k_rendezvous_exit || survivor.exit_code == 128 + SIGKILL)
        << describe_all(r);
    auto live = wait_job_gone(k_orphan_grace);
    EXPECT_TRUE(live.empty()) << "survivors of the job:\n" << describe(live);
}

// Over c10d node 0 hosts the store.
INSTANTIATE_TEST_SUITE_P(
    Reliability, TwoAgentKill,
    ::testing::ValuesIn(on_backends<AgentKill>(
        {{"Node0Agent", 0, false}, {"Node1Agent", 1, false}, {"Node1Supervisor", 1, true}})),
    case_and_backend<AgentKill>);

struct RepeatedSignal {
    std::string name;
    int signal;
};

class TwoAgentRepeatedSignal : public TwoAgentCaseTest<RepeatedSignal> {};

// Ctrl-C twice on one node's terminal: the user wants the job gone now. Every
// worker survives the first signal and the grace outlasts the guard, so every
// node must act on the second at once.
TEST_P(TwoAgentRepeatedSignal, SecondSignalOnOneNodeEndsEveryNodeAtOnce) {
    const RepeatedSignal& c = the_case();
    auto flags = with_conf({"--shutdown_timeout=300"});
    auto program = fake_worker(sleepers(m_dir, {"trap", "SIGTERM", "trap", "SIGINT"}));
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    wait_ready(4, [&] { return stderr_of(agents); });
    if (HasFatalFailure()) return;
    agents[1]->send_signal(c.signal);
    ASSERT_TRUE(agents[0]->wait_for_output("[0]: got SIG", 30s)) << stderr_of(agents);
    agents[1]->send_signal(c.signal);
    auto r = wait_agents(agents);
    for (std::size_t node = 0; node < 2; ++node) {
        EXPECT_FALSE(r[node].timed_out) << "node " << node << " waited out its grace\n"
                                        << describe_all(r);
        EXPECT_EQ(r[node].exit_code, 128 + c.signal) << describe_all(r);
    }
}

INSTANTIATE_TEST_SUITE_P(Reliability, TwoAgentRepeatedSignal,
                         ::testing::ValuesIn(on_backends<RepeatedSignal>({{"Sigterm", SIGTERM},
                                                                          {"Sigint", SIGINT}})),
                         case_and_backend<RepeatedSignal>);

TEST_P(TwoAgentFaults, SigusrOnEachNodeIsForwardedAndTheJobGoesOn) {
    auto flags = with_conf({});
    auto program = fake_worker({"ready", path("ready.{rank}"), "wait-signal", "print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    wait_ready(4, [&] { return stderr_of(agents); });
    if (HasFatalFailure()) return;
    agents[0]->send_signal(SIGUSR1);
    agents[1]->send_signal(SIGUSR2);
    auto r = wait_agents(agents);
    std::string all = describe_all(r);
    ASSERT_EQ(r[0].exit_code, 0) << all;
    ASSERT_EQ(r[1].exit_code, 0) << all;
    for (int node = 0; node < 2; ++node) {
        auto out = lines_by_rank(r[static_cast<std::size_t>(node)].out);
        for (int rank : {node * 2, node * 2 + 1}) {
            EXPECT_EQ(lines_of(out, rank),
                      (std::vector<std::string>{node == 0 ? "got SIGUSR1" : "got SIGUSR2",
                                                fmt::format("line 0 rank {}", rank)}))
                << all;
        }
    }
}

// Node 0 freezes (SIGSTOP) past the heartbeat timeout: the other node must
// notice and stop (over c10d, instead of blocking on the frozen store node 0
// hosts; over etcd, when node 0's lease runs out); once thawed, node 0 stops
// too. (test_multi_node freezes the other node.)
TEST_P(TwoAgentFaults, FrozenNode0IsDetectedAndStopsOnceThawed) {
    auto flags = with_conf({"--shutdown_timeout=300"}, "join_timeout=20,heartbeat_timeout=2");
    auto program = fake_worker(sleepers(m_dir));
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    RunOptions frozen_options;
    frozen_options.timeout = 50s;  // it only starts to stop once thawed
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program, frozen_options));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    wait_ready(4, [&] { return stderr_of(agents); });
    if (HasFatalFailure()) return;
    pid_t agent = agent_of(agents[0]->pid());
    ASSERT_GT(agent, 0);
    ::kill(agent, SIGSTOP);
    ::kill(agents[0]->pid(), SIGSTOP);
    bool detected = agents[1]->wait_exit_for(k_node_guard);
    ::kill(agents[0]->pid(), SIGCONT);
    ::kill(agent, SIGCONT);
    auto r = wait_agents(agents);
    EXPECT_TRUE(detected && !r[1].timed_out) << "node 1 blocked on the frozen node 0\n"
                                             << describe_all(r);
    EXPECT_EQ(r[1].exit_code, k_rendezvous_exit) << describe_all(r);
    EXPECT_FALSE(r[0].timed_out) << "the thawed node 0 did not stop\n" << describe_all(r);
}

TEST_P(TwoAgentFaults, TerminalHangupOnOneNodeStopsEveryNodeWith129) {
    auto flags = with_conf({"--shutdown_timeout=300"});
    auto program = fake_worker(sleepers(m_dir, {"trap-exit", "SIGHUP", "trap-exit", "SIGTERM"}));
    Terminal terminal;
    if (!terminal.error.empty()) GTEST_SKIP() << "no pseudo-terminal here: " << terminal.error;
    auto node0 = start_agent({0, "127.0.0.1"}, flags, program);
    CustomDdprun node1(agent_args({1, "127.0.0.2"}, 2, 2, flags, program), job_env(),
                       {.terminal = terminal.slave});
    StreamReader screen(::dup(terminal.master));
    wait_ready(4, [&] { return node0->err_so_far() + screen.text(); });
    if (HasFatalFailure()) return;
    screen.close_now();
    ::close(std::exchange(terminal.master, -1));
    auto code1 = node1.wait_exit(k_node_guard);
    if (!code1) allow_orphan_grace();  // SIGKILLed at the end of the test
    auto r0 = node0->wait();
    snapshot_groups();
    ASSERT_TRUE(code1) << "node 1 did not stop after its terminal went away";
    EXPECT_EQ(*code1, 128 + SIGHUP);
    EXPECT_FALSE(r0.timed_out) << r0.describe();
    EXPECT_EQ(r0.exit_code, 128 + SIGHUP) << r0.describe();
}

TEST_P(TwoAgentFaults, OwnStdoutClosedOnOneNodeWorkersRunOnAndItIsReported) {
    std::string go = path("go");
    auto flags = with_conf({});
    auto program = fake_worker(
        {"ready", path("ready.{rank}"), "wait-file", go, "print", "200", "stderr", "1"});
    auto node0 = start_agent({0, "127.0.0.1"}, flags, program);
    Pipe out;
    Pipe err;
    CustomDdprun node1(agent_args({1, "127.0.0.2"}, 2, 2, flags, program), job_env(),
                       {.out = out.write, .err = err.write});
    out.close_write();
    err.close_write();
    StreamReader out_reader(out.release_read());
    StreamReader err_reader(err.release_read());
    wait_ready(4, [&] { return node0->err_so_far() + err_reader.text(); });
    if (HasFatalFailure()) return;
    out_reader.close_now();
    write_text_file(go, "");
    auto code1 = node1.wait_exit(k_node_guard);
    if (!code1) allow_orphan_grace();  // SIGKILLed at the end of the test
    auto r0 = node0->wait();
    snapshot_groups();
    ASSERT_TRUE(code1) << err_reader.text();
    ASSERT_TRUE(err_reader.wait_eof(10s));
    std::string err1 = err_reader.text();
    EXPECT_EQ(r0.exit_code, 0) << r0.describe();
    EXPECT_EQ(*code1, 0) << err1;
    auto err_lines = lines_by_rank(err1);
    for (int rank : {2, 3}) EXPECT_EQ(lines_of(err_lines, rank), numbered("err", 1, rank)) << err1;
    auto lines = ddprun_own_lines(err1);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                            [](const std::string& line) { return contains(line, "stdout"); }))
        << "node 1 must say that its stdout was lost\n"
        << err1;
}

TEST_P(TwoAgentFaults, FullDiskOnOneNodeWorkersRunOnAndItIsReported) {
    SmallFilesystem disk(path("logs1"), "size=64k");
    if (!disk.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << disk.error();
    auto flags = with_conf({});
    auto program = fake_worker({"flood", "2000", "print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1", {"--log_dir=" + path("logs0")}}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2", {"--log_dir=" + path("logs1")}}, flags, program));
    auto r = wait_agents(agents);
    std::string all = describe_all(r);
    ASSERT_EQ(r[0].exit_code, 0) << all;
    ASSERT_EQ(r[1].exit_code, 0) << all;
    auto out = lines_by_rank(r[1].out);
    for (int rank : {2, 3}) {
        ASSERT_EQ(lines_of(out, rank).size(), 2001u) << all;
        EXPECT_EQ(lines_of(out, rank).back(), fmt::format("line 0 rank {}", rank));
    }
    EXPECT_TRUE(error_lines(r[0].err).empty()) << all;
    auto errors = error_lines(r[1].err);
    ASSERT_FALSE(errors.empty()) << all;
    EXPECT_TRUE(contains(errors[0], "No space left")) << errors[0];
}

// ============================================================================
// Rendezvous
// ============================================================================

class RendezvousFaults : public Reliability {
  protected:
    // Node `node` (0: its side hosts the store) of a 2 x 2 job across Partition's link,
    // workers sleeping until stopped.
    std::vector<std::string> partitioned_node(int node, const std::string& conf) const {
        std::vector<std::string> args = {"--nnodes=2",
                                         "--nproc_per_node=2",
                                         fmt::format("--rdzv_endpoint=10.231.0.1:{}", m_port),
                                         "--rdzv_id=" + m_run_id,
                                         "--rdzv_conf=" + conf,
                                         "--shutdown_timeout=300",
                                         fmt::format("--node_rank={}", node),
                                         fmt::format("--local_addr=10.231.0.{}", node + 1)};
        auto program = fake_worker(sleepers(m_dir));
        args.insert(args.end(), program.begin(), program.end());
        return args;
    }
};

// Another program on the rendezvous port: it accepts connections (the kernel
// does, from the backlog) and never answers. -1 on failure (errno set).
int listen_on(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd, 16) != 0) {
        int saved = errno;
        ::close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

// Node 1 of a job whose endpoint (a c10d store, or an etcd member) is a
// listener here that accepts and never answers; start_agent_on_a_silent_store()
// returns once the agent's connection is accepted (m_silent).
class SilentStore : public OnEachBackend {
  protected:
    std::unique_ptr<DdprunProcess> start_agent_on_a_silent_store() {
        m_listener = listen_on(m_port);
        EXPECT_GE(m_listener, 0) << "cannot listen on port " << m_port << ": "
                                 << std::strerror(errno);
        auto node1 = start_agent({1, "127.0.0.2", endpoint_is_m_port()},
                                 with_conf({}, "join_timeout=120,read_timeout=120"),
                                 fake_worker({"print", "1"}));
        pollfd pfd{m_listener, POLLIN, 0};
        EXPECT_EQ(::poll(&pfd, 1, 30'000), 1) << "the agent never connected\n"
                                              << node1->err_so_far();
        m_silent = ::accept4(m_listener, nullptr, nullptr, SOCK_CLOEXEC);
        return node1;
    }

    void TearDown() override {
        if (m_silent >= 0) ::close(m_silent);
        if (m_listener >= 0) ::close(m_listener);
        Reliability::TearDown();
    }

    int m_listener = -1;
    int m_silent = -1;
};
INSTANTIATE_TEST_SUITE_P(Reliability, SilentStore, ::testing::ValuesIn(k_backends), backend_name);

// A program that is not a store on the rendezvous endpoint, over each backend.
class ForeignEndpoint : public OnEachBackend {};
INSTANTIATE_TEST_SUITE_P(Reliability, ForeignEndpoint, ::testing::ValuesIn(k_backends),
                         backend_name);

TEST_F(RendezvousFaults, StoreHostKilledMidJoinEndsTheWaitingNode) {
    // Three nodes expected, two come: the join cannot complete. Killing the
    // store's host must end node 1's wait long before its 60 s join timeout.
    auto flags = with_conf({}, "join_timeout=60");
    auto program = fake_worker({"print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program, {}, 3));
    ASSERT_TRUE(wait_until([&] { return port_accepts("127.0.0.1", m_port); }, 30s))
        << stderr_of(agents);
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program, {}, 3));
    if (k_store_client.empty()) GTEST_SKIP() << "built without libtorch: no store to watch";
    // Node 1 is in its join once its record is in the store.
    ASSERT_EQ(store_client({"wait", fmt::format("ddprun/{}/r0/info/1", m_run_id)}), 0)
        << read_text_file(path("store_client.log")) << stderr_of(agents);
    ASSERT_TRUE(agents[1]->running()) << stderr_of(agents);
    pid_t agent = agent_of(agents[0]->pid());
    ASSERT_GT(agent, 0);
    ::kill(agent, SIGKILL);
    allow_orphan_grace();
    auto r = wait_agents(agents);
    EXPECT_FALSE(r[1].timed_out) << describe_all(r);
    EXPECT_EQ(r[1].exit_code, k_rendezvous_exit) << describe_all(r);
    auto errors = error_lines(r[1].err);
    ASSERT_EQ(errors.size(), 1u) << describe_all(r);
    EXPECT_TRUE(contains(errors[0], "store")) << errors[0];
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

class TwoAgentRendezvous : public OnEachBackend {};
INSTANTIATE_TEST_SUITE_P(Reliability, TwoAgentRendezvous, ::testing::ValuesIn(k_backends),
                         backend_name);

TEST_P(TwoAgentRendezvous, NodeThatJoinsLateStillMakesTheJob) {
    auto flags = with_conf({});
    auto program = fake_worker({"print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    std::this_thread::sleep_for(3s);
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    auto r = wait_agents(agents);
    ASSERT_EQ(r[0].exit_code, 0) << describe_all(r);
    ASSERT_EQ(r[1].exit_code, 0) << describe_all(r);
    EXPECT_EQ(lines_of(lines_by_rank(r[1].out), 3), numbered("line", 1, 3)) << describe_all(r);
}

// Something else listens on the rendezvous port. The would-be host says so
// in one line; a node that reaches the foreign listener instead of a store
// must give up within its timeouts rather than wait for an answer forever
// (c10d 1.13 would: the store plugin probes the endpoint first).
TEST_F(RendezvousFaults, PortAlreadyInUse) {
    int listener = listen_on(m_port);
    ASSERT_GE(listener, 0) << "cannot listen on port " << m_port << ": " << std::strerror(errno);
    auto flags = with_conf({}, "join_timeout=5,read_timeout=5");
    auto program = fake_worker({"print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    auto r = wait_agents(agents);
    ::close(listener);
    std::string all = describe_all(r);
    EXPECT_EQ(r[0].exit_code, k_rendezvous_exit) << all;
    auto errors = error_lines(r[0].err);
    ASSERT_EQ(errors.size(), 1u) << all;
    EXPECT_TRUE(contains(errors[0], std::to_string(m_port)) && contains(errors[0], "in use"))
        << errors[0];
    EXPECT_FALSE(r[1].timed_out) << "node 1 waited forever on a port that is not a store\n" << all;
    EXPECT_EQ(r[1].exit_code, k_rendezvous_exit) << all;
    EXPECT_EQ(error_lines(r[1].err).size(), 1u) << all;
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

// The program on the rendezvous port accepts the connection, then resets it
// (it crashed, or it is not a store and gave up on the request): a rendezvous
// failure in one line, not a crash (c10d 1.13's client thread would die of the
// reset, std::terminate, exit 134: the store plugin probes the endpoint first).
// Over etcd the member is skipped like one that is down, and with none left
// that is the one line.
TEST_P(ForeignEndpoint, EndpointThatResetsTheConnectionIsAClearErrorNotACrash) {
    int listener = listen_on(m_port);
    ASSERT_GE(listener, 0) << "cannot listen on port " << m_port << ": " << std::strerror(errno);
    auto node1 =
        start_agent({1, "127.0.0.2", endpoint_is_m_port()},
                    with_conf({}, "join_timeout=5,read_timeout=5"), fake_worker({"print", "1"}));
    // Every connection the agent makes is accepted and, once its request has arrived,
    // reset; until the agent exits (bounded by its hang guard).
    std::vector<int> accepted;
    linger reset{1, 0};
    while (!node1->reap_if_exited() && Clock::now() < node1->deadline()) {
        pollfd pfd{listener, POLLIN, 0};
        if (::poll(&pfd, 1, 100) != 1) continue;
        int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        accepted.push_back(fd);
        pollfd request{fd, POLLIN, 0};
        ::poll(&request, 1, 10'000);
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        ::close(fd);
    }
    ::close(listener);
    auto r = node1->wait();
    snapshot_groups();
    ASSERT_FALSE(accepted.empty()) << "the agent never connected\n" << r.describe();
    EXPECT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(crash_sign(r.err), "") << r.describe();
    EXPECT_EQ(r.exit_code, k_rendezvous_exit) << r.describe();
    EXPECT_EQ(error_lines(r.err).size(), 1u) << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

// An agent stuck reaching the store (the endpoint is another program's
// listener, which never answers; read_timeout is long) loses its supervisor to
// SIGKILL: it must go too, at once, and not linger or spin until its store
// call gives up.
TEST_P(SilentStore, SupervisorKilledMidJoinLeavesNoAgentBehind) {
    auto node1 = start_agent_on_a_silent_store();
    if (HasFailure()) return;
    pid_t agent = agent_of(node1->pid());
    ASSERT_GT(agent, 0) << node1->err_so_far();
    allow_orphan_grace();
    node1->send_signal(SIGKILL);
    auto r = node1->wait();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.describe();
    // The listener stays silent: only the agent's own reaction can end it in time.
    bool gone = wait_until([&] { return !process_alive(agent); }, k_orphan_grace);
    EXPECT_TRUE(gone) << "the agent (pid " << agent << ") outlived its supervisor; /proc says: "
                      << describe({process_info(agent).value_or(ProcessInfo{})});
}

// Ctrl-C while an agent waits for the store's answer (read_timeout is long):
// ddprun stops at once with 130, nothing started.
TEST_P(SilentStore, InterruptWhileWaitingForTheStoreStopsAtOnce) {
    auto node1 = start_agent_on_a_silent_store();
    if (HasFailure()) return;
    node1->send_signal(SIGINT);
    auto r = node1->wait();
    EXPECT_FALSE(r.timed_out) << "the signal waited for the store's read_timeout\n" << r.describe();
    EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.describe();
    EXPECT_TRUE(contains(r.err, "received SIGINT while connecting to the rendezvous store"))
        << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "no worker may start";
}

// --- a stray client writes garbage under the job's keys --------------------------

struct GarbageCase {
    std::string name;
    std::string key;  // under ddprun/<run_id>/r0/
    bool mid_run;     // written once the workers run, else before node 1 joins
    // A failing agent's error names the key (a claim is named as "an
    // unreadable claim" in the duplicate-rank message instead).
    bool names_key = true;
    // Every agent fails with the line naming the key, at once (not after join_timeout).
    bool every_agent_names_key = false;
};

void PrintTo(const GarbageCase& c, std::ostream* os) {
    *os << c.name;
}

class StrayStoreClient : public Reliability, public ::testing::WithParamInterface<GarbageCase> {
  protected:
    int write_garbage(const std::vector<std::string>& operations) {
        return store_client(operations);
    }
};

// Whatever the stray client writes, every agent ends (bounded) with a clear
// one-line error or carries on; never a crash, never a hang.
TEST_P(StrayStoreClient, GarbageUnderTheJobsKeysGivesAClearErrorNeverACrash) {
    if (k_store_client.empty()) GTEST_SKIP() << "built without libtorch: no store to write to";
    const GarbageCase& c = GetParam();
    const std::string key = fmt::format("ddprun/{}/r0/{}", m_run_id, c.key);
    const std::string garbage = "\x01garbage{\"not\": json";
    auto flags = with_conf({"--shutdown_timeout=300"}, "join_timeout=10,heartbeat_timeout=2");
    // Mid-run, the workers wait for the test, so the garbage meets a running job.
    const std::string go = path("go");
    auto program = fake_worker(c.mid_run ? std::vector<std::string>{"ready", path("ready.{rank}"),
                                                                    "wait-file", go, "print", "1"}
                                         : std::vector<std::string>{"print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    ASSERT_TRUE(wait_until([&] { return port_accepts("127.0.0.1", m_port); }, 30s))
        << stderr_of(agents);
    if (!c.mid_run) {
        // Node 0 has joined; the key is written before node 1 joins.
        ASSERT_EQ(write_garbage(
                      {"wait", fmt::format("ddprun/{}/r0/info/0", m_run_id), "set", key, garbage}),
                  0)
            << read_text_file(path("store_client.log"));
    }
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    if (c.mid_run) {
        wait_ready(4, [&] { return stderr_of(agents); });
        if (HasFatalFailure()) return;
        const int written = write_garbage({"set", key, garbage});
        // Garbage that ends the job (the round's stop) may take the store's host away
        // before the client's confirming round trip: then every agent naming the key,
        // checked below, is what shows it was written.
        if (!c.every_agent_names_key) {
            ASSERT_EQ(written, 0) << read_text_file(path("store_client.log")) << stderr_of(agents);
        }
        // Longer than the heartbeat timeout: a garbage heartbeat has had its chance.
        std::this_thread::sleep_for(3s);
        write_text_file(go, "");
    }
    auto r = wait_agents(agents);
    std::string all = describe_all(r);
    for (std::size_t node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        EXPECT_FALSE(r[node].timed_out) << all;
        EXPECT_EQ(crash_sign(r[node].err), "") << all;
        EXPECT_TRUE(r[node].exit_code == k_rendezvous_exit || r[node].exit_code == 0)
            << "garbage in the store is a rendezvous failure, not a crash\n"
            << all;
        if (r[node].exit_code != 0) {
            EXPECT_FALSE(error_lines(r[node].err).empty()) << all;
        }
    }
    EXPECT_EQ(r[0].exit_code, r[1].exit_code) << "one job, one outcome\n" << all;
    // The agent that read the garbage names the key.
    bool named = false;
    for (const auto& result : r) {
        for (const auto& line : error_lines(result.err)) named = named || contains(line, key);
    }
    if (c.names_key && (r[0].exit_code != 0 || r[1].exit_code != 0)) {
        EXPECT_TRUE(named) << "the error must name " << key << "\n" << all;
    }
    for (std::size_t node = 0; node < 2 && c.every_agent_names_key; ++node) {
        auto lines = error_lines(r[node].err);
        EXPECT_TRUE(
            std::ranges::any_of(lines, [&](const auto& line) { return contains(line, key); }))
            << "node " << node << " must fail with the line naming " << key << "\n"
            << all;
    }
}

INSTANTIATE_TEST_SUITE_P(Reliability, StrayStoreClient,
                         ::testing::Values(GarbageCase{"JoinCounter", "joined", false, true, true},
                                           GarbageCase{"RankClaim", "claim/1", false, false},
                                           GarbageCase{"Membership", "result", false},
                                           GarbageCase{"StopRecord", "stop", true, true, true},
                                           GarbageCase{"Heartbeat", "hb/1", true},
                                           GarbageCase{"FinishedCounter", "finished", true}),
                         [](const ::testing::TestParamInfo<GarbageCase>& param_info) {
                             return param_info.param.name;
                         });

// A client of the store stopped halfway through a request for longer than heartbeat_timeout
// (an agent SIGSTOPped, or cut off, between two of its writes: c10d 1.13's client writes a
// request in several). c10d's server waits for the rest and serves nobody else, so every
// agent would end 75 "the rendezvous store stopped answering"; the plugin's bound on
// that wait drops the stalled connection and the job goes on.
TEST_F(RendezvousFaults, AClientStoppedHalfwayThroughARequestDoesNotStopTheJob) {
    if (k_store_client.empty()) GTEST_SKIP() << "built without libtorch: no c10d store";
    auto flags = with_conf({"--shutdown_timeout=300"}, "join_timeout=20,heartbeat_timeout=2");
    const std::string go = path("go");
    auto program = fake_worker({"ready", path("ready.{rank}"), "wait-file", go, "print", "1"});
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_agent({0, "127.0.0.1"}, flags, program));
    agents.push_back(start_agent({1, "127.0.0.2"}, flags, program));
    wait_ready(4, [&] { return stderr_of(agents); });
    if (HasFatalFailure()) return;
    struct Socket {
        int fd;
        ~Socket() { ::close(fd); }
    } stalled{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(m_port));
    ASSERT_EQ(::connect(stalled.fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0)
        << std::strerror(errno);
    // A request's first byte (1.13: a SET without its key; 2.x: a VALIDATE without its
    // magic number), then nothing: the store's host drops the connection...
    ASSERT_EQ(::send(stalled.fd, "", 1, MSG_NOSIGNAL), 1);
    pollfd pfd{stalled.fd, POLLIN, 0};
    EXPECT_EQ(::poll(&pfd, 1, 30'000), 1) << "the store still waits for the rest of the request";
    // ...and the job outlives heartbeat_timeout (2 s) with the stalled client still there,
    // as it did not: this wait is the fault's length, not an ordering.
    std::this_thread::sleep_for(3s);
    write_text_file(go, "");
    auto r = wait_agents(agents);
    std::string all = describe_all(r);
    for (std::size_t node = 0; node < 2; ++node) {
        SCOPED_TRACE(fmt::format("node {}", node));
        EXPECT_FALSE(r[node].timed_out) << all;
        EXPECT_EQ(r[node].exit_code, 0) << all;
    }
}

// --- a network partition between the agents ------------------------------------

// Two network namespaces joined by a veth pair: node 0 at 10.231.0.1, node 1
// at 10.231.0.2. Taking the link down partitions them; the namespaces and
// the link are removed at the end.
class Partition {
  public:
    Partition() {
        m_suffix = std::to_string(::getpid());
        m_a = "ddprun-rel-a-" + m_suffix;
        m_b = "ddprun-rel-b-" + m_suffix;
        const std::string veth_a = "dra" + m_suffix;
        const std::string veth_b = "drb" + m_suffix;
        m_link = veth_a;
        for (const auto& command :
             {"ip netns add " + m_a, "ip netns add " + m_b,
              "ip link add " + veth_a + " type veth peer name " + veth_b,
              "ip link set " + veth_a + " netns " + m_a, "ip link set " + veth_b + " netns " + m_b,
              "ip -n " + m_a + " addr add 10.231.0.1/24 dev " + veth_a,
              "ip -n " + m_b + " addr add 10.231.0.2/24 dev " + veth_b,
              "ip -n " + m_a + " link set lo up", "ip -n " + m_b + " link set lo up",
              "ip -n " + m_a + " link set " + veth_a + " up",
              "ip -n " + m_b + " link set " + veth_b + " up"}) {
            if (!sh(command)) {
                m_error = "'" + command + "' failed";
                return;
            }
        }
        m_fd_a = ::open(("/run/netns/" + m_a).c_str(), O_RDONLY | O_CLOEXEC);
        m_fd_b = ::open(("/run/netns/" + m_b).c_str(), O_RDONLY | O_CLOEXEC);
        if (m_fd_a < 0 || m_fd_b < 0) m_error = "cannot open /run/netns";
    }
    ~Partition() {
        if (m_fd_a >= 0) ::close(m_fd_a);
        if (m_fd_b >= 0) ::close(m_fd_b);
        sh("ip netns del " + m_a);
        sh("ip netns del " + m_b);
    }
    Partition(const Partition&) = delete;
    Partition& operator=(const Partition&) = delete;

    bool ready() const { return m_error.empty(); }
    const std::string& error() const { return m_error; }
    int netns_a() const { return m_fd_a; }
    int netns_b() const { return m_fd_b; }
    bool cut() { return sh("ip -n " + m_a + " link set " + m_link + " down"); }

  private:
    static bool sh(const std::string& command) {
        return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
    }

    std::string m_suffix, m_a, m_b, m_link, m_error;
    int m_fd_a = -1;
    int m_fd_b = -1;
};

TEST_F(RendezvousFaults, NetworkPartitionStopsBothSides) {
    Partition net;
    if (!net.ready()) {
        GTEST_SKIP() << "cannot create network namespaces here (" << net.error()
                     << "); the partition test needs root and iproute2";
    }
    const std::string conf = "join_timeout=20,heartbeat_timeout=2,read_timeout=5";
    Pipe out0, err0, out1, err1;
    CustomDdprun node0(partitioned_node(0, conf), job_env(),
                       {.out = out0.write, .err = err0.write, .netns_fd = net.netns_a()});
    CustomDdprun node1(partitioned_node(1, conf), job_env(),
                       {.out = out1.write, .err = err1.write, .netns_fd = net.netns_b()});
    out0.close_write();
    err0.close_write();
    out1.close_write();
    err1.close_write();
    StreamReader o0(out0.release_read()), e0(err0.release_read());
    StreamReader o1(out1.release_read()), e1(err1.release_read());
    wait_ready(4, [&] { return "node 0:\n" + e0.text() + "\nnode 1:\n" + e1.text(); });
    if (HasFatalFailure()) return;
    ASSERT_TRUE(net.cut());
    auto code0 = node0.wait_exit(k_node_guard);
    auto code1 = node1.wait_exit(k_node_guard);
    if (!code0 || !code1) allow_orphan_grace();  // SIGKILLed at the end of the test
    snapshot_groups();
    std::string all = "node 0:\n" + e0.text() + "\nnode 1:\n" + e1.text();
    ASSERT_TRUE(code0) << "node 0 did not notice the partition\n" << all;
    ASSERT_TRUE(code1) << "node 1 did not notice the partition\n" << all;
    EXPECT_EQ(*code0, k_rendezvous_exit) << all;
    EXPECT_EQ(*code1, k_rendezvous_exit) << all;
    EXPECT_FALSE(error_lines(e0.text()).empty()) << all;
    EXPECT_FALSE(error_lines(e1.text()).empty()) << all;
}

// An elastic job (--nnodes=2:3) with node 0 and node 1 on one side of the link and
// node 2 on the other: cut off, node 2 stops and leaves (75), and the other two go on
// as a round of their own.
TEST_F(RendezvousFaults, ElasticNetworkPartitionDropsTheNodeCutOff) {
    Partition net;
    if (!net.ready()) {
        GTEST_SKIP() << "cannot create network namespaces here (" << net.error()
                     << "); the partition test needs root and iproute2";
    }
    const std::string conf =
        "join_timeout=20,heartbeat_timeout=2,read_timeout=5,last_call_timeout=30";
    auto args_of = [&](bool host, const std::string& addr) {
        return std::vector<std::string>{
            "--nnodes=2:3",
            "--nproc_per_node=1",
            fmt::format("--rdzv_endpoint=10.231.0.1:{}", m_port),
            "--rdzv_id=" + m_run_id,
            fmt::format("--rdzv_conf={},is_host={}", conf, host ? 1 : 0),
            "--shutdown_timeout=5",
            "--local_addr=" + addr,
            k_fake_worker,
            "ready",
            m_dir + "/r{round}.{rank}.of{world}",
            "sleep",
            "300"};
    };
    Pipe err0, err1, err2;
    CustomDdprun node0(args_of(true, "10.231.0.1"), job_env(),
                       {.err = err0.write, .netns_fd = net.netns_a()});
    CustomDdprun node1(args_of(false, "10.231.0.1"), job_env(),
                       {.err = err1.write, .netns_fd = net.netns_a()});
    CustomDdprun node2(args_of(false, "10.231.0.2"), job_env(),
                       {.err = err2.write, .netns_fd = net.netns_b()});
    err0.close_write();
    err1.close_write();
    err2.close_write();
    StreamReader e0(err0.release_read()), e1(err1.release_read()), e2(err2.release_read());
    auto all = [&] {
        return "node 0:\n" + e0.text() + "\nnode 1:\n" + e1.text() + "\nnode 2:\n" + e2.text();
    };
    for (int rank = 0; rank < 3; ++rank)
        ASSERT_TRUE(wait_for_file(path(fmt::format("r0.{}.of3", rank)), 30s))
            << "round 0 never ran rank " << rank << "\n"
            << all();
    ASSERT_TRUE(net.cut());
    auto cut_off = node2.wait_exit(k_node_guard);
    bool reformed =
        wait_for_file(path("r1.0.of2"), k_node_guard) && wait_for_file(path("r1.1.of2"), 5s);
    ::kill(node0.pid(), SIGTERM);
    ::kill(node1.pid(), SIGTERM);
    auto code0 = node0.wait_exit(k_node_guard);
    auto code1 = node1.wait_exit(k_node_guard);
    if (!cut_off || !code0 || !code1) allow_orphan_grace();  // SIGKILLed at the end of the test
    snapshot_groups();
    ASSERT_TRUE(cut_off) << "node 2 did not notice the partition\n" << all();
    EXPECT_EQ(*cut_off, k_rendezvous_exit) << all();
    EXPECT_TRUE(reformed) << "nodes 0 and 1 did not go on without node 2\n" << all();
    EXPECT_EQ(code0, 143) << all();
    EXPECT_EQ(code1, 143) << all();
    EXPECT_FALSE(error_lines(e2.text()).empty()) << all();
}

// A node cut off from the store's host, then every node's supervisor SIGKILLed (a
// cleanup that kills the ddprun it started, on each node). Node 1's agent, killed,
// tells the others its end best effort within 1 s; were it to wait for the store, it
// would linger for read_timeout (60 s here), spinning a CPU in the store's reconnect
// loop.
TEST_F(RendezvousFaults, AKilledAgentCutOffFromTheStoreLeavesAtOnce) {
    Partition net;
    if (!net.ready()) {
        GTEST_SKIP() << "cannot create network namespaces here (" << net.error()
                     << "); the partition test needs root and iproute2";
    }
    const std::string conf = "join_timeout=20,heartbeat_timeout=30,read_timeout=60";
    Pipe err0, err1;
    CustomDdprun node0(partitioned_node(0, conf), job_env(),
                       {.err = err0.write, .netns_fd = net.netns_a()});
    CustomDdprun node1(partitioned_node(1, conf), job_env(),
                       {.err = err1.write, .netns_fd = net.netns_b()});
    err0.close_write();
    err1.close_write();
    StreamReader e0(err0.release_read()), e1(err1.release_read());
    wait_ready(4, [&] { return "node 0:\n" + e0.text() + "\nnode 1:\n" + e1.text(); });
    if (HasFatalFailure()) return;
    const pid_t agent1 = agent_of(node1.pid());
    ASSERT_GT(agent1, 0);
    ASSERT_TRUE(net.cut());
    allow_orphan_grace();
    ::kill(node0.pid(), SIGKILL);
    ::kill(node1.pid(), SIGKILL);
    EXPECT_TRUE(node0.wait_exit(k_node_guard));
    EXPECT_TRUE(node1.wait_exit(k_node_guard));
    // 1 s for what it tells the others, and its workers' end: 5 s is a hang guard.
    EXPECT_TRUE(wait_until([&] { return !process_alive(agent1); }, 5s))
        << "node 1's agent outlived its supervisor; /proc says: "
        << describe({process_info(agent1).value_or(ProcessInfo{})}) << "\nnode 1:\n"
        << e1.text();
}

// ============================================================================
// Bad input: exit 2, one line that names the problem, nothing started
// ============================================================================

struct BadInput {
    std::string name;
    std::vector<std::string> args;  // before the program
    std::vector<std::pair<std::string, std::string>> env;
    std::string mentions;      // the one line must contain this
    bool with_program = true;  // fake_worker follows the flags
};

void PrintTo(const BadInput& c, std::ostream* os) {
    *os << c.name;
}

// Every value flag with an empty, negative, zero, huge, non-numeric and
// wrong-type value, where that value is wrong for it; a value a flag accepts
// (--master_port=0 picks a free port, --max_restarts=0 ...) is not listed.
std::vector<BadInput> bad_flag_values() {
    const std::string huge = "99999999999999999999";
    struct Flag {
        std::string name;
        std::vector<std::string> bad;
    };
    const std::vector<Flag> flags = {
        {"nnodes", {"", "-1", "0", huge, "abc", "1.5", "2:1", "0:4", "1:" + huge}},
        {"nproc_per_node", {"", "-1", "0", huge, "abc", "1.5", "gpus"}},
        {"node_rank", {"", "-1", "1", huge, "abc", "1.5"}},
        {"master_addr", {"", " ", "a b"}},
        {"local_addr", {" ", "a b"}},
        {"master_port", {"", "-1", "65536", huge, "abc", "1.5"}},
        {"rdzv_backend", {"", "etcd-v2", "zmq", "1"}},
        {"rdzv_endpoint", {":29400", "h:-1", "h:65536", "h:abc", "h:" + huge, "[::1"}},
        {"rdzv_id", {""}},
        {"rdzv_conf",
         {"join_timeout", "=5", "join_timeout=-1", "join_timeout=0", "join_timeout=abc",
          "join_timeout=" + huge, "heartbeat_timeout=nan", "is_host=maybe", "protocol=ftp",
          "password=x", "ssl_cert=c.pem", "user=u"}},
        {"max_restarts", {"", "-1", huge, "abc", "1.5"}},
        {"shutdown_timeout", {"", "-1", "1e300", "abc", "inf", "nan"}},
        {"signals_to_handle", {"", "SIGFOO", "SIGKILL", "-1", "0", "99999"}},
        {"monitor_interval", {"", "-1", "0", "abc", "nan"}},
        {"start_method", {"", "thread", "1"}},
        {"role", {"", " "}},
        {"redirects", {"", "-1", "4", "abc", "0:9", "x:1", huge, "0:1,0:2"}},
        {"tee", {"", "-1", "4", "abc", "0:9", huge}},
        {"local_ranks_filter", {"-1", "abc", "0,,1", "0;1"}},
        {"log-prefix", {"{bogus}", "{rank"}},
        {"numa-binding", {"", "nodes", "1"}},
    };
    std::vector<BadInput> cases;
    for (const auto& flag : flags) {
        for (std::size_t i = 0; i < flag.bad.size(); ++i) {
            std::string id = flag.name + "_" + std::to_string(i);
            std::replace(id.begin(), id.end(), '-', '_');
            cases.push_back({id, {"--" + flag.name + "=" + flag.bad[i]}, {}, "--" + flag.name});
        }
    }
    // Flags that take no value, given one.
    for (std::string flag :
         {"standalone", "no_python", "virtual_local_rank", "dry-run", "all-devices", "module"}) {
        std::string id = flag + "_with_a_value";
        std::replace(id.begin(), id.end(), '-', '_');
        cases.push_back({id, {"--" + flag + "=1"}, {}, "--" + flag});
    }
    return cases;
}

std::vector<BadInput> bad_combinations() {
    return {
        {"MissingValueAtTheEnd", {"--nnodes"}, {}, "--nnodes"},
        {"NoProgram", {"--nproc_per_node=2"}, {}, "program", false},
        {"StandaloneWithTwoNodes", {"--standalone", "--nnodes=2"}, {}, "--standalone"},
        {"ModuleAndNoPython", {"-m", "--no_python"}, {}, "--no_python"},
        {"QuietAndVerbose", {"-q", "-v"}, {}, "-q"},
        {"CpuAndNumaBinding", {"--cpu-binding", "--numa-binding=node"}, {}, "--cpu-binding"},
        {"RunPathAndModule", {"--run_path", "-m"}, {}, "--run_path"},
        {"UnknownFlag", {"--frobnicate"}, {}, "--frobnicate"},
        {"MisspelledFlag", {"--nprocs_per_node=2"}, {}, "--nproc_per_node"},
        {"SingleDashLongFlag", {"-nproc_per_node=2"}, {}, "--nproc_per_node"},
        {"AmbiguousPrefix", {"--master", "x"}, {}, "ambiguous"},
        {"UnknownShortFlag", {"-x"}, {}, "-x"},
    };
}

std::vector<BadInput> bad_environment() {
    const std::vector<std::pair<std::string, std::string>> values = {
        {"PET_NNODES", "abc"},
        {"PET_NNODES", "0"},
        {"PET_NNODES", "99999999999999999999"},
        {"PET_NNODES", "4:2"},
        {"PET_NPROC_PER_NODE", "-1"},
        {"PET_NODE_RANK", "x"},
        {"PET_MASTER_PORT", "99999"},
        {"PET_MAX_RESTARTS", "-1"},
        {"PET_RDZV_BACKEND", "etcd-v2"},
        {"PET_RDZV_ENDPOINT", "h:x"},
        {"PET_RDZV_CONF", "oops"},
        {"PET_STANDALONE", "maybe"},
        {"PET_SHUTDOWN_TIMEOUT", "nan"},
        {"PET_MONITOR_INTERVAL", "0"},
        {"PET_REDIRECTS", "9"},
        {"PET_TEE", "x"},
        {"PET_LOCAL_RANKS_FILTER", "a"},
        {"PET_SIGNALS_TO_HANDLE", "SIGNOPE"},
        {"PET_NO_PYTHON", "2"},
        {"PET_VIRTUAL_LOCAL_RANK", "maybe"},
        {"PET_START_METHOD", "thread"},
        {"DDPRUN_NNODES", "-3"},
        {"DDPRUN_LOG_PREFIX", "{x}"},
        {"LOGLEVEL", "LOUD"},
    };
    std::vector<BadInput> cases;
    for (std::size_t i = 0; i < values.size(); ++i) {
        const auto& [name, value] = values[i];
        cases.push_back({fmt::format("{}_{}", name, i), {}, {{name, value}}, name + "="});
    }
    return cases;
}

class BadInputs : public Reliability, public ::testing::WithParamInterface<BadInput> {};

TEST_P(BadInputs, ExitTwoWithOneLineNamingItAndNothingStarted) {
    const BadInput& c = GetParam();
    std::vector<std::string> args = c.args;
    if (c.with_program) args.insert(args.end(), {k_fake_worker, "print", "1"});
    RunOptions options;
    options.env = c.env;
    options.timeout = 20s;
    auto r = run_checked(args, options);
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.exit_code, k_usage_exit) << r.describe();
    auto lines = non_empty_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << "one line, no help dump, no stack trace\n" << r.describe();
    EXPECT_TRUE(lines[0].starts_with("ddprun: error: ")) << lines[0];
    EXPECT_TRUE(contains(lines[0], c.mentions))
        << "should name '" << c.mentions << "': " << lines[0];
    EXPECT_EQ(crash_sign(r.err), "") << r.describe();
    EXPECT_TRUE(r.out.empty()) << r.describe();
    EXPECT_TRUE(recorded_pids().empty()) << "nothing may start";
}

std::string bad_input_name(const ::testing::TestParamInfo<BadInput>& param_info) {
    return param_info.param.name;
}

INSTANTIATE_TEST_SUITE_P(FlagValues, BadInputs, ::testing::ValuesIn(bad_flag_values()),
                         bad_input_name);
INSTANTIATE_TEST_SUITE_P(Combinations, BadInputs, ::testing::ValuesIn(bad_combinations()),
                         bad_input_name);
INSTANTIATE_TEST_SUITE_P(Environment, BadInputs, ::testing::ValuesIn(bad_environment()),
                         bad_input_name);

class BadLogDir : public Reliability {
  protected:
    void expect_refused(const std::string& log_dir) {
        auto r =
            run_checked({"--nproc_per_node=2", "--log_dir", log_dir, k_fake_worker, "print", "1"});
        ASSERT_FALSE(r.timed_out) << r.describe();
        EXPECT_EQ(r.exit_code, k_usage_exit) << r.describe();
        auto lines = non_empty_lines(r.err);
        ASSERT_EQ(lines.size(), 1u) << r.describe();
        EXPECT_TRUE(contains(lines[0], "--log_dir=" + log_dir)) << lines[0];
        EXPECT_TRUE(recorded_pids().empty()) << "nothing may start";
    }
};

TEST_F(BadLogDir, AFileIsRefused) {
    write_text_file(path("a_file"), "x");
    expect_refused(path("a_file"));
    expect_refused(path("a_file") + "/below");
}

TEST_F(BadLogDir, AnUnwritableDirectoryIsRefused) {
    // Root writes anywhere mode bits forbid: a read-only mount stops even root.
    SmallFilesystem read_only(path("ro"), "size=16k");
    if (!read_only.mounted()) {
        // Not root: plain mode bits do it.
        std::filesystem::create_directories(path("ro"));
        ::chmod(path("ro").c_str(), 0555);
        if (::geteuid() == 0) GTEST_SKIP() << "root without mount: " << read_only.error();
    } else if (::mount(nullptr, path("ro").c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) !=
               0) {
        GTEST_SKIP() << "cannot remount read-only: " << std::strerror(errno);
    }
    expect_refused(path("ro"));
    expect_refused(path("ro") + "/sub");
}

}  // namespace
}  // namespace ddprun_it
