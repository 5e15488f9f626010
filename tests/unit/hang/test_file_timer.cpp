// torch's FileTimer protocol (file_timer.hpp): the parser and the timer rules
// table-driven, the server against a real FIFO and real child processes
// (tests/fake_worker) that really get the signals.
#include "ddprun/hang/file_timer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ddprun/base/fd.hpp"
#include "support/build_paths.hpp"
#include "workers/worker_fixture.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using testing::TempDir;

constexpr auto k_hang_guard = 20s;

double wall_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
        lines.push_back(text.substr(start, end - start));
    return lines;
}

void write_file(const std::string& path, const std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

std::string request_line(pid_t pid, const std::string& scope, double expiration, int signal) {
    return fmt::format(
        R"({{"version": 1, "pid": {}, "scope_id": "{}", "expiration_time": {:.6f}, "signal": {}}})",
        pid, scope, expiration, signal);
}

// --- parsing -------------------------------------------------------------------

TEST(FileTimerParse, ReadsTorchsClientLines) {
    // Exactly what FileTimerClient.to_json() writes (json.dumps' separators).
    auto acquire = parse_file_timer_request(
        R"({"version": 1, "pid": 4242, "scope_id": "train.py#12", "expiration_time": 1764618000.25, "signal": 9})");
    ASSERT_TRUE(acquire) << acquire.error();
    EXPECT_EQ(acquire->pid, 4242);
    EXPECT_EQ(acquire->scope_id, "train.py#12");
    EXPECT_DOUBLE_EQ(acquire->expiration_time, 1764618000.25);
    EXPECT_EQ(acquire->signal, 9);
    EXPECT_FALSE(acquire->is_release());

    auto release = parse_file_timer_request(
        R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": -1, "signal": 0})");
    ASSERT_TRUE(release) << release.error();
    EXPECT_TRUE(release->is_release());
    EXPECT_EQ(release->signal, 0);

    // torch's server reads neither "version" nor unknown fields.
    auto lean = parse_file_timer_request(
        R"({"pid": 7, "scope_id": "", "expiration_time": 5, "signal": -1, "extra": [1]})");
    ASSERT_TRUE(lean) << lean.error();
    EXPECT_EQ(lean->signal, -1);
}

TEST(FileTimerParse, RefusesWhatIsNotARequest) {
    const std::vector<std::string> bad = {
        "",
        "not json",
        "{\"pid\": 1",
        "[1, 2]",
        "42",
        R"({"scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": "12", "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": -5, "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": 12.5, "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": 99999999999, "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": 18446744073709551615, "scope_id": "s", "expiration_time": 1, "signal": 9})",
        R"({"pid": 12, "scope_id": 3, "expiration_time": 1, "signal": 9})",
        R"({"pid": 12, "expiration_time": 1, "signal": 9})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": "1", "signal": 9})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1e300, "signal": 9})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1e999, "signal": 9})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": NaN, "signal": 9})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": 65})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": -65})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": 9.0})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": true})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1, "signal": 4294967305})",
        R"({"pid": 12, "scope_id": "s", "expiration_time": 1})",
        R"({"pid": 12, "scope_id": {"a": {"b": {"c": {"d": {}}}}}, "expiration_time": 1, "signal": 9})",
        request_line(12, std::string(5000, 'x'), 1, 9),  // over PIPE_BUF
    };
    for (const auto& line : bad) {
        auto parsed = parse_file_timer_request(line);
        EXPECT_FALSE(parsed) << "accepted: " << line.substr(0, 200);
    }
}

// --- the timer rules ------------------------------------------------------------

FileTimerRequest acquire(pid_t pid, std::string scope, double expiration, int signal = SIGKILL) {
    return FileTimerRequest{pid, std::move(scope), expiration, signal};
}
FileTimerRequest release(pid_t pid, std::string scope) {
    return FileTimerRequest{pid, std::move(scope), -1, 0};
}

TEST(FileTimerTable, ARequestForAHeldScopeReplacesItAndAReleaseDropsIt) {
    FileTimerTable table;
    ASSERT_TRUE(table.apply(acquire(10, "step", 100), 90, 100));
    ASSERT_TRUE(table.apply(acquire(10, "step", 200), 190, 100));
    EXPECT_EQ(table.size(), 1u);
    EXPECT_EQ(table.next_expiration(), 200);
    EXPECT_TRUE(table.take_expired(150).empty()) << "the later request replaced the earlier one";
    ASSERT_TRUE(table.apply(release(10, "step"), 195, 100));
    EXPECT_EQ(table.size(), 0u);
    EXPECT_FALSE(table.next_expiration());
    EXPECT_TRUE(table.take_expired(1000).empty());
    // Releasing what is not held changes nothing.
    EXPECT_TRUE(table.apply(release(10, "other"), 195, 100));
    EXPECT_EQ(table.size(), 0u);
}

