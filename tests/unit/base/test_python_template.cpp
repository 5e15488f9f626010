// Python's string.Template.safe_substitute, as torchrun applies it. The expected
// values are what CPython 3.11 prints for Template(text).safe_substitute(local_rank="3").
#include "ddprun/base/python_template.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

std::optional<std::string> local_rank_3(std::string_view name) {
    if (name == "local_rank") return "3";
    return std::nullopt;
}

TEST(PythonTemplate, SubstitutesAsSafeSubstituteDoes) {
    struct Case {
        std::string text;
        std::string expected;
    };
    const std::vector<Case> cases = {
        {"--rank=${local_rank}", "--rank=3"},
        {"$local_rank", "3"},
        {"$local_rankX", "$local_rankX"},
        {"${local_rank}x", "3x"},
        {"$$local_rank", "$local_rank"},
        {"$$", "$"},
        {"$", "$"},
        {"a$", "a$"},
        {"${local_rank", "${local_rank"},
        {"${other}", "${other}"},
        {"$other", "$other"},
        {"$ {local_rank}", "$ {local_rank}"},
        {"cost $5", "cost $5"},
        {"${LOCAL_RANK}", "${LOCAL_RANK}"},
        {"$_local_rank", "$_local_rank"},
        {"${local_rank}${local_rank}", "33"},
        {"$$${local_rank}", "$3"},
        {"x$$$local_rank", "x$3"},
        {"no placeholder", "no placeholder"},
        {"", ""},
    };
    for (const Case& c : cases)
        EXPECT_EQ(substitute_python_template(c.text, local_rank_3), c.expected) << c.text;
}

TEST(PythonTemplate, RewritesTheLiteralTextOnly) {
    auto braces = [](std::string_view text) {
        std::string out;
        for (char c : text) out += c == '{' || c == '}' ? std::string(2, c) : std::string(1, c);
        return out;
    };
    auto to_ddprun = [](std::string_view name) -> std::optional<std::string> {
        if (name == "rank") return "{rank}";
        return std::nullopt;
    };
    EXPECT_EQ(substitute_python_template("{x} ${rank}: ", to_ddprun, braces), "{{x}} {rank}: ");
    EXPECT_EQ(substitute_python_template("${other}$$", to_ddprun, braces), "${{other}}$");
}

}  // namespace
}  // namespace ddprun
