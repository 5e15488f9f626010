// The failure report is what a user reads after a job dies: these tests pin
// down which worker it blames, that it survives any error file a worker can
// leave behind, and that the box shows every field without letting worker
// output garble the terminal.
#include "ddprun/report.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

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

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
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

// --- error files -----------------------------------------------------------

struct ErrorFileCase {
    const char* name;
    std::string json;
    std::string message;
    std::string timestamp;
};

class ErrorFileShapes : public testing::TestWithParam<ErrorFileCase> {};

TEST_P(ErrorFileShapes, ParsesMessageAndTimestamp) {
    const auto info = parse_error_file(GetParam().json);
    ASSERT_TRUE(info.has_value()) << GetParam().json;
    EXPECT_EQ(info->message, GetParam().message);
    EXPECT_EQ(info->timestamp, GetParam().timestamp);
}

INSTANTIATE_TEST_SUITE_P(
    ErrorFile, ErrorFileShapes,
    testing::Values(
        // torch's ErrorHandler.record_exception (torch 1.9 onwards).
        ErrorFileCase{"torch_record",
                      R"({"message": {"message": "RuntimeError: NCCL timeout", "extraInfo": )"
                      R"({"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", )"
                      R"(line 3\nRuntimeError: NCCL timeout\n", "timestamp": "1764445327"}}})",
                      "RuntimeError: NCCL timeout", "1764445327"},
        // The agent's dump_error_file adds errorCode to the same shape.
        ErrorFileCase{"torch_dumped_with_error_code",
                      R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": )"
                      R"("tb", "timestamp": "17"}, "errorCode": 139}})",
                      "ValueError: bad", "17"},
        // Older and non-Python writers: a plain string message.
        ErrorFileCase{"plain_message_with_number_timestamp",
                      R"({"message": "worker gave up", "timestamp": 1764445327})", "worker gave up",
                      "1764445327"},
        ErrorFileCase{"plain_message_with_string_timestamp",
                      R"({"message": "worker gave up", "timestamp": "1764445327"})",
                      "worker gave up", "1764445327"},
        ErrorFileCase{"plain_message_only", R"({"message": "only this"})", "only this", ""},
        ErrorFileCase{"plain_message_with_extra_fields",
                      R"({"message": "c++ side", "errorCode": 3, "host": "h", "extra": [1, 2]})",
                      "c++ side", ""},
        ErrorFileCase{"number_timestamp_in_extra_info",
                      R"({"message": {"message": "E: x", "extraInfo": {"timestamp": 42}}})", "E: x",
                      "42"},
        // Auxiliary fields of the wrong type cost the timestamp, not the message.
        ErrorFileCase{"extra_info_not_an_object",
                      R"({"message": {"message": "E: x", "extraInfo": "oops"}})", "E: x", ""},
        ErrorFileCase{"timestamp_wrong_type",
                      R"({"message": {"message": "E: x", "extraInfo": {"timestamp": [1]}}})",
                      "E: x", ""},
        ErrorFileCase{"no_extra_info", R"({"message": {"message": "E: x"}})", "E: x", ""},
        // No message but a traceback: its last line is the exception.
        ErrorFileCase{"message_missing_callstack_present",
                      R"({"message": {"extraInfo": {"py_callstack": "Traceback:\n  f()\n)"
                      R"(KeyError: 'lr'\n\n", "timestamp": "5"}}})",
                      "KeyError: 'lr'", "5"},
        ErrorFileCase{"leading_blank_lines_and_trailing_space",
                      R"({"message": "\n\n  indented first   \nsecond\n\n"})",
                      "  indented first\nsecond", ""},
        ErrorFileCase{"unicode_kept", R"({"message": "Fehler: Größe \u00e9 ✓"})",
                      "Fehler: Größe é ✓", ""},
        // Escapes survive parsing; format_summary neutralises them.
        ErrorFileCase{"escape_sequence_kept_for_later", R"({"message": "a\u001b[31mb"})",
                      "a\x1b[31mb", ""},
        ErrorFileCase{"whitespace_around_document", "  \n{\"message\": \"x\"}\n\n", "x", ""}),
    [](const testing::TestParamInfo<ErrorFileCase>& param) {
        return std::string(param.param.name);
    });

struct MalformedCase {
    const char* name;
    std::string json;
};

class ErrorFileMalformed : public testing::TestWithParam<MalformedCase> {};

TEST_P(ErrorFileMalformed, YieldsNulloptWithoutThrowing) {
    std::optional<ErrorFileInfo> info;
    EXPECT_NO_THROW(info = parse_error_file(GetParam().json));
    EXPECT_FALSE(info.has_value()) << "message: " << info.value_or(ErrorFileInfo{}).message;
}