TEST(FileTimerTable, APidWithAnExpiredTimerLosesAllItsTimers) {
    FileTimerTable table;
    table.apply(acquire(10, "outer", 150), 100, 100);
    table.apply(acquire(10, "inner", 120), 110, 100);
    table.apply(acquire(11, "step", 300), 100, 100);
    auto expired = table.take_expired(130);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_EQ(expired[0].pid, 10);
    EXPECT_EQ(expired[0].scope_id, "inner");
    EXPECT_DOUBLE_EQ(expired[0].set_for, 10);
    EXPECT_FALSE(table.holds(10)) << "outer goes with it, as in torch's server";
    EXPECT_TRUE(table.holds(11));
    EXPECT_EQ(table.pids(), std::vector<pid_t>{11});
}

TEST(FileTimerTable, TheEarliestExpiredTimerWithASignalIsChosen) {
    FileTimerTable table;
    table.apply(acquire(10, "a", 100, 0), 90, 100);
    table.apply(acquire(10, "b", 105, SIGTERM), 90, 100);
    table.apply(acquire(10, "c", 110, SIGKILL), 90, 100);
    auto expired = table.take_expired(200);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_EQ(expired[0].scope_id, "b");
    EXPECT_EQ(expired[0].signal, SIGTERM);

    // None with a signal: the earliest, and no signal to send.
    table.apply(acquire(12, "x", 100, 0), 90, 100);
    table.apply(acquire(12, "y", 101, -3), 90, 100);
    expired = table.take_expired(200);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_EQ(expired[0].scope_id, "x");
    EXPECT_EQ(expired[0].signal, 0);
    EXPECT_EQ(table.size(), 0u);
}

TEST(FileTimerTable, ATimerArrivingLateHasNoKnownDurationAndTheTableIsBounded) {
    FileTimerTable table;
    ASSERT_TRUE(table.apply(acquire(10, "late", 100), 105, 2));
    ASSERT_TRUE(table.apply(acquire(10, "b", 200), 105, 2));
    EXPECT_FALSE(table.apply(acquire(11, "c", 200), 105, 2)) << "a third timer is one too many";
    EXPECT_TRUE(table.apply(acquire(10, "b", 300), 105, 2)) << "replacing one is not";
    auto expired = table.take_expired(106);
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_LT(expired[0].set_for, 0);
}

// --- the server, with a real FIFO and real processes -------------------------------

// A child process that sleeps (fake_worker), killed and reaped at the end of the test.
class Child {
  public:
    explicit Child(std::vector<std::string> args, const std::string& pidfile = "") {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
        m_out.reset(fds[0]);
        UniqueFd write_end(fds[1]);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
        args.insert(args.begin(), ddprun_test::build_paths::fake_worker);
        std::vector<char*> argv;
        for (auto& arg : args) argv.push_back(arg.data());
        argv.push_back(nullptr);
        std::string pidfile_env = "FAKE_WORKER_PIDFILE=" + pidfile;
        std::string rank_env = "RANK=0";
        std::vector<char*> envp{rank_env.data(), pidfile_env.data(), nullptr};
        // Default signal mask and dispositions in the child, whatever an earlier test in
        // this process left blocked (an Agent blocks the stop signals and SIGCHLD).
        posix_spawnattr_t attributes;
        posix_spawnattr_init(&attributes);
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setsigdefault(&attributes, &all);
        posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        const int spawned = posix_spawn(&m_pid, ddprun_test::build_paths::fake_worker, &actions,
                                        &attributes, argv.data(), envp.data());
        posix_spawnattr_destroy(&attributes);
        if (spawned != 0) throw std::runtime_error("posix_spawn");
        posix_spawn_file_actions_destroy(&actions);
        m_exited.reset(static_cast<int>(::syscall(SYS_pidfd_open, m_pid, 0)));
        if (!m_exited) throw std::runtime_error("pidfd_open");
    }
    ~Child() {
        if (!m_reaped) {
            ::kill(m_pid, SIGKILL);
            ::waitpid(m_pid, nullptr, 0);
        }
    }
    pid_t pid() const { return m_pid; }
    // Readable once the child has exited.
    int exit_fd() const { return m_exited.get(); }
    // Blocks (bounded) until the child printed a line: it has run its earlier actions.
    bool wait_for_line() const {
        pollfd p{m_out.get(), POLLIN, 0};
        if (::poll(&p, 1, 10000) != 1) return false;
        char buf[256];
        return ::read(m_out.get(), buf, sizeof buf) > 0;
    }
    bool alive() {
        int status = 0;
        if (m_reaped) return false;
        return ::waitpid(m_pid, &status, WNOHANG) == 0;
    }
    // The signal that ended it (0 if it exited); reaps it.
    int reap_signal() {
        int status = 0;
        if (::waitpid(m_pid, &status, 0) != m_pid) return -1;
        m_reaped = true;
        return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }

