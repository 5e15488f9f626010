// The elastic protocol over a store (elastic.hpp), with threads as agents and an
// in-process store: a round forms through the leader; and whatever else sits in
// the job's keys (garbage in the event queue, a hole in it, a malformed answer,
// a fixed-size job's node 0) gives one clear line or is skipped, never a hang
// or a crash.
#include "ddprun/elastic/elastic.hpp"

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

Fingerprint elastic_job(int min, int max) {
    Fingerprint f{max, "./train", 0, "job", "1.0"};
    f.min_nnodes = min;
    f.last_call_ms = 0;
    return f;
}

NodeInfo agent_info(int agent, const Fingerprint& job) {
    NodeInfo info;
    info.host = "h" + std::to_string(agent);
    info.addr = "10.0.0." + std::to_string(agent + 1);
    info.pid = 100 + agent;
    info.agent_id = "agent-" + std::to_string(agent);
    info.master_port = 29500;
    info.fingerprint = job;
    return info;
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// A leader (agent 0) over `store` for `job`, last call 0 and a short join timeout.
std::unique_ptr<ElasticLeader> start_leader(Store& store, const Fingerprint& job) {
    ElasticLeader::Options options;
    options.run_id = "job";
    options.agent = 0;
    options.me = agent_info(0, job);
    options.limits = {job.min(), job.nnodes, 0ms, 20s};
    options.heartbeat_timeout = 60s;
    auto leader = std::make_unique<ElasticLeader>(store.clone(), options);
    leader->start();
    return leader;
}

// Agent `agent` arrives and joins on a thread of its own.
std::future<std::expected<RoundMembership, Error>> join_async(Store& store, const Fingerprint& job,
                                                              int agent) {
    auto connection = std::shared_ptr<Store>(store.clone());
    return std::async(std::launch::async, [connection, job, agent] {
        ElasticMember member(*connection, "job", agent);
        return member.join(agent_info(agent, job), {}, [] { return false; });
    });
}

TEST(ElasticWire, TwoAgentsFormARoundThroughTheLeader) {
    auto store = make_memory_store(10s);
    const Fingerprint job = elastic_job(2, 3);
    auto leader = start_leader(*store, job);
    EXPECT_EQ(ElasticMember::arrive(*store, "job"), 0);
    EXPECT_EQ(ElasticMember::arrive(*store, "job"), 1);
    auto zero = join_async(*store, job, 0);
    auto one = join_async(*store, job, 1);
    auto r0 = zero.get();
    auto r1 = one.get();
    ASSERT_TRUE(r0) << r0.error().message;
    ASSERT_TRUE(r1) << r1.error().message;
    EXPECT_EQ(r0->round, 0);
    EXPECT_EQ(r1->round, 0);
    EXPECT_EQ(r0->node_rank, 0);
    EXPECT_EQ(r1->node_rank, 1);
    EXPECT_EQ(r1->master_addr, "10.0.0.1") << "node 0's address";
    EXPECT_EQ(r1->nproc_per_node, (std::vector<int>{1, 1}));
}

TEST(ElasticWire, AMalformedEventIsSkipped) {
    auto store = make_memory_store(10s);
    const Fingerprint job = elastic_job(2, 3);
    store->add(JobKeys("job").elastic("events"), 1);
    store->set(JobKeys("job").elastic("event/1"), "{not json");
    auto leader = start_leader(*store, job);
    auto zero = join_async(*store, job, 0);
    auto one = join_async(*store, job, 1);
    auto r0 = zero.get();
    ASSERT_TRUE(r0) << r0.error().message;
    ASSERT_TRUE(one.get());
}

TEST(ElasticWire, AHoleInTheEventQueueIsSkipped) {
    // An agent killed between numbering its event and writing it.
    auto store = make_memory_store(10s);
    const Fingerprint job = elastic_job(2, 3);
    store->add(JobKeys("job").elastic("events"), 1);
    auto leader = start_leader(*store, job);
    auto started = std::chrono::steady_clock::now();
    auto zero = join_async(*store, job, 0);
    auto one = join_async(*store, job, 1);
    auto r0 = zero.get();
    ASSERT_TRUE(r0) << r0.error().message;
    ASSERT_TRUE(one.get());
    EXPECT_LT(std::chrono::steady_clock::now() - started, 8s) << "the hole was not skipped";
}

TEST(ElasticWire, AMalformedAnswerIsOneLineNamingTheKey) {
    auto store = make_memory_store(10s);
    const Fingerprint job = elastic_job(2, 3);
    store->set(JobKeys("job").elastic("answer/3/0"), R"({"kind":"maybe"})");
    ElasticMember member(*store, "job", 3);
    auto result = member.join(agent_info(3, job), {}, [] { return false; });
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().exit_code, 75);
    EXPECT_TRUE(
        contains(result.error().message, "malformed record under 'ddprun/job/e/answer/3/0'"))
        << result.error().message;
    EXPECT_EQ(result.error().message.find('\n'), std::string::npos);
}

TEST(ElasticWire, AFixedSizeAgentAndAnElasticJobTellEachOtherApart) {
    // An elastic agent where a fixed-size job's node 0 waits: nobody will answer it, but
    // node 0's record says why.
    {
        auto store = make_memory_store(10s);
        NodeInfo zero = agent_info(0, Fingerprint{3, "./train", 0, "job", "1.0"});
        zero.node_rank = 0;
        store->set(JobKeys("job").round(0, "zero"), to_json(zero));
        ElasticMember member(*store, "job", 0);
        auto result = member.join(agent_info(0, elastic_job(1, 3)), {}, [] { return false; });
        ASSERT_FALSE(result);
        EXPECT_TRUE(
            contains(result.error().message, "nnodes differ: 3 on node 0, 1:3 on this node"))
            << result.error().message;
    }
    // A fixed-size agent where an elastic job's leader runs.
    {
        auto store = make_memory_store(10s);
        const Fingerprint job = elastic_job(1, 3);
        auto leader = start_leader(*store, job);
        Rendezvous rendezvous(*store, "job");
        NodeInfo me = agent_info(1, Fingerprint{3, "./train", 0, "job", "1.0"});
        me.node_rank = 1;
        auto result = rendezvous.join(0, me, false, 5s);
        ASSERT_FALSE(result);
        EXPECT_TRUE(contains(result.error().message, "nnodes differ: 1:3 on node 0, 3 on node 1"))
            << result.error().message;
    }
}

TEST(ElasticWire, ALateComerAfterTheJobClosedReadsItsEnd) {
    auto store = make_memory_store(10s);
    const Fingerprint job = elastic_job(2, 3);
    auto leader = start_leader(*store, job);
    auto zero = join_async(*store, job, 0);
    auto one = join_async(*store, job, 1);
    ASSERT_TRUE(zero.get());
    ASSERT_TRUE(one.get());
    ElasticMember(*store, "job", 0).close(0, "done");
    leader->wait_closed(5s);
    ElasticMember late(*store, "job", 2);
    auto result = late.join(agent_info(2, job), {}, [] { return false; });
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error().exit_code, 0);
    EXPECT_TRUE(contains(result.error().message, "finished")) << result.error().message;
}

}  // namespace
}  // namespace ddprun
