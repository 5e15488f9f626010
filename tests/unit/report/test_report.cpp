// The failure report is what a user reads after a job dies: these tests pin
// down which worker it blames, and that the box shows every field without
// letting worker output garble the terminal. (The error files it quotes are
// tested in test_error_file.cpp.)
#include "ddprun/report/report.hpp"
#include "ddprun/report/round_report.hpp"
#include "support/text_lines.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using std::chrono::system_clock;

// 2026-11-29 19:42:07.123 UTC
const system_clock::time_point k_t0 =
    std::chrono::sys_days{std::chrono::year{2026} / 11 / 29} + 19h + 42min + 7s + 123ms;

WorkerOutcome failed_worker(int rank, int exit_code, system_clock::time_point time) {
    WorkerOutcome outcome;
    outcome.rank = rank;
    outcome.local_rank = rank % 2;
    outcome.node_rank = rank / 2;
    outcome.host = rank / 2 == 0 ? "node-a" : "node-b";
    outcome.pid = 4000 + rank;
    outcome.exit_code = exit_code;
    outcome.time = time;
    return outcome;
}

WorkerOutcome stopped_worker(int rank, system_clock::time_point time) {
    WorkerOutcome outcome = failed_worker(rank, 0, time);
    outcome.signal = SIGTERM;
    outcome.stopped_by_ddprun = true;
    return outcome;
}

WorkerOutcome succeeded_worker(int rank, system_clock::time_point time) {
    return failed_worker(rank, 0, time);
}

// Index of the first line containing `needle`, or -1.
int line_with(const std::vector<std::string>& lines, const std::string& needle) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].find(needle) != std::string::npos) return static_cast<int>(i);
    }
    return -1;
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// --- signal names and exit codes --------------------------------------------

struct SignalCase {
    int number;
    const char* name;
};

class SignalNameTable : public testing::TestWithParam<SignalCase> {};

