// The run's key space on the wire: agents of one release meet under these names,
// and `ddprun status`, etcdctl users and the signed records depend on them.
#include <gtest/gtest.h>

#include "ddprun/rendezvous/job_keys.hpp"

namespace ddprun {
namespace {

TEST(JobKeys, TheRunIdKeyIsOutsideEveryRun) {
    EXPECT_EQ(JobKeys::run_id_key(), "ddprun/run_id");
}

TEST(JobKeys, RoundKeysAreUnderTheRunAndTheRound) {
    EXPECT_EQ(JobKeys("job42").round(3, "stop"), "ddprun/job42/r3/stop");
    EXPECT_EQ(JobKeys("job42").round(0, "claim/1"), "ddprun/job42/r0/claim/1");
    EXPECT_EQ(JobKeys::in_round(2, "alive/"), "r2/alive/");
}

TEST(JobKeys, ElasticKeysAreUnderTheRunOutsideTheRounds) {
    EXPECT_EQ(JobKeys("job").elastic("arrivals"), "ddprun/job/e/arrivals");
    EXPECT_EQ(JobKeys::in_elastic("leader"), "e/leader");
}

TEST(JobKeys, StatusIsOutsideTheRounds) {
    EXPECT_EQ(JobKeys("job42").status(3), "ddprun/job42/status/3");
}

TEST(JobKeys, EtcdNamesTheRunUnderItsPrefix) {
    const JobKeys keys("job");
    EXPECT_EQ(keys.run_prefix(), "ddprun/job/");
    EXPECT_EQ(keys.run_prefix("/team/"), "/team/job/");
    EXPECT_EQ(keys.lease("/ddprun/"), "/ddprun/job/lease");
    EXPECT_EQ(keys.out(), "ddprun/job/out");
}

}  // namespace
}  // namespace ddprun