std::string deep_arrays(std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

std::string deep_objects_around_message(std::size_t depth) {
    std::string json;
    for (std::size_t i = 0; i < depth; ++i) json += R"({"message": )";
    json += R"("x")";
    json += std::string(depth, '}');
    return json;
}

INSTANTIATE_TEST_SUITE_P(
    ErrorFile, ErrorFileMalformed,
    testing::Values(
        MalformedCase{"empty", ""}, MalformedCase{"whitespace", " \n\t "},
        MalformedCase{"null", "null"}, MalformedCase{"array", "[]"}, MalformedCase{"number", "5"},
        MalformedCase{"string", R"("RuntimeError: x")"}, MalformedCase{"empty_object", "{}"},
        MalformedCase{"no_message_key", R"({"msg": "x"})"},
        MalformedCase{"message_number", R"({"message": 5})"},
        MalformedCase{"message_null", R"({"message": null})"},
        MalformedCase{"message_bool", R"({"message": true})"},
        MalformedCase{"message_array", R"({"message": ["x"]})"},
        MalformedCase{"message_empty_string", R"({"message": ""})"},
        MalformedCase{"message_blank_string", R"({"message": " \n \t"})"},
        MalformedCase{"inner_message_null", R"({"message": {"message": null}})"},
        MalformedCase{"inner_message_number", R"({"message": {"message": 5}})"},
        MalformedCase{"inner_message_object", R"({"message": {"message": {"message": "x"}}})"},
        MalformedCase{"inner_empty", R"({"message": {}})"},
        MalformedCase{"inner_callstack_not_string",
                      R"({"message": {"extraInfo": {"py_callstack": 5}}})"},
        MalformedCase{"truncated_nested", R"({"message": {"message": "RuntimeError: x", "ext)"},
        MalformedCase{"truncated_string", R"({"message": "RuntimeErr)"},
        MalformedCase{"truncated_after_colon", R"({"message":)"},
        MalformedCase{"trailing_garbage", R"({"message": "x"} trailing)"},
        MalformedCase{"two_documents", R"({"message": "x"}{"message": "y"})"},
        MalformedCase{"single_quotes", R"({'message': 'x'})"},
        MalformedCase{"nan", R"({"message": NaN})"},
        MalformedCase{"binary", std::string("\x00\xff\xfe\x01\x80{\"message\"\x00", 13)},
        MalformedCase{"nul_inside", std::string("{\"message\": \"a\x00b\"}", 18)},
        MalformedCase{"invalid_utf8_in_string", "{\"message\": \"\xff\xfe\"}"},
        MalformedCase{"huge_2mib", R"({"message": ")" + std::string(2 << 20, 'x') + R"("})"},
        MalformedCase{"deep_arrays", deep_arrays(100000)},
        MalformedCase{"deep_unclosed", std::string(100000, '[')},
        MalformedCase{"deep_objects", deep_objects_around_message(1000)},
        MalformedCase{"deep_inside_valid_shape",
                      R"({"message": {"message": "x", "extraInfo": )" + deep_arrays(5000) + "}}"}),
    [](const testing::TestParamInfo<MalformedCase>& param) {
        return std::string(param.param.name);
    });

TEST(ErrorFile, KeepsOnlyTheFirstLinesAndMarksTheCut) {
    const auto info = parse_error_file(
        R"({"message": "RuntimeError: CUDA error\nline 2\nline 3\nline 4\nline 5\nline 6"})");
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->message, "RuntimeError: CUDA error\nline 2\nline 3\nline 4 [...]");
}

TEST(ErrorFile, DoesNotMarkACutWhenOnlyBlankLinesFollow) {
    const auto info = parse_error_file(R"({"message": "1\n2\n3\n4\n\n  \n"})");
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->message, "1\n2\n3\n4");
}

TEST(ErrorFile, CapsLongMessages) {
    const auto info =
        parse_error_file(R"({"message": "RuntimeError: )" + std::string(5000, 'x') + R"("})");
    ASSERT_TRUE(info.has_value());
    EXPECT_LE(info->message.size(), 520u);
    EXPECT_GE(info->message.size(), 400u);
    EXPECT_TRUE(info->message.starts_with("RuntimeError: xxx"));
    EXPECT_TRUE(info->message.ends_with(" [...]"));
}

TEST(ErrorFile, CapDoesNotSplitUtf8Characters) {
    std::string many_e_acute;
    for (int i = 0; i < 400; ++i) many_e_acute += "\u00e9";  // two bytes each
    for (const std::string prefix : {"", "x"}) {
        const auto info = parse_error_file(R"({"message": ")" + prefix + many_e_acute + R"("})");
        ASSERT_TRUE(info.has_value());
        std::string kept = info->message.substr(0, info->message.size() - 6);
        ASSERT_TRUE(info->message.ends_with(" [...]"));
        kept = kept.substr(prefix.size());
        ASSERT_EQ(kept.size() % 2, 0u) << "prefix '" << prefix << "'";
        for (std::size_t i = 0; i < kept.size(); i += 2) ASSERT_EQ(kept.substr(i, 2), "\u00e9");
    }
}

