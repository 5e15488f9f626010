// SignalCopies: a signal sent to every process of the job reaches the agent
// directly and through the supervisor; the pair is one event, and nothing
// else is ever taken for a copy.
#include <signal.h>

#include <gtest/gtest.h>

#include "ddprun/signal_reader.hpp"

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

}  // namespace
}  // namespace ddprun
