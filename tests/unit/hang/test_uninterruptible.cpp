// Workers in uninterruptible sleep (uninterruptible.hpp): torch's variable as
// torch reads it, the state letter of /proc/PID/stat, the dwell per pid, all
// table-driven; read_proc_state against real processes, one of them really in
// state D (a vforking fake_worker).
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddprun/hang/uninterruptible.hpp"
#include "support/build_paths.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = UninterruptibleWatch::Clock;

// ---------------------------------------------------------------------------
// TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT

TEST(UninterruptibleSetting, ReadsTheValueAsPythonsFloatDoes) {
    struct Case {
        std::optional<std::string> value;  // empty: unset
        std::optional<std::chrono::nanoseconds> timeout;
        bool warns = false;
    };
    const Case cases[] = {
        {std::nullopt, std::nullopt},
        {"", std::nullopt},  // torch: `if not raw` is off, silently
        {"1", 1s},
        {"300", 300s},
        {"0.5", 500ms},
        {".5", 500ms},
        {"5.", 5s},
        {"1.5e-3", 1500us},
        {"1e1", 10s},
        {" 2 ", 2s},
        {"\t7\n", 7s},
        {"+3", 3s},
        {"1_000", 1000s},
        {"1e9", std::chrono::nanoseconds(std::chrono::seconds(1'000'000'000))},
        // Off, and said the way torch means it: no warning.
        {"0", std::nullopt},
        {"-0", std::nullopt},
        {"-1", std::nullopt},
        {"-0.5", std::nullopt},
        {"nan", std::nullopt},
        {"NaN", std::nullopt},
        {"1e-400", std::nullopt},  // 0.0 in Python
        // On under torch, but they could never fire: off.
        {"inf", std::nullopt},
        {"INF", std::nullopt},
        {"Infinity", std::nullopt},
        {"1e400", std::nullopt},
        {"2e9", std::nullopt},
        {"1_0.5_0e1_0", std::nullopt},  // 1.05e11
        // Not numbers: off, as float() raises; a warning says so.
        {"abc", std::nullopt, true},
        {"1s", std::nullopt, true},
        {"5m", std::nullopt, true},
        {"   ", std::nullopt, true},
        {"1 0", std::nullopt, true},
        {"1__0", std::nullopt, true},
        {"_1", std::nullopt, true},
        {"1_", std::nullopt, true},
        {"1_.5", std::nullopt, true},
        {"+-1", std::nullopt, true},
        {"++1", std::nullopt, true},
        {"+", std::nullopt, true},
        {"0x10", std::nullopt, true},
        {"nan(1)", std::nullopt, true},
        {"1,5", std::nullopt, true},
        {"true", std::nullopt, true},
    };
    for (const auto& c : cases) {
        Environment env{{"PATH", "/usr/bin"}};
        if (c.value) env[std::string(k_uninterruptible_variable)] = *c.value;
        const auto setting = uninterruptible_setting(env);
        const std::string what = c.value ? "'" + *c.value + "'" : "unset";
        EXPECT_EQ(setting.timeout.has_value(), c.timeout.has_value()) << what;
        if (setting.timeout && c.timeout) {
            EXPECT_EQ(*setting.timeout, *c.timeout) << what;
        }
        EXPECT_EQ(!setting.warning.empty(), c.warns) << what << ": " << setting.warning;
        if (c.warns) {
            EXPECT_NE(
                setting.warning.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=" + *c.value),
                std::string::npos)
                << setting.warning;
            EXPECT_NE(setting.warning.find("off"), std::string::npos) << setting.warning;
        }
        if (c.value) {
            EXPECT_EQ(setting.value, *c.value);
        }
    }
}

TEST(UninterruptibleSetting, ATinyPositiveValueStillWaitsOneLook) {
    const auto setting =
        uninterruptible_setting({{std::string(k_uninterruptible_variable), "1e-12"}});
    ASSERT_TRUE(setting.timeout);
    EXPECT_GT(setting.timeout->count(), 0) << "a first look must not fire at once";
}

TEST(UninterruptibleLookPeriod, IsAQuarterOfTheTimeoutWithinTenMillisecondsAndASecond) {
    struct Case {
        Clock::duration timeout;
        Clock::duration period;
    };
    const Case cases[] = {
        {1ns, 10ms}, {1ms, 10ms}, {40ms, 10ms}, {100ms, 25ms},   {1s, 250ms},
        {2s, 500ms}, {4s, 1s},    {300s, 1s},   {1500ms, 375ms},
    };
    for (const auto& c : cases)
        EXPECT_EQ(uninterruptible_look_period(c.timeout), c.period)
            << std::chrono::nanoseconds(c.timeout).count() << " ns";
}

// ---------------------------------------------------------------------------
// /proc/PID/stat

TEST(ProcStatState, IsTheFieldAfterTheLastParenthesis) {
    struct Case {
        std::string text;
        std::optional<char> state;
    };
    const Case cases[] = {
        {"1234 (python3) D 1 1234 1234 0 -1 4194560 1 0 0 0", 'D'},
        {"1 (systemd) S 0 1 1 0 -1", 'S'},
        {"77 (pt_main_thread) R 1 77", 'R'},
        {"9 (a b c) Z 1 9", 'Z'},     // spaces in the name
        {"9 (x) D (y) S 1 9", 'S'},   // a name that looks like a state
        {"9 ((sd-pam)) S 1 9", 'S'},  // nested parentheses
        {"9 (:)) T 1", 'T'},          // a ')' at the name's end
        {"9 ()) D (D) I 1", 'I'},     // idle kernel thread
        {"9 (worker)   t 1", 't'},    // more blanks than one
        {"9 (worker) D", 'D'},        // the last field
        {"9 (worker) D\n", 'D'},
        {"9 (worker)", std::nullopt},  // cut short
        {"9 (worker) ", std::nullopt},
        {"9 (worker)\n", std::nullopt},
        {"9 worker D 1", std::nullopt},  // no parenthesis at all
        {"", std::nullopt},
    };
    for (const auto& c : cases) EXPECT_EQ(proc_stat_state(c.text), c.state) << c.text;
}

// A fake_worker in its own process group: SIGKILLed as a group at the end, so the
// child it vforked goes too.
class GroupChild {
  public:
    explicit GroupChild(std::vector<std::string> args) {
        args.insert(args.begin(), ddprun_test::build_paths::fake_worker);
        std::vector<char*> argv;
        for (auto& arg : args) argv.push_back(arg.data());
        argv.push_back(nullptr);
        std::string rank = "RANK=0";
        std::vector<char*> envp{rank.data(), nullptr};
        posix_spawnattr_t attributes;
        posix_spawnattr_init(&attributes);
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_setsigmask(&attributes, &none);
        posix_spawnattr_setsigdefault(&attributes, &all);
        posix_spawnattr_setpgroup(&attributes, 0);
        posix_spawnattr_setflags(
            &attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
        const int spawned = posix_spawn(&m_pid, ddprun_test::build_paths::fake_worker, nullptr,
                                        &attributes, argv.data(), envp.data());
        posix_spawnattr_destroy(&attributes);
        if (spawned != 0) throw std::runtime_error("posix_spawn");
    }
    ~GroupChild() {
        ::kill(-m_pid, SIGKILL);
        ::waitpid(m_pid, nullptr, 0);
    }
    pid_t pid() const { return m_pid; }

  private:
    pid_t m_pid = -1;
};

// There is no event for a process entering a state: looked at every millisecond,
// within a bound that only catches a hang.
std::optional<char> wait_for_state(pid_t pid, char state) {
    const auto deadline = Clock::now() + 20s;
    std::optional<char> seen;
    while (Clock::now() < deadline) {
        seen = read_proc_state(pid);
        if (seen == state) break;
        std::this_thread::sleep_for(1ms);
    }
    return seen;
}

// The child a worker vforked, once it is there (0 if it never is). Before, the
// worker may be in D for other reasons: its start reads pages from disk.
pid_t wait_for_child(pid_t parent) {
    const auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
        std::ifstream children(fmt::format("/proc/{0}/task/{0}/children", parent));
        pid_t child = 0;
        if (children >> child) return child;
        std::this_thread::sleep_for(1ms);
    }
    return 0;
}

TEST(ReadProcState, AVforkingParentIsInStateDAndItsChildIsNot) {
    GroupChild worker({"vfork-sleep", "30"});
    const pid_t child = wait_for_child(worker.pid());
    ASSERT_GT(child, 0) << "no child listed";
    EXPECT_EQ(wait_for_state(worker.pid(), 'D'), 'D');
    EXPECT_EQ(wait_for_state(child, 'S'), 'S') << "the child sleeps, interruptibly";
}

TEST(ReadProcState, AVforkingParentGoesOnOnceItsChildIsDone) {
    GroupChild worker({"vfork-sleep", "1", "sleep", "30"});
    ASSERT_GT(wait_for_child(worker.pid()), 0) << "no child listed";
    ASSERT_EQ(wait_for_state(worker.pid(), 'D'), 'D');
    EXPECT_EQ(wait_for_state(worker.pid(), 'S'), 'S') << "out of D once the child exited";
}

TEST(ReadProcState, ThisProcessRunsAndAGonePidHasNoState) {
    EXPECT_EQ(read_proc_state(::getpid()), 'R');
    EXPECT_EQ(read_proc_state(INT_MAX), std::nullopt) << "above any pid_max";
}

// A process may name itself anything: "x) D (y" must not read as state D.
TEST(ReadProcState, ANameThatLooksLikeAStateIsNotTakenForOne) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::prctl(PR_SET_NAME, "x) D (y", 0, 0, 0);
        char byte = 1;
        if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
        for (;;) ::pause();
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    ::close(ready[0]);
    const auto state = read_proc_state(pid);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ASSERT_TRUE(state);
    EXPECT_TRUE(*state == 'S' || *state == 'R') << *state;
}

// ---------------------------------------------------------------------------
// UninterruptibleWatch

TEST(UninterruptibleWatch, TimesEachPidInDFromTheFirstLookThatSawItThere) {
    using Seen = UninterruptibleWatch::Seen;
    struct Look {
        int at_ms;
        std::vector<Seen> seen;
        std::vector<pid_t> entered;
        std::vector<std::pair<pid_t, int>> stuck;  // pid, dwell in ms
    };
    struct Case {
        const char* name;
        std::vector<Look> looks;
    };
    const std::optional<char> unreadable;
    const std::vector<Case> cases = {
        {"stays in D: stuck at the timeout exactly, and on",
         {{0, {{1, 'D'}}, {1}, {}},
          {250, {{1, 'D'}}, {}, {}},
          {999, {{1, 'D'}}, {}, {}},
          {1000, {{1, 'D'}}, {}, {{1, 1000}}},
          {1250, {{1, 'D'}}, {}, {{1, 1250}}}}},
        {"out of D and back starts over",
         {{0, {{1, 'D'}}, {1}, {}},
          {600, {{1, 'S'}}, {}, {}},
          {700, {{1, 'D'}}, {1}, {}},
          {1500, {{1, 'D'}}, {}, {}},
          {1700, {{1, 'D'}}, {}, {{1, 1000}}}}},
        {"a state that cannot be read keeps the time",
         {{0, {{1, 'D'}}, {1}, {}},
          {500, {{1, unreadable}}, {}, {}},
          {1000, {{1, 'D'}}, {}, {{1, 1000}}}}},
        {"a pid no longer running is forgotten",
         {{0, {{1, 'D'}, {2, 'S'}}, {1}, {}},
          {500, {{2, 'S'}}, {}, {}},
          {600, {{1, 'D'}, {2, 'S'}}, {1}, {}},
          {1500, {{1, 'D'}, {2, 'S'}}, {}, {}},
          {1600, {{1, 'D'}, {2, 'S'}}, {}, {{1, 1000}}}}},
        {"no other state counts",
         {{0,
           {{1, 'R'}, {2, 'S'}, {3, 'Z'}, {4, 'T'}, {5, 't'}, {6, 'I'}, {7, 'X'}, {8, 'W'}},
           {},
           {}},
          {5000,
           {{1, 'R'}, {2, 'S'}, {3, 'Z'}, {4, 'T'}, {5, 't'}, {6, 'I'}, {7, 'X'}, {8, 'W'}},
           {},
           {}}}},
        {"several pids, each on its own clock, in the order they were seen",
         {{0, {{3, 'D'}, {1, 'S'}, {2, 'D'}}, {3, 2}, {}},
          {400, {{3, 'D'}, {1, 'D'}, {2, 'R'}}, {1}, {}},
          {500, {{3, 'D'}, {1, 'D'}, {2, 'D'}}, {2}, {}},
          {1400, {{3, 'D'}, {1, 'D'}, {2, 'D'}}, {}, {{3, 1400}, {1, 1000}}}}},
    };
    for (const auto& c : cases) {
        UninterruptibleWatch watch(1s);
        const Clock::time_point start{};
        for (const auto& look : c.looks) {
            const auto looked =
                watch.look(look.seen, start + std::chrono::milliseconds(look.at_ms));
            EXPECT_EQ(looked.entered, look.entered) << c.name << ", at " << look.at_ms << " ms";
            std::vector<std::pair<pid_t, int>> stuck;
            for (const auto& s : looked.stuck)
                stuck.emplace_back(
                    s.pid,
                    static_cast<int>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(s.dwell).count()));
            EXPECT_EQ(stuck, look.stuck) << c.name << ", at " << look.at_ms << " ms";
        }
    }
}

}  // namespace
}  // namespace ddprun
