// Scratch directories: made locked, removed without ever leaving one that has
// lost its lock, and reclaimed from dead owners only.
#include "ddprun/base/scratch_dir.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace ddprun {
namespace {

class ScratchDir : public testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "scratch-test-XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        m_base = tmpl;
    }
    void TearDown() override { fs::remove_all(m_base); }

    // What a dead ddprun leaves: a directory with its (unlocked) .lock and files.
    std::string dead_dir(const std::string& name) {
        const fs::path dir = fs::path(m_base) / name;
        fs::create_directories(dir / "none" / "attempt_0" / "0");
        std::ofstream(dir / ".lock") << "";
        std::ofstream(dir / "none" / "attempt_0" / "0" / "error.json") << "{}";
        return dir.string();
    }

    std::string m_base;
};

TEST_F(ScratchDir, ADeadOwnersDirectoryIsReclaimedALiveOneIsNot) {
    auto mine = make_scratch_dir(m_base);
    ASSERT_TRUE(mine) << mine.error().message;
    const std::string dead = dead_dir("ddprun-dead01");
    EXPECT_EQ(reclaim_scratch_dirs(m_base), 1);
    EXPECT_FALSE(fs::exists(dead));
    EXPECT_TRUE(fs::exists(*mine + "/.lock")) << "this process holds its lock";
    remove_scratch_dir(*mine);
    EXPECT_TRUE(fs::is_empty(m_base));
}

// A remover SIGKILLed midway leaves "<dir>.gone": dead by construction, removed
// by the next ddprun although it has no lock left.
TEST_F(ScratchDir, AHalfRemovedDirectoryIsReclaimed) {
    const std::string dead = dead_dir("ddprun-dead02");
    fs::rename(dead, dead + ".gone");
    fs::remove(dead + ".gone/.lock");
    EXPECT_EQ(reclaim_scratch_dirs(m_base), 1);
    EXPECT_TRUE(fs::is_empty(m_base));
}

TEST_F(ScratchDir, OnlyDdprunsOwnNamesAreTouched) {
    for (const char* name : {"ddprun_logs_abc123", "ddprun-toolong1", "ddprun-short", "other.gone",
                             "ddprun-x.gone", "ddprun-nolock"}) {
        fs::create_directories(fs::path(m_base) / name);
    }
    EXPECT_EQ(reclaim_scratch_dirs(m_base), 0);
    EXPECT_TRUE(fs::exists(fs::path(m_base) / "ddprun-nolock")) << "no .lock: not known dead";
    EXPECT_TRUE(fs::exists(fs::path(m_base) / "ddprun_logs_abc123"));
}

}  // namespace
}  // namespace ddprun
