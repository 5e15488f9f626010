// torch's error file, as @record writes it and as anything else might have
// left it: every shape torch has used is read, and no file a worker can leave
// behind (malformed, huge, nested, a FIFO, unreadable) throws or blocks.
#include "ddprun/report/error_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ddprun {
namespace {

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

}  // namespace
}  // namespace ddprun
