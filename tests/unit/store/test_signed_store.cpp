// The job secret's guard (signed_store.hpp): HMAC-SHA256 against RFC 4231, that a
// tampered, truncated, unsigned or wrongly signed record is refused naming its key,
// and that agents whose secrets differ (or only one of which has one) fail the
// join together, at once, with one line.
#include "ddprun/store/signed_store.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ddprun/rendezvous/rendezvous.hpp"
#include "support/memory_store.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

const std::string k_secret(32, 'k');
const std::string k_other_secret(32, 'o');

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(Hmac, Rfc4231TestCases) {
    // Test case 1: a 20-byte key of 0x0b.
    EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    // Test case 2: a key shorter than the block.
    EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Hex, RoundTripsAndRefusesWhatIsNotHex) {
    EXPECT_EQ(to_hex(std::string("\x00\xff\x10", 3)), "00ff10");
    EXPECT_EQ(from_hex("00ff10"), std::string("\x00\xff\x10", 3));
    EXPECT_EQ(from_hex("00FF10"), std::string("\x00\xff\x10", 3));
    EXPECT_FALSE(from_hex("0"));
    EXPECT_FALSE(from_hex("zz"));
}

TEST(SignedRecord, OpensWhatItSigned) {
    const std::string stored = sign_record(k_secret, "ddprun/job/r0/stop", "{\"done\":1}");
    EXPECT_TRUE(stored.starts_with(k_signed_prefix));
    EXPECT_EQ(open_record(k_secret, "ddprun/job/r0/stop", stored), "{\"done\":1}");
    // An empty value (an aborted round's "zero") is signed too.
    EXPECT_EQ(open_record(k_secret, "k", sign_record(k_secret, "k", "")), "");
}

TEST(SignedRecord, RefusesEveryChangeNamingTheKey) {
    const std::string key = "ddprun/job/r0/stop";
    const std::string stored = sign_record(k_secret, key, "{\"done\":1}");
    std::string tampered = stored;
    tampered.back() = '2';
    std::string bad_mac = stored;
    bad_mac[k_signed_prefix.size()] = bad_mac[k_signed_prefix.size()] == 'a' ? 'b' : 'a';
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"tampered value", tampered},
        {"tampered MAC", bad_mac},
        {"truncated", stored.substr(0, k_signed_prefix.size() + 10)},
        {"prefix only", std::string(k_signed_prefix)},
        {"unsigned", "{\"done\":1}"},
        {"empty", ""},
        {"wrong key", sign_record(k_other_secret, key, "{\"done\":1}")},
        {"another key's record", sign_record(k_secret, "ddprun/job/r1/stop", "{\"done\":1}")},
        {"another run's record", sign_record(k_secret, "ddprun/other/r0/stop", "{\"done\":1}")},
    };
    for (const auto& [what, record] : cases) {
        auto opened = open_record(k_secret, key, record);
        ASSERT_FALSE(opened) << what;
        EXPECT_TRUE(contains(opened.error(),
                             "a record under '" + key + "' is not signed with this job's secret"))
            << what << ": " << opened.error();
    }
}

TEST(SignedRecord, WithoutASecretSignedRecordsAreRefusedAndOthersPass) {
    EXPECT_EQ(open_record("", "k", "plain"), "plain");
    auto opened = open_record("", "k", sign_record(k_secret, "k", "v"));
    ASSERT_FALSE(opened);
    EXPECT_TRUE(contains(opened.error(), "signed with a job secret and this agent has none"))
        << opened.error();
}

TEST(SignedStore, SignsWritesAndChecksReads) {
    auto memory = make_memory_store(2s);
    auto raw = memory->clone();
    auto store = sign_store(std::move(memory), k_secret);
    store->set("a", "1");
    EXPECT_EQ(raw->get("a"), sign_record(k_secret, "a", "1"));
    EXPECT_EQ(store->get("a"), "1");
    EXPECT_EQ(store->wait_get({"a"}, 1s), std::vector<std::string>{"1"});
    // compare_set: the expected value is signed as its writer signed it.
    EXPECT_EQ(store->compare_set("a", "1", "2"), "2");
    EXPECT_EQ(store->compare_set("b", "", "x"), "x");
    EXPECT_EQ(store->compare_set("b", "", "y"), "x");
    // A stray write is refused, as a RecordRejected naming the key.
    raw->set("c", "{\"forged\":1}");
    try {
        store->get("c");
        FAIL() << "a forged record was accepted";
    } catch (const RecordRejected& e) {
        EXPECT_EQ(e.key(), "c");
        EXPECT_EQ(e.kind(), StoreError::Kind::Other);
    }
    EXPECT_THROW(store->compare_set("c", "", "mine"), RecordRejected);
    // Counters pass through.
    EXPECT_EQ(store->add("n", 2), 2);
    EXPECT_EQ(raw->add("n", 0), 2);
    // A clone signs alike.
    auto clone = store->clone();
    EXPECT_EQ(clone->get("a"), "2");
}

