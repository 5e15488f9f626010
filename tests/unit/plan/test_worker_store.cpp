// Who hosts the workers' store: TORCH_DISABLE_SHARE_RDZV_TCP_STORE read as torchrun
// 2.14 reads it, and the torch without libuv left as it was.
#include <gtest/gtest.h>

#include "ddprun/plan/worker_store.hpp"

namespace ddprun {
namespace {

int asked = 0;
bool starts() {
    ++asked;
    return true;
}
bool lacks_libuv() {
    ++asked;
    return false;
}

TEST(WorkerStore, SharedByDefaultWhereTorchsClientsStart) {
    asked = 0;
    auto choice = choose_worker_store(AgentsMeet::TcpStore, {}, starts);
    EXPECT_TRUE(choice.agent_hosts);
    EXPECT_TRUE(choice.why_not.empty());
    EXPECT_EQ(asked, 1);
}

TEST(WorkerStore, ATorchWithoutLibuvKeepsRankZerosStoreAndSaysWhy) {
    auto choice = choose_worker_store(AgentsMeet::TcpStore,
                                      {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", ""}}, lacks_libuv);
    EXPECT_FALSE(choice.agent_hosts) << "empty counts as unset";
    EXPECT_NE(choice.why_not.find("no libuv"), std::string::npos) << choice.why_not;
    EXPECT_NE(choice.why_not.find("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0"), std::string::npos)
        << choice.why_not;
}

TEST(WorkerStore, TheVariableDecidesAsTorchrunReadsIt) {
    asked = 0;
    for (const char* value : {"0", "false", "yes", "2"}) {
        SCOPED_TRACE(value);
        auto choice = choose_worker_store(
            AgentsMeet::TcpStore, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", value}}, lacks_libuv);
        EXPECT_TRUE(choice.agent_hosts) << "torchrun: anything but \"1\" shares";
        EXPECT_TRUE(choice.why_not.empty());
    }
    EXPECT_FALSE(choose_worker_store(AgentsMeet::TcpStore,
                                     {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}, starts)
                     .agent_hosts);
    EXPECT_EQ(asked, 0) << "a value set decides without loading libtorch";
}

TEST(WorkerStore, EtcdNeverShares) {
    asked = 0;
    EXPECT_FALSE(choose_worker_store(AgentsMeet::Etcd, {}, starts).agent_hosts);
    EXPECT_FALSE(
        choose_worker_store(AgentsMeet::Etcd, {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}}, starts)
            .agent_hosts);
    EXPECT_EQ(asked, 0);
}

// One node's agent loads libtorch only when asked to host.
TEST(WorkerStore, OneNodeSharesOnlyWhenAsked) {
    asked = 0;
    EXPECT_FALSE(choose_worker_store(AgentsMeet::OneNode, {}, starts).agent_hosts);
    EXPECT_TRUE(choose_worker_store(AgentsMeet::OneNode, {}, starts).why_not.empty());
    EXPECT_TRUE(choose_worker_store(AgentsMeet::OneNode,
                                    {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"}}, starts)
                    .agent_hosts);
    EXPECT_FALSE(choose_worker_store(AgentsMeet::OneNode,
                                     {{"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"}}, starts)
                     .agent_hosts);
    EXPECT_EQ(asked, 0);
}

}  // namespace
}  // namespace ddprun
