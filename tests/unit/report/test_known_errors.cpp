// The known-error table: each entry is found in an error file's message or in
// the stderr tail, as torch prints it, and nothing is added for errors it does
// not know. The texts are torch's own (2.14's messages, copied from real runs).
#include "ddprun/report/known_errors.hpp"
#include "ddprun/report/report.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

struct KnownCase {
    const char* name;
    std::string line;     // what the worker printed
    std::string fix_has;  // a part of the fix; empty: no fix
};

class KnownErrorTable : public testing::TestWithParam<KnownCase> {};

TEST_P(KnownErrorTable, FoundInTheStderrTailAndInTheErrorMessage) {
    const KnownCase& c = GetParam();
    auto from_tail = known_error_fix("", {"Traceback (most recent call last):", c.line, "  end"});
    auto from_message = known_error_fix("RuntimeError: " + c.line + "\nmore", {});
    if (c.fix_has.empty()) {
        EXPECT_FALSE(from_tail) << *from_tail;
        EXPECT_FALSE(from_message) << *from_message;
        return;
    }
    ASSERT_TRUE(from_tail);
    ASSERT_TRUE(from_message);
    EXPECT_EQ(*from_tail, *from_message);
    EXPECT_NE(from_tail->find(c.fix_has), std::string_view::npos) << *from_tail;
    EXPECT_EQ(from_tail->find('\n'), std::string_view::npos) << "one line";
}

INSTANTIATE_TEST_SUITE_P(
    Torch, KnownErrorTable,
    testing::Values(
        KnownCase{"LibuvMissing",
                  "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built "
                  "without libuv support, run with USE_LIBUV=0 to disable it.",
                  "USE_LIBUV=0"},
        KnownCase{"LibuvMissingTorch26",
                  "RuntimeError: use_libuv was requested but PyTorch was build without libuv "
                  "support",
                  "USE_LIBUV=0"},
        KnownCase{"NoNccl", "RuntimeError: Distributed package doesn't have NCCL built in", "gloo"},
        KnownCase{"NoTorch", "ModuleNotFoundError: No module named 'torch'", "PYTHON_EXEC"},
        KnownCase{"OtherModule", "ModuleNotFoundError: No module named 'torchvision'", ""},
        KnownCase{"Unknown", "RuntimeError: CUDA error: device-side assert triggered", ""},
        KnownCase{"Empty", "", ""}),
    [](const testing::TestParamInfo<KnownCase>& param_info) { return param_info.param.name; });

TEST(KnownErrorReport, TheSummaryAddsTheFixAfterTheTail) {
    WorkerOutcome worker;
    worker.rank = 3;
    worker.exit_code = 1;
    worker.stderr_tail = {"  File \"train.py\", line 9, in <module>",
                          "torch.distributed.DistStoreError: use_libuv was requested but PyTorch "
                          "was built without libuv support, run with USE_LIBUV=0 to disable it."};
    std::string summary = format_summary("ddprun: job failed", {worker}, 0);
    auto tail = summary.find("| torch.distributed.DistStoreError");
    auto fix = summary.find("\n  fix:       this torch has no libuv: export USE_LIBUV=0");
    ASSERT_NE(tail, std::string::npos) << summary;
    ASSERT_NE(fix, std::string::npos) << summary;
    EXPECT_LT(tail, fix) << summary;
}

TEST(KnownErrorReport, NoFixLineForAnUnknownError) {
    WorkerOutcome worker;
    worker.exit_code = 1;
    worker.stderr_tail = {"ValueError: bad learning rate"};
    EXPECT_EQ(format_summary("ddprun: job failed", {worker}, 0).find("fix:"), std::string::npos);
}

}  // namespace
}  // namespace ddprun