TEST(SignedStore, ClaimSignsItsRecordsAndChecksWhatItPeeks) {
    auto memory = make_memory_store(2s);
    auto raw = memory->clone();
    auto store = sign_store(std::move(memory), k_secret);
    store->set("peeked", "p");
    auto claimed = store->claim("claim", "me", {{"info", "i"}}, "joined", {"peeked", "absent"});
    EXPECT_EQ(claimed.holder, "me");
    EXPECT_EQ(claimed.count, 1);
    EXPECT_EQ(raw->get("info"), sign_record(k_secret, "info", "i"));
    raw->set("claim2", "someone");
    EXPECT_THROW(store->claim("claim2", "me", {}, "joined"), RecordRejected);
}

// ---------------------------------------------------------------------------
// Joining with secrets

Fingerprint job(int nnodes) {
    return Fingerprint{nnodes, "./train", 0, "job", "0.1.0"};
}

NodeInfo node(int nnodes, int node_rank) {
    NodeInfo info;
    info.node_rank = node_rank;
    info.host = "host" + std::to_string(node_rank);
    info.addr = "10.0.0.1";
    info.nproc = 1;
    info.pid = 1000 + node_rank;
    info.fingerprint = job(nnodes);
    return info;
}

// Two agents, node 0 with `zero_secret`, node 1 with `one_secret` ("" = none).
std::vector<std::expected<RoundMembership, Error>> join_two(const std::string& zero_secret,
                                                            const std::string& one_secret) {
    auto memory = make_memory_store(20s);
    std::vector<std::expected<RoundMembership, Error>> results(2);
    std::vector<std::thread> threads;
    const std::string secrets[] = {zero_secret, one_secret};
    for (int rank = 0; rank < 2; ++rank) {
        threads.emplace_back([&, rank, connection = memory->clone()]() mutable {
            auto store = sign_store(std::move(connection), secrets[rank]);
            Rendezvous rendezvous(*store, "job");
            results[static_cast<std::size_t>(rank)] =
                rendezvous.join(0, node(2, rank), rank == 0, 60s);
        });
    }
    for (auto& thread : threads) thread.join();
    return results;
}

TEST(SignedJoin, SameSecretJoins) {
    for (const auto& result : join_two(k_secret, k_secret)) ASSERT_TRUE(result);
}

TEST(SignedJoin, DifferentSecretsOrASecretOnOneSideFailBothAtOnce) {
    const std::pair<std::string, std::string> cases[] = {
        {k_secret, k_other_secret}, {k_secret, ""}, {"", k_secret}};
    for (const auto& [zero, one] : cases) {
        auto start = std::chrono::steady_clock::now();
        auto results = join_two(zero, one);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 30s) << "did not fail fast";
        for (const auto& result : results) {
            ASSERT_FALSE(result);
            EXPECT_EQ(result.error().exit_code, exit_code::kRendezvous);
            const std::string& message = result.error().message;
            EXPECT_TRUE(contains(message, "is not signed with this job's secret") ||
                        contains(message, "signed with a job secret and this agent has none"))
                << message;
            EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        }
    }
}

// A stray client's well-formed records under the join's keys, written before anyone
// joins: the join fails (75) naming the key; nobody joins a forged membership.
TEST(SignedJoin, ForgedJoinRecordsAreNeverActedOn) {
    const std::string forged_membership = "{\"round\":0,\"nodes\":[],\"master_addr\":\"6.6.6.6\"}";
    for (const std::string name : {"result", "zero", "claim/1", "joined/2"}) {
        auto memory = make_memory_store(20s);
        memory->set(JobKeys("job").round(0, name),
                    name == "claim/1" ? "{\"agent\":\"x\"}" : forged_membership);
        std::vector<std::expected<RoundMembership, Error>> results(2);
        std::vector<std::thread> threads;
        for (int rank = 0; rank < 2; ++rank) {
            threads.emplace_back([&, rank, connection = memory->clone()]() mutable {
                auto store = sign_store(std::move(connection), k_secret);
                Rendezvous rendezvous(*store, "job");
                results[static_cast<std::size_t>(rank)] =
                    rendezvous.join(0, node(2, rank), rank == 0, 10s);
            });
        }
        for (auto& thread : threads) thread.join();
        // A forged record that a genuine one overwrote before anyone read it did no harm.
        if (name == "result") {
            EXPECT_FALSE(results[0] || results[1]);
        }
        for (const auto& result : results) {
            if (result) {
                EXPECT_EQ(result->master_addr, "10.0.0.1") << name;
                continue;
            }
            EXPECT_EQ(result.error().exit_code, exit_code::kRendezvous) << name;
            EXPECT_TRUE(contains(result.error().message, "is not signed with this job's secret"))
                << name << ": " << result.error().message;
        }
    }
}

}  // namespace
}  // namespace ddprun
