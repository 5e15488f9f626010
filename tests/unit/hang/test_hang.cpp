// Progress beats (progress.hpp) and the hang rules (hang_monitor.hpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "ddprun/hang/hang_monitor.hpp"
#include "ddprun/hang/progress.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Clock = HangMonitor::Clock;

void write_text(int fd, const std::string& text) {
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

// ---------------------------------------------------------------------------
// ProgressChannel

TEST(ProgressChannel, EachLookSeesWhatWasWrittenSinceAndTheLastLine) {
    auto channel = ProgressChannel::create();
    ASSERT_TRUE(channel) << channel.error().message;
    EXPECT_EQ(channel->look().bytes, 0u) << "nothing written yet";
    write_text(channel->worker_fd(), "step 1\n");
    write_text(channel->worker_fd(), "step 2\n");
    auto seen = channel->look();
    EXPECT_EQ(seen.bytes, 14u);
    EXPECT_EQ(seen.label, "step 2");
    EXPECT_EQ(channel->look().bytes, 0u) << "no new beat";
    write_text(channel->worker_fd(), "x");  // a beat without a newline is a beat too
    seen = channel->look();
    EXPECT_EQ(seen.bytes, 1u);
    EXPECT_EQ(seen.label, "x");
}

TEST(ProgressChannel, TheLabelIsOneShortLine) {
    auto channel = ProgressChannel::create();
    ASSERT_TRUE(channel);
    write_text(channel->worker_fd(), "  phase\teval \x1b[31m " + std::string(1000, 'y') + "\n");
    auto seen = channel->look();
    EXPECT_EQ(seen.label.size(), 200u - 2) << seen.label;  // cut, then trimmed
    EXPECT_EQ(seen.label.find_first_of("\t\x1b\n"), std::string::npos) << seen.label;
}

// The worker's end appends and never blocks: millions of beats while nobody looks
// cost their size, and a look gives the memory back (punched pages).
TEST(ProgressChannel, ABeatStormNeverBlocksAndItsMemoryIsGivenBack) {
    auto channel = ProgressChannel::create();
    ASSERT_TRUE(channel);
    const int fd = channel->worker_fd();
    ASSERT_TRUE(::fcntl(fd, F_GETFL) & O_APPEND);
    const std::string beat = "step 123456\n";
    for (int i = 0; i < 200000; ++i) write_text(fd, beat);  // 2.4 MB, far past any pipe
    auto seen = channel->look();
    EXPECT_EQ(seen.bytes, 200000u * beat.size());
    EXPECT_EQ(seen.label, "step 123456");
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_LT(st.st_blocks * 512, 64 * 1024) << "read pages are punched out";
    write_text(fd, "step 7\n");
    EXPECT_EQ(channel->look().label, "step 7");
}

TEST(ProgressChannel, BothEndsAreCloseOnExec) {
    auto channel = ProgressChannel::create();
    ASSERT_TRUE(channel);
    EXPECT_TRUE(::fcntl(channel->worker_fd(), F_GETFD) & FD_CLOEXEC);
    EXPECT_EQ(::fcntl(channel->worker_fd(), F_GETFL) & O_ACCMODE, O_WRONLY);
}

// ---------------------------------------------------------------------------
// HangMonitor

TEST(HangMonitor, ARankIsWatchedFromItsFirstBeat) {
    const auto t0 = Clock::now();
    HangMonitor monitor(HangLimits{10s, std::nullopt}, {1, 0}, t0);
    EXPECT_TRUE(monitor.hung(t0 + 1h).empty()) << "never beat: not watched";
    monitor.beat(0, t0 + 5s, "step 1");
    EXPECT_TRUE(monitor.hung(t0 + 15s).empty());
    EXPECT_EQ(monitor.hung(t0 + 15s + 1ms), (std::vector<int>{0}));
    monitor.beat(0, t0 + 15s, "");
    EXPECT_TRUE(monitor.hung(t0 + 20s).empty()) << "a beat resets the clock";
    auto progress = monitor.progress(t0 + 20s);
    ASSERT_EQ(progress.size(), 2u);
    EXPECT_EQ(progress[0], (RankProgress{0, -1, 5000, 20000, "step 1", false}))
        << "an empty label keeps the last one";
    EXPECT_EQ(progress[1], (RankProgress{1, -1, -1, 20000, "", false}));
}

TEST(HangMonitor, TheFirstBeatTimeoutWatchesRanksThatNeverBeat) {
    const auto t0 = Clock::now();
    HangMonitor monitor(HangLimits{10s, 60s}, {0, 1}, t0);
    monitor.beat(1, t0 + 55s, "warm");
    EXPECT_TRUE(monitor.hung(t0 + 60s).empty());
    EXPECT_EQ(monitor.hung(t0 + 60s + 1ms), (std::vector<int>{0})) << "never beat within 60 s";
    EXPECT_EQ(monitor.hung(t0 + 65s + 1ms), (std::vector<int>{0, 1})) << "silent past 10 s";
}

TEST(HangMonitor, AnExitedWorkerIsNotWatched) {
    const auto t0 = Clock::now();
    HangMonitor monitor(HangLimits{1s, 1s}, {0}, t0);
    monitor.beat(0, t0, "x");
    monitor.exited(0);
    EXPECT_TRUE(monitor.hung(t0 + 1h).empty());
    EXPECT_TRUE(monitor.progress(t0 + 1h).empty());
}

TEST(HangMonitor, OffMeansNeverHung) {
    const auto t0 = Clock::now();
    HangMonitor monitor(HangLimits{}, {0}, t0);
    monitor.beat(0, t0, "x");
    EXPECT_TRUE(monitor.hung(t0 + 24h).empty());
}

TEST(DescribeProgress, HungFirstThenTheOthersGroupedByLabelAndSilence) {
    const std::vector<RankProgress> ranks = {
        {0, 1, 9900, 60000, "step 42", false}, {3, 1, 30100, 60000, "step 41", true},
        {1, 1, 9800, 60000, "step 42", false}, {2, 1, 9900, 60000, "step 42", false},
        {5, 1, -1, 60000, "", false},          {4, 1, 100, 60000, "eval", false},
    };
    EXPECT_EQ(describe_progress(ranks),
              "no progress from rank 3 for 30.1 s (last beat 'step 41'); ranks 0-2 last beat "
              "9.9 s ago ('step 42'); rank 4 last beat 100 ms ago ('eval'); rank 5 never beat");
    EXPECT_EQ(describe_progress({}), "no rank beats");
    auto first = first_to_stop(ranks);
    ASSERT_TRUE(first);
    EXPECT_EQ(describe_first_stop(*first, HangLimits{30s, std::nullopt}),
              "rank 3 (node 1) stopped making progress first: no beat for 30.1 s "
              "(--hang-timeout=30), last beat 'step 41'");
}

// Of the hung ranks, the one silent longest stopped first; one that never beat has
// been silent since its start.
TEST(DescribeProgress, TheFirstToStopIsTheLongestSilent) {
    EXPECT_FALSE(first_to_stop({{0, 0, 50000, 60000, "a", false}}));
    auto first = first_to_stop({{0, 0, 31000, 60000, "a", true},
                                {1, 0, -1, 40000, "", true},
                                {2, 1, 32000, 60000, "b", true}});
    ASSERT_TRUE(first);
    EXPECT_EQ(first->rank, 1);
    EXPECT_EQ(describe_first_stop(*first, HangLimits{30s, 35s}),
              "rank 1 (node 0) never beat within --hang-timeout-first=35 (running 40 s)");
}

}  // namespace
}  // namespace ddprun