  private:
    pid_t m_pid = -1;
    bool m_reaped = false;
    UniqueFd m_out;
    UniqueFd m_exited;
};

// What a FileTimerClient does: open without blocking, write one line, close.
void send(const std::string& path, const std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    ASSERT_TRUE(fd) << "open " << path << ": " << std::strerror(errno);
    ASSERT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

class FileTimerServerTest : public ::testing::Test {
  protected:
    TempDir dir;
    boost::asio::io_context io;
    std::set<pid_t> workers;  // the pids the server may signal, as rank 0
    std::string fifo = (dir.path() / "timer.fifo").string();

    std::unique_ptr<FileTimerServer> make_server() {
        auto server = FileTimerServer::create(io, fifo, [this](pid_t pid) {
            return workers.contains(pid) ? std::optional<int>(0) : std::nullopt;
        });
        EXPECT_TRUE(server) << server.error().message;
        return server ? std::move(*server) : nullptr;
    }

    // Runs the loop until `child` exited or the hang guard; false on the guard.
    bool run_until_exited(const Child& child) {
        bool exited = false;
        bool expired = false;
        boost::asio::posix::stream_descriptor watch(io, ::dup(child.exit_fd()));
        watch.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                         [&](boost::system::error_code ec) { exited = !ec; });
        boost::asio::steady_timer guard(io, k_hang_guard);
        guard.async_wait([&](boost::system::error_code ec) { expired = !ec; });
        io.restart();
        while (!exited && !expired) io.run_one();
        guard.cancel();
        watch.cancel();
        io.restart();
        io.poll();  // the cancelled handlers
        return exited;
    }
};

TEST_F(FileTimerServerTest, AnExpiredScopeGetsTheSignalItAskedFor) {
    Child worker({"sleep", "30"});
    workers.insert(worker.pid());
    auto server = make_server();
    ASSERT_TRUE(server);
    EXPECT_EQ(server->path(), fifo);
    send(fifo, request_line(worker.pid(), "step", wall_now() + 0.2, SIGTERM) + "\n");
    ASSERT_TRUE(run_until_exited(worker)) << "the timer never fired";
    EXPECT_EQ(worker.reap_signal(), SIGTERM);
    EXPECT_EQ(server->timer_count(), 0u);
}

TEST_F(FileTimerServerTest, AReleasedScopeDoesNotFire) {
    Child released({"sleep", "30"});
    Child witness({"sleep", "30"});
    workers = {released.pid(), witness.pid()};
    auto server = make_server();
    ASSERT_TRUE(server);
    const double now = wall_now();
    // The witness's timer expires after the released one would have: once it
    // fired, the released one had its chance.
    send(fifo, request_line(released.pid(), "step", now + 0.2, SIGKILL) + "\n");
    send(fifo, request_line(witness.pid(), "step", now + 0.5, SIGKILL) + "\n");
    send(fifo, request_line(released.pid(), "step", -1, 0) + "\n");
    ASSERT_TRUE(run_until_exited(witness));
    EXPECT_EQ(witness.reap_signal(), SIGKILL);
    EXPECT_TRUE(released.alive()) << "a released scope must not fire";
}

TEST_F(FileTimerServerTest, OnlyWorkersAndTheirDescendantsAreSignalled) {
    const std::string pidfile = (dir.path() / "pids").string();
    Child worker({"spawn-grandchild", "print", "1", "sleep", "30"}, pidfile);
    Child stranger({"sleep", "30"});
    workers.insert(worker.pid());
    ASSERT_TRUE(worker.wait_for_line());
    pid_t grandchild = 0;
    for (const auto& line : lines_of(testing::read_file(pidfile)))
        if (line.find("grandchild") != std::string::npos) grandchild = std::stoi(line);
    ASSERT_GT(grandchild, 0) << testing::read_file(pidfile);
    UniqueFd grandchild_exit(static_cast<int>(::syscall(SYS_pidfd_open, grandchild, 0)));
    ASSERT_TRUE(grandchild_exit);
    // Whatever the test finds, the grandchild (it sleeps forever) must not outlive it;
    // through its pidfd, so a reused pid is never hit.
    struct KillOnExit {
        int pidfd;
        ~KillOnExit() { ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0); }
    } kill_grandchild{grandchild_exit.get()};

    auto server = make_server();
    ASSERT_TRUE(server);
    // The stranger's request is refused as it arrives, before the worker's timer fires.
    send(fifo, request_line(stranger.pid(), "evil", wall_now() - 1, SIGKILL) + "\n");
    send(fifo, request_line(grandchild, "loader", wall_now(), SIGKILL) + "\n");
    bool exited = false;
    boost::asio::posix::stream_descriptor watch(io, ::dup(grandchild_exit.get()));
    watch.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [&](boost::system::error_code ec) { exited = !ec; });
    boost::asio::steady_timer guard(io, k_hang_guard);
    guard.async_wait([&](boost::system::error_code) { io.stop(); });
    while (!exited && !io.stopped()) io.run_one();
    EXPECT_TRUE(exited) << "a worker's own child is the job's: it is signalled";
    EXPECT_TRUE(stranger.alive()) << "a process outside the job must never be signalled";
    EXPECT_TRUE(worker.alive());
    EXPECT_EQ(server->timer_count(), 0u);
}

