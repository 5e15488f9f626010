// SignalCopies: a signal sent to every process of the job reaches the agent
// directly and through the supervisor; the pair is one event, and nothing
// else is ever taken for a copy.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "ddprun/base/signal_reader.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

const SignalCopies::Clock::time_point t0{};

ReceivedSignal direct(int number, pid_t sender) {
    return {number, sender, false};
}
ReceivedSignal relayed(int number, pid_t sender) {
    return {number, sender, true};
}

TEST(SignalCopies, ADirectAndARelayedCopyFromOneSenderAreOneEvent) {
    SignalCopies copies;
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 42), t0));
    EXPECT_TRUE(copies.is_copy(relayed(SIGTERM, 42), t0 + 1ms));
    // Either order.
    EXPECT_FALSE(copies.is_copy(relayed(SIGUSR1, 42), t0 + 2ms));
    EXPECT_TRUE(copies.is_copy(direct(SIGUSR1, 42), t0 + 3ms));
}

TEST(SignalCopies, TwoSignalsThatCameTheSameWayBothCount) {
    SignalCopies copies;
    // A second Ctrl-C (the kernel, relayed twice) or a second kill of the agent alone.
    EXPECT_FALSE(copies.is_copy(relayed(SIGINT, 0), t0));
    EXPECT_FALSE(copies.is_copy(relayed(SIGINT, 0), t0 + 1ms));
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 7), t0));
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 7), t0 + 1ms));
}

TEST(SignalCopies, EachCopyPairsOnceSoARepeatedDeliveryCountsTwice) {
    // scancel twice: each delivery arrives both ways, and is one event each.
    SignalCopies copies;
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 9), t0));
    EXPECT_TRUE(copies.is_copy(relayed(SIGTERM, 9), t0));
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 9), t0 + 10ms));
    EXPECT_TRUE(copies.is_copy(relayed(SIGTERM, 9), t0 + 10ms));
}

TEST(SignalCopies, OtherSendersOtherSignalsAndOldCopiesNeverPair) {
    SignalCopies copies(1000ms);
    EXPECT_FALSE(copies.is_copy(direct(SIGTERM, 1), t0));
    EXPECT_FALSE(copies.is_copy(relayed(SIGTERM, 2), t0));       // another sender
    EXPECT_FALSE(copies.is_copy(relayed(SIGINT, 1), t0));        // another signal
    EXPECT_FALSE(copies.is_copy(relayed(SIGTERM, 1), t0 + 2s));  // past the window
}

// Slurm's step daemon is known by its name: a process named slurmstepd is it,
// this test process and a pid that does not exist are not.
TEST(StepDaemon, IsKnownByItsName) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::prctl(PR_SET_NAME, "slurmstepd");
        char byte = 1;
        (void)!::write(ready[1], &byte, 1);
        ::pause();
        ::_exit(0);
    }
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1);
    EXPECT_TRUE(sent_by_step_daemon(child));
    EXPECT_FALSE(sent_by_step_daemon(::getpid()));
    EXPECT_FALSE(sent_by_step_daemon(0));  // the kernel (a terminal's Ctrl-C)
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    ::close(ready[0]);
    ::close(ready[1]);
    EXPECT_FALSE(sent_by_step_daemon(child));  // gone
}

}  // namespace
}  // namespace ddprun