TEST_P(SignalNameTable, NamesSignal) {
    EXPECT_EQ(signal_name(GetParam().number), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(
    SignalName, SignalNameTable,
    testing::Values(SignalCase{SIGHUP, "SIGHUP"}, SignalCase{SIGINT, "SIGINT"},
                    SignalCase{SIGQUIT, "SIGQUIT"}, SignalCase{SIGILL, "SIGILL"},
                    SignalCase{SIGTRAP, "SIGTRAP"}, SignalCase{SIGABRT, "SIGABRT"},
                    SignalCase{SIGBUS, "SIGBUS"}, SignalCase{SIGFPE, "SIGFPE"},
                    SignalCase{SIGKILL, "SIGKILL"}, SignalCase{SIGUSR1, "SIGUSR1"},
                    SignalCase{SIGSEGV, "SIGSEGV"}, SignalCase{SIGUSR2, "SIGUSR2"},
                    SignalCase{SIGPIPE, "SIGPIPE"}, SignalCase{SIGALRM, "SIGALRM"},
                    SignalCase{SIGTERM, "SIGTERM"}, SignalCase{SIGCHLD, "SIGCHLD"},
                    SignalCase{SIGCONT, "SIGCONT"}, SignalCase{SIGSTOP, "SIGSTOP"},
                    SignalCase{SIGTSTP, "SIGTSTP"}, SignalCase{SIGXCPU, "SIGXCPU"},
                    SignalCase{SIGXFSZ, "SIGXFSZ"}, SignalCase{SIGSYS, "SIGSYS"},
                    // The numbers users see in shells and dmesg on Linux.
                    SignalCase{9, "SIGKILL"}, SignalCase{11, "SIGSEGV"}, SignalCase{15, "SIGTERM"},
                    SignalCase{6, "SIGABRT"}, SignalCase{2, "SIGINT"},
                    // Unknown numbers are still shown, never as prose.
                    SignalCase{0, "signal 0"}, SignalCase{-3, "signal -3"},
                    SignalCase{77, "signal 77"}, SignalCase{SIGRTMAX, "signal 64"}));

TEST(SignalName, EveryStandardSignalHasAUniqueName) {
    std::vector<std::string> names;
    for (int signal = 1; signal <= 31; ++signal) {
        const std::string name = signal_name(signal);
        EXPECT_TRUE(name.starts_with("SIG")) << signal << " -> " << name;
        names.push_back(name);
    }
    std::ranges::sort(names);
    EXPECT_EQ(std::ranges::adjacent_find(names), names.end());
}

TEST(SignalName, ExitCodeOfMapsSignalsTo128PlusN) {
    WorkerOutcome outcome;
    EXPECT_EQ(exit_code_of(outcome), 0);
    outcome.exit_code = 3;
    EXPECT_EQ(exit_code_of(outcome), 3);
    outcome.signal = SIGSEGV;
    EXPECT_EQ(exit_code_of(outcome), 128 + SIGSEGV);
    outcome.exit_code = 0;
    outcome.signal = SIGKILL;
    EXPECT_EQ(exit_code_of(outcome), 137);
}

// --- root cause ---------------------------------------------------------------

TEST(ReportRootCause, NothingFailed) {
    EXPECT_EQ(root_cause({}), std::nullopt);
    EXPECT_EQ(root_cause({succeeded_worker(0, k_t0), succeeded_worker(1, k_t0 + 1s)}),
              std::nullopt);
}

TEST(ReportRootCause, EarliestFailureByTimeNotByPosition) {
    const std::vector<WorkerOutcome> outcomes = {
        succeeded_worker(0, k_t0 - 5s),  failed_worker(1, 1, k_t0 + 3s),
        failed_worker(2, 2, k_t0 + 1ms), failed_worker(3, 3, k_t0 + 2s),
        succeeded_worker(4, k_t0 - 1s),
    };
    EXPECT_EQ(root_cause(outcomes), 2u);
}

TEST(ReportRootCause, IgnoresWorkersStoppedByDdprun) {
    const std::vector<WorkerOutcome> outcomes = {
        stopped_worker(0, k_t0 - 10s),
        stopped_worker(1, k_t0 - 9s),
        failed_worker(2, 1, k_t0),
        stopped_worker(3, k_t0 - 8s),
    };
    EXPECT_EQ(root_cause(outcomes), 2u);
}

TEST(ReportRootCause, StoppedWorkerThatExitedNonZeroIsStillIgnored) {
    WorkerOutcome stopped = failed_worker(0, 1, k_t0 - 1s);
    stopped.stopped_by_ddprun = true;
    EXPECT_EQ(root_cause({stopped, failed_worker(1, 7, k_t0)}), 1u);
}

TEST(ReportRootCause, SignalAloneIsAFailure) {
    WorkerOutcome crashed = succeeded_worker(1, k_t0);
    crashed.signal = SIGSEGV;
    EXPECT_EQ(root_cause({succeeded_worker(0, k_t0 - 1s), crashed}), 1u);
}

TEST(ReportRootCause, AllStoppedFallsBackToEarliestFailure) {
    const std::vector<WorkerOutcome> outcomes = {
        stopped_worker(0, k_t0 + 2s),
        stopped_worker(1, k_t0 + 1s),
        succeeded_worker(2, k_t0),
        stopped_worker(3, k_t0 + 3s),
    };
    EXPECT_EQ(root_cause(outcomes), 1u);
}

TEST(ReportRootCause, TiesGoToTheLowerRank) {
    EXPECT_EQ(root_cause({failed_worker(5, 1, k_t0), failed_worker(3, 1, k_t0),
                          failed_worker(4, 1, k_t0)}),
              1u);
}

// --- summary box ----------------------------------------------------------------

class ReportSummary : public testing::Test {
  protected:
    // rank 3 fails first with a traceback; rank 2 fails later on its own;
    // rank 0 is stopped by ddprun; rank 1 succeeded.
    ReportSummary() {
        WorkerOutcome root = failed_worker(3, 1, k_t0);
        root.pid = 4242;
        root.error_message = "RuntimeError: NCCL timeout";
        root.stderr_tail = {"Traceback (most recent call last):", "  File \"train.py\", line 9",
                            "RuntimeError: NCCL timeout"};
        m_outcomes = {stopped_worker(0, k_t0 + 2s), succeeded_worker(1, k_t0 + 3s),
                      failed_worker(2, 1, k_t0 + 1s), root};
    }

    std::string summary() const {
        const auto root = root_cause(m_outcomes);
        EXPECT_TRUE(root.has_value());
        return format_summary("ddprun: job failed", m_outcomes, root.value_or(0));
    }

    std::vector<WorkerOutcome> m_outcomes;
};

TEST_F(ReportSummary, ShowsRootCauseFirstWithEveryField) {
    const std::string text = summary();
    const auto lines = lines_of(text);
    ASSERT_GE(lines.size(), 10u) << text;
    EXPECT_EQ(lines.front(), std::string(72, '=')) << text;
    EXPECT_EQ(lines.back(), std::string(72, '=')) << text;
    EXPECT_EQ(lines[1], "ddprun: job failed (exit code 1)");
    EXPECT_EQ(lines[3], "root cause: rank 3 (local_rank 1, node 1, host node-b, pid 4242)");
    EXPECT_EQ(lines[4], "  exit code: 1");
    EXPECT_EQ(lines[5], "  time:      2026-11-29 19:42:07.123 UTC");
    EXPECT_EQ(lines[6], "  error:     RuntimeError: NCCL timeout");
    EXPECT_EQ(lines[7], "  last 3 lines of stderr:");
    EXPECT_EQ(lines[8], "    | Traceback (most recent call last):");
    EXPECT_EQ(lines[9], "    |   File \"train.py\", line 9");
    EXPECT_EQ(lines[10], "    | RuntimeError: NCCL timeout");
    EXPECT_LT(line_with(lines, "root cause:"), line_with(lines, "other failures"));
}

TEST_F(ReportSummary, ListsOtherFailuresWithStoppedMarked) {
    const auto lines = lines_of(summary());
    const int header = line_with(lines, "other failures (2):");
    ASSERT_GE(header, 0);
    EXPECT_EQ(lines[static_cast<std::size_t>(header + 1)],
              "  rank 2 (local_rank 0, node 1, host node-b, pid 4002): exit code 1 at "
              "2026-11-29 19:42:08.123 UTC");
    EXPECT_EQ(lines[static_cast<std::size_t>(header + 2)],
              "  rank 0 (local_rank 0, node 0, host node-a, pid 4000): SIGTERM (stopped by "
              "ddprun)");
    EXPECT_EQ(lines[static_cast<std::size_t>(header + 3)], std::string(72, '='));
}

TEST_F(ReportSummary, DoesNotListWorkersThatSucceeded) {
    const std::string text = summary();
    EXPECT_FALSE(contains(text, "rank 1 ")) << text;
    EXPECT_FALSE(contains(text, "pid 4001")) << text;
}

TEST_F(ReportSummary, OtherFailuresAreOrderedByTimeThenStoppedByRank) {
    m_outcomes = {stopped_worker(7, k_t0), stopped_worker(5, k_t0 - 5s),
                  failed_worker(6, 2, k_t0 + 5s), failed_worker(4, 3, k_t0 + 1s),
                  failed_worker(9, 9, k_t0 - 1s)};
    const auto lines = lines_of(summary());
    const int header = line_with(lines, "other failures (4):");
    ASSERT_GE(header, 0);
    const auto first = static_cast<std::size_t>(header + 1);
    EXPECT_TRUE(lines[first].starts_with("  rank 4 ")) << lines[first];
    EXPECT_TRUE(lines[first + 1].starts_with("  rank 6 ")) << lines[first + 1];
    EXPECT_TRUE(lines[first + 2].starts_with("  rank 5 ")) << lines[first + 2];
    EXPECT_TRUE(lines[first + 3].starts_with("  rank 7 ")) << lines[first + 3];
    EXPECT_TRUE(contains(lines[3], "root cause: rank 9 ")) << lines[3];
}

TEST_F(ReportSummary, NoOtherFailuresSectionWhenOnlyTheRootFailed) {
    m_outcomes = {succeeded_worker(0, k_t0), failed_worker(1, 4, k_t0)};
    const std::string text = summary();
    EXPECT_FALSE(contains(text, "other failures")) << text;
    EXPECT_FALSE(contains(text, std::string(72, '-') + "\n" + std::string(72, '='))) << text;
}

TEST_F(ReportSummary, SignalRootShowsNameAndExitCode) {
    m_outcomes[3].exit_code = 0;
    m_outcomes[3].signal = SIGSEGV;
    const auto lines = lines_of(summary());
    EXPECT_EQ(lines[1], "ddprun: job failed (exit code 139)");
    EXPECT_EQ(lines[4], "  signal:    SIGSEGV (exit code 139)");
    EXPECT_EQ(line_with(lines, "exit code: "), -1);
}

TEST_F(ReportSummary, OtherFailureBySignalIsNamed) {
    m_outcomes[2].exit_code = 0;
    m_outcomes[2].signal = SIGKILL;
    const auto lines = lines_of(summary());
    const int line = line_with(lines, "  rank 2 ");
    ASSERT_GE(line, 0);
    EXPECT_TRUE(contains(lines[static_cast<std::size_t>(line)], "): SIGKILL at 2026-11-29"));
}

TEST_F(ReportSummary, TitleExitCodeAlwaysMatchesTheRoot) {
    for (const auto& [exit_code, signal] : std::vector<std::pair<int, int>>{
             {1, 0}, {2, 0}, {255, 0}, {0, SIGABRT}, {0, SIGKILL}, {0, 77}, {3, SIGBUS}}) {
        WorkerOutcome root = failed_worker(0, exit_code, k_t0);
        root.signal = signal;
        const std::vector<WorkerOutcome> outcomes = {root, stopped_worker(1, k_t0 + 1s)};
        const auto lines = lines_of(format_summary("ddprun: job failed", outcomes, 0));
        EXPECT_EQ(lines[1],
                  "ddprun: job failed (exit code " + std::to_string(exit_code_of(root)) + ")");
    }
}

TEST_F(ReportSummary, AllStoppedRootIsNotBlamed) {
    m_outcomes = {stopped_worker(1, k_t0 + 1s), stopped_worker(0, k_t0)};
    const auto lines = lines_of(summary());
    EXPECT_EQ(lines[1], "ddprun: job failed (exit code 143)");
    EXPECT_EQ(lines[3],
              "first failure: rank 0 (local_rank 0, node 0, host node-a, pid 4000), stopped by "
              "ddprun");
    EXPECT_EQ(line_with(lines, "root cause"), -1);
    EXPECT_GE(line_with(lines, "  rank 1 (local_rank 1"), 0);
}

TEST_F(ReportSummary, OmitsWhatIsNotKnown) {
    WorkerOutcome bare;
    bare.rank = 0;
    bare.exit_code = 5;
    const auto lines = lines_of(format_summary("ddprun: job failed", {bare}, 0));
    EXPECT_EQ(lines[3], "root cause: rank 0 (local_rank 0, node 0)");
    EXPECT_EQ(line_with(lines, "time:"), -1);
    EXPECT_EQ(line_with(lines, "error:"), -1);
    EXPECT_EQ(line_with(lines, "stderr"), -1);
}

TEST_F(ReportSummary, SingleTailLineAndLongTails) {
    m_outcomes[3].stderr_tail = {"only"};
    auto lines = lines_of(summary());
    EXPECT_GE(line_with(lines, "  last line of stderr:"), 0);
    EXPECT_GE(line_with(lines, "    | only"), 0);

    m_outcomes[3].stderr_tail.clear();
    for (int i = 0; i < 80; ++i) m_outcomes[3].stderr_tail.push_back("line " + std::to_string(i));
    lines = lines_of(summary());
    EXPECT_GE(line_with(lines, "  last 50 lines of stderr:"), 0);
    EXPECT_EQ(line_with(lines, "    | line 29"), -1);
    EXPECT_GE(line_with(lines, "    | line 30"), 0);
    EXPECT_GE(line_with(lines, "    | line 79"), 0);
}

TEST_F(ReportSummary, EmptyTailLineHasNoTrailingSpace) {
    m_outcomes[3].stderr_tail = {"a", "", "b"};
    const auto lines = lines_of(summary());
    EXPECT_GE(line_with(lines, "    | a"), 0);
    const int b = line_with(lines, "    | b");
    ASSERT_GE(b, 1);
    EXPECT_EQ(lines[static_cast<std::size_t>(b - 1)], "    |");
}

TEST_F(ReportSummary, MultiLineErrorMessageIsIndented) {
    m_outcomes[3].error_message = "RuntimeError: CUDA error\nCUDA kernel errors might be async";
    const auto lines = lines_of(summary());
    const int error = line_with(lines, "  error:     RuntimeError: CUDA error");
    ASSERT_GE(error, 0);
    EXPECT_EQ(lines[static_cast<std::size_t>(error + 1)],
              "             CUDA kernel errors might be async");
}

TEST_F(ReportSummary, SanitizesWorkerText) {
    m_outcomes[3].error_message = "Bad\x1b[2J\x1b]0;owned\x07 thing\twith tab\x7f";
    m_outcomes[3].stderr_tail = {
        "\x1b[31mred\x1b[0m",
        "c1 \xc2\x9b"
        "31m csi",
        "invalid \xff\xfe utf8 and nul " + std::string(1, '\0') + " end",
        "10%\r50%\r100%\r\n",
        "\ttabbed",
        "unicode ok: \u00e9\u2713",
    };
    const std::string text = summary();
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        EXPECT_TRUE(byte == '\n' || (byte >= 0x20 && byte != 0x7f)) << "byte " << int{byte};
    }
    EXPECT_FALSE(contains(text, "\xc2\x9b"));
    EXPECT_FALSE(contains(text, "\xff"));
    const auto lines = lines_of(text);
    EXPECT_GE(line_with(lines, "  error:     Bad?[2J?]0;owned? thing with tab?"), 0) << text;
    EXPECT_GE(line_with(lines, "    | ?[31mred?[0m"), 0) << text;
    EXPECT_GE(line_with(lines, "    | c1 ?31m csi"), 0) << text;
    EXPECT_GE(line_with(lines, "    | invalid ?? utf8 and nul ? end"), 0) << text;
    EXPECT_GE(line_with(lines, "    | 100%"), 0) << text;
    EXPECT_EQ(line_with(lines, "50%"), -1) << text;
    EXPECT_GE(line_with(lines, "    |     tabbed"), 0) << text;
    EXPECT_GE(line_with(lines, "    | unicode ok: \u00e9\u2713"), 0) << text;
}

TEST_F(ReportSummary, CutsHugeTailLines) {
    m_outcomes[3].stderr_tail = {std::string(1 << 20, '#')};
    const auto lines = lines_of(summary());
    const int line = line_with(lines, "    | ###");
    ASSERT_GE(line, 0);
    EXPECT_LE(lines[static_cast<std::size_t>(line)].size(), 520u);
    EXPECT_TRUE(lines[static_cast<std::size_t>(line)].ends_with(" [...]"));
}

TEST_F(ReportSummary, LinesFitAndHaveNoTrailingSpaces) {
    m_outcomes[3].error_message = "E: trailing   \n";
    m_outcomes[3].stderr_tail.push_back("trailing   ");
    const std::string text = summary();
    ASSERT_TRUE(text.ends_with("\n"));
    for (const auto& line : lines_of(text)) {
        EXPECT_FALSE(line.ends_with(" ")) << '"' << line << '"';
        if (!line.starts_with("    | ")) {
            EXPECT_LE(line.size(), 100u) << line;
        }
    }
}

TEST_F(ReportSummary, ManyOtherFailuresAreSummarised) {
    m_outcomes = {failed_worker(0, 1, k_t0)};
    for (int rank = 1; rank <= 100; ++rank) m_outcomes.push_back(stopped_worker(rank, k_t0));
    m_outcomes.push_back(failed_worker(101, 2, k_t0 + 1s));
    const auto lines = lines_of(summary());
    EXPECT_GE(line_with(lines, "other failures (101):"), 0);
    EXPECT_GE(line_with(lines, "  rank 101 "), 0);  // own failures come first
    EXPECT_GE(line_with(lines, "  rank 31 "), 0);   // then 31 of the stopped ones
    EXPECT_EQ(line_with(lines, "  rank 32 "), -1);
    EXPECT_GE(line_with(lines, "  ... and 69 more (69 stopped by ddprun)"), 0);
    EXPECT_LT(lines.size(), 60u);
}

// On a shared console (srun, mpirun) node 0's one box lists every node's workers:
// the root cause once (from the round's stop, with its stderr), then the rest.
TEST(RoundReport, OneBoxForTheWholeJobListsEveryNode) {
    WorkerOutcome root = failed_worker(2, 3, k_t0);
    root.stderr_tail = {"boom"};
    StopEvent stop;
    stop.kind = StopEvent::Kind::Failure;
    stop.failure = failure_record(root);
    const std::vector<WorkerOutcome> local = {stopped_worker(0, k_t0 + 1s),
                                              stopped_worker(1, k_t0 + 1s)};
    FailureRecord root_again = failure_record(root);
    root_again.stderr_tail.clear();
    const std::vector<FailureRecord> others = {root_again,
                                               failure_record(stopped_worker(3, k_t0 + 1s))};
    auto summary = summarize_failure("ddprun: job failed", stop, local, 0, others);
    ASSERT_TRUE(summary);
    EXPECT_EQ(summary->exit_code, 3);
    const auto lines = lines_of(summary->box);
    EXPECT_GE(line_with(lines, "root cause: rank 2 "), 0) << summary->box;
    EXPECT_GE(line_with(lines, "| boom"), 0) << summary->box;
    EXPECT_GE(line_with(lines, "other failures (3):"), 0) << summary->box;
    for (int rank : {0, 1, 3})
        EXPECT_GE(line_with(lines, fmt::format("  rank {} ", rank)), 0) << summary->box;
    EXPECT_EQ(line_with(lines, "  rank 2 "), -1) << "the root cause is listed once\n"
                                                 << summary->box;
}

TEST_F(ReportSummary, RootOutOfRangeDoesNotCrash) {
    const std::string text = format_summary("ddprun: job failed", m_outcomes, 99);
    EXPECT_TRUE(contains(text, "ddprun: job failed")) << text;
    EXPECT_TRUE(contains(format_summary("t", {}, 0), "t"));
}

}  // namespace
}  // namespace ddprun