TEST_F(FileTimerServerTest, MalformedLinesAreSkippedAndLaterRequestsStillServed) {
    Child worker({"sleep", "30"});
    workers.insert(worker.pid());
    auto server = make_server();
    ASSERT_TRUE(server);
    send(fifo, "garbage\n{\"pid\": 1\n\n[]\n" + std::string(4000, '{') + "\n");
    send(fifo, std::string(3000, 'x'));  // a line over PIPE_BUF, in two writes
    send(fifo, std::string(3000, 'y') + "\n");
    send(fifo, request_line(worker.pid(), "s", wall_now() + 1e9, 100) + "\n");  // no such signal
    // Every client above closed; the next one is still heard (the server holds a write end).
    send(fifo, request_line(worker.pid(), "step", wall_now() + 0.1, SIGUSR2) + "\n");
    ASSERT_TRUE(run_until_exited(worker));
    EXPECT_EQ(worker.reap_signal(), SIGUSR2);
}

TEST_F(FileTimerServerTest, AnExistingFifoIsReplacedAndRemovedAtTheEnd) {
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    {
        auto server = make_server();
        ASSERT_TRUE(server);
        struct stat info {};
        ASSERT_EQ(::stat(fifo.c_str(), &info), 0);
        EXPECT_TRUE(S_ISFIFO(info.st_mode));
        EXPECT_EQ(info.st_mode & 0777, 0600u) << "only this user may write requests";
    }
    EXPECT_FALSE(std::filesystem::exists(fifo)) << "the server removes its FIFO";
}

TEST_F(FileTimerServerTest, APathThatIsNotAFifoIsAnErrorNamingIt) {
    write_file(fifo, "precious");
    auto server = FileTimerServer::create(
        io, fifo, [](pid_t) { return std::nullopt; }, true);
    ASSERT_FALSE(server);
    EXPECT_THAT(server.error().message, HasSubstr(fifo));
    EXPECT_THAT(server.error().message, HasSubstr("not a FIFO"));
    EXPECT_THAT(server.error().message, HasSubstr("TORCHELASTIC_TIMER_FILE"));
    EXPECT_EQ(server.error().exit_code, exit_code::kUsage);
    EXPECT_EQ(testing::read_file(fifo), "precious") << "nothing of the user's is removed";

    auto nowhere = FileTimerServer::create(io, (dir.path() / "no/such/dir/fifo").string(),
                                           [](pid_t) { return std::nullopt; });
    ASSERT_FALSE(nowhere);
    EXPECT_THAT(nowhere.error().message, HasSubstr("mkfifo"));
    EXPECT_THAT(nowhere.error().message, HasSubstr("no/such/dir/fifo"));
    EXPECT_EQ(nowhere.error().exit_code, exit_code::kInternal);
}

TEST_F(FileTimerServerTest, ServedOnlyForTorchrunsSwitch) {
    auto none = [](pid_t) { return std::optional<int>(); };
    const std::string scratch = dir.path().string();
    for (const char* value : {"0", "", "true", "yes", " 1"}) {
        auto served =
            serve_file_timer(io, {{"TORCHELASTIC_ENABLE_FILE_TIMER", value}}, scratch, none);
        ASSERT_TRUE(served);
        EXPECT_EQ(*served, nullptr) << "'" << value << "' is not torchrun's 1";
    }
    auto unset = serve_file_timer(io, {{"TORCHELASTIC_TIMER_FILE", fifo}}, scratch, none);
    ASSERT_TRUE(unset);
    EXPECT_EQ(*unset, nullptr);

    auto in_scratch =
        serve_file_timer(io, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}}, scratch, none);
    ASSERT_TRUE(in_scratch && *in_scratch);
    EXPECT_EQ((*in_scratch)->path(), scratch + "/file_timer.fifo");

    auto at_users_path = serve_file_timer(
        io, {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", fifo}}, scratch,
        none);
    ASSERT_TRUE(at_users_path && *at_users_path);
    EXPECT_EQ((*at_users_path)->path(), fifo);
}

}  // namespace
}  // namespace ddprun