// Flipped, dropped and duplicated bytes of a real error file: whatever a
// crashing worker leaves half-written must come back as a value or nullopt.
TEST(ErrorFile, MutatedErrorFilesNeverThrow) {
    const std::string valid =
        R"({"message": {"message": "RuntimeError: x\u00e9", "extraInfo": {"py_callstack": )"
        R"("Traceback:\n  f()\nRuntimeError: x", "timestamp": "1764445327"}}})";
    ASSERT_TRUE(parse_error_file(valid).has_value());
    std::mt19937 random(12345);
    std::size_t parsed = 0;
    for (int round = 0; round < 5000; ++round) {
        std::string text = valid;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const std::size_t at = random() % text.size();
            switch (random() % 4) {
                case 0:
                    text[at] = static_cast<char>(random() % 256);
                    break;
                case 1:
                    text.erase(at, 1 + random() % 8);
                    break;
                case 2:
                    text.insert(at, text.substr(at, random() % 16));
                    break;
                default:
                    text.resize(at);
                    break;
            }
        }
        std::optional<ErrorFileInfo> info;
        ASSERT_NO_THROW(info = parse_error_file(text)) << text;
        if (info) {
            ++parsed;
            EXPECT_FALSE(info->message.empty());
            EXPECT_LE(info->message.size(), 520u);
        }
    }
    EXPECT_GT(parsed, 0u);  // the mutations do not all break the JSON
}

class ErrorFileRead : public testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = testing::TempDir() + "ddprun_report_XXXXXX";
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        m_dir = pattern;
    }
    void TearDown() override {
        for (const auto& name : m_created) ::unlink(name.c_str());
        ::rmdir(m_dir.c_str());
    }
    std::string write(const std::string& name, const std::string& content) {
        const std::string path = m_dir + "/" + name;
        std::ofstream(path, std::ios::binary) << content;
        m_created.push_back(path);
        return path;
    }

    std::string m_dir;
    std::vector<std::string> m_created;
};

TEST_F(ErrorFileRead, ReadsTorchErrorFile) {
    const auto path = write("error.json", R"({"message": {"message": "OSError: disk full", )"
                                          R"("extraInfo": {"timestamp": "99"}}})");
    const auto info = read_error_file(path);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->message, "OSError: disk full");
    EXPECT_EQ(info->timestamp, "99");
}

TEST_F(ErrorFileRead, MissingFileIsNullopt) {
    EXPECT_FALSE(read_error_file(m_dir + "/never-written.json").has_value());
    EXPECT_FALSE(read_error_file("").has_value());
}

TEST_F(ErrorFileRead, MalformedFileIsNullopt) {
    EXPECT_FALSE(read_error_file(write("bad.json", R"({"message": {"mess)")).has_value());
    EXPECT_FALSE(read_error_file(write("empty.json", "")).has_value());
}

TEST_F(ErrorFileRead, FileUpToOneMibIsRead) {
    std::string content = R"({"message": "E: big"})";
    content += std::string((1u << 20) - content.size(), ' ');
    ASSERT_EQ(content.size(), 1u << 20);
    EXPECT_TRUE(read_error_file(write("limit.json", content)).has_value());
}

TEST_F(ErrorFileRead, FileOverOneMibIsNullopt) {
    std::string content = R"({"message": "E: big"})";
    content += std::string((1u << 20) + 1 - content.size(), ' ');
    EXPECT_FALSE(read_error_file(write("over.json", content)).has_value());
    EXPECT_FALSE(
        read_error_file(write("huge.json", R"({"message": ")" + std::string(2 << 20, 'x') + "\"}"))
            .has_value());
}

TEST_F(ErrorFileRead, DirectoryIsNullopt) {
    EXPECT_FALSE(read_error_file(m_dir).has_value());
}

TEST_F(ErrorFileRead, FifoIsNulloptWithoutBlocking) {
    const std::string path = m_dir + "/fifo";
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    m_created.push_back(path);
    EXPECT_FALSE(read_error_file(path).has_value());
}

TEST_F(ErrorFileRead, UnreadableFileIsNullopt) {
    if (::geteuid() == 0) GTEST_SKIP() << "root reads files regardless of their mode";
    const auto path = write("secret.json", R"({"message": "x"})");
    ASSERT_EQ(::chmod(path.c_str(), 0), 0);
    EXPECT_FALSE(read_error_file(path).has_value());
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

TEST_F(ReportSummary, RootOutOfRangeDoesNotCrash) {
    const std::string text = format_summary("ddprun: job failed", m_outcomes, 99);
    EXPECT_TRUE(contains(text, "ddprun: job failed")) << text;
    EXPECT_TRUE(contains(format_summary("t", {}, 0), "t"));
}

}  // namespace
}  // namespace ddprun
