// A job's store from the rendezvous options alone (job_store.hpp): where it is
// and how a client reaches it, for c10d and etcd, as `ddprun status` and an
// agent's coordinator both take it; and the etcd password file, read once.
#include "ddprun/cluster/job_store.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/rendezvous/job_keys.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

JobStoreSettings settings(std::string backend, std::string endpoints) {
    JobStoreSettings s;
    s.backend = std::move(backend);
    s.endpoints = std::move(endpoints);
    s.run_id = "job";
    s.rendezvous.read_timeout = 7s;
    return s;
}

TEST(JobStoreOptions, C10dIsOneHostAndPort) {
    auto options = job_store_options(settings("c10d", "10.0.0.1:29500"));
    ASSERT_TRUE(options) << options.error().message;
    EXPECT_EQ(options->store.host, "10.0.0.1");
    EXPECT_EQ(options->store.port, 29500);
    EXPECT_EQ(options->store.timeout, 7s);
    EXPECT_FALSE(options->store.is_server) << "an agent decides who hosts it";
    EXPECT_FALSE(options->etcd);
    EXPECT_EQ(options->where(), "the c10d store at 10.0.0.1:29500");
    EXPECT_EQ(job_store_options(settings("c10d", "node0"))->store.port, k_default_rdzv_port);
}

TEST(JobStoreOptions, EtcdIsEveryMemberWithTheJobsRootAndNoLease) {
    JobStoreSettings s = settings("etcd", "a:2381,b,[::1]:2390");
    s.rendezvous.other["prefix"] = "/team/";
    s.rendezvous.etcd.user = "ddprun";
    s.etcd_password = "pw";
    auto options = job_store_options(s);
    ASSERT_TRUE(options) << options.error().message;
    ASSERT_TRUE(options->etcd);
    const EtcdStoreOptions& etcd = *options->etcd;
    ASSERT_EQ(etcd.client.endpoints.size(), 3u);
    EXPECT_EQ(etcd.client.endpoints[0].host, "a");
    EXPECT_EQ(etcd.client.endpoints[0].port, 2381);
    EXPECT_EQ(etcd.client.endpoints[1].port, 2379);
    EXPECT_EQ(etcd.client.endpoints[2].host, "::1");
    EXPECT_EQ(etcd.client.timeout, 7s);
    EXPECT_EQ(etcd.client.outage_grace, 0ms) << "an agent's grace is the agent's to add";
    EXPECT_FALSE(etcd.client.tls);
    ASSERT_TRUE(etcd.client.credentials);
    EXPECT_EQ(etcd.client.credentials->user, "ddprun");
    EXPECT_EQ(etcd.client.credentials->password, "pw");
    EXPECT_EQ(etcd.prefix, "/team/");
    EXPECT_EQ(etcd.job_root, JobKeys::k_root);
    EXPECT_FALSE(etcd.lease) << "a reader writes nothing";
    EXPECT_EQ(options->where(), "etcd at a:2381");

    s.rendezvous.other.clear();
    s.rendezvous.etcd = EtcdAccess{true, "ca.pem", "", "", "", ""};
    options = job_store_options(s);
    ASSERT_TRUE(options && options->etcd);
    EXPECT_EQ(options->etcd->prefix, "/ddprun/");
    ASSERT_TRUE(options->etcd->client.tls);
    EXPECT_EQ(options->etcd->client.tls->ca_cert, "ca.pem");
    EXPECT_FALSE(options->etcd->client.credentials);
}

TEST(JobStoreOptions, AnEndpointThatIsNotHostAndPortIsAUsageError) {
    for (const auto& [backend, endpoints] :
         {std::pair{"c10d", "node0:abc"}, std::pair{"etcd", "a:2379,b:99999"}}) {
        auto options = job_store_options(settings(backend, endpoints));
        ASSERT_FALSE(options) << endpoints;
        EXPECT_EQ(options.error().exit_code, exit_code::kUsage) << endpoints;
    }
}

class EtcdAccessFiles : public ::testing::Test {
  protected:
    void SetUp() override {
        m_dir = std::filesystem::temp_directory_path() /
                ("ddprun-job-store-" + std::to_string(::getpid()));
        std::filesystem::create_directories(m_dir);
    }
    void TearDown() override { std::filesystem::remove_all(m_dir); }
    std::string file(const std::string& name, const std::string& text) {
        const std::string path = (m_dir / name).string();
        std::ofstream(path) << text;
        return path;
    }
    std::filesystem::path m_dir;
};

TEST_F(EtcdAccessFiles, ThePasswordIsTheFirstLine) {
    EtcdAccess access;
    access.user = "ddprun";
    access.password_file = file("password", "secret\r\nsecond line\n");
    EXPECT_EQ(read_etcd_access("etcd", access), "secret");
    EXPECT_EQ(read_etcd_access("c10d", access), "") << "c10d has no etcd access";
    EXPECT_EQ(read_etcd_access("etcd", EtcdAccess{}), "") << "no user, no password";
}

TEST_F(EtcdAccessFiles, AMissingOrEmptyPasswordFileIsAUsageError) {
    EtcdAccess access;
    access.user = "ddprun";
    access.password_file = (m_dir / "missing").string();
    auto missing = read_etcd_access("etcd", access);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.error().exit_code, exit_code::kUsage);
    EXPECT_NE(missing.error().message.find("--rdzv_conf password_file=" + access.password_file),
              std::string::npos)
        << missing.error().message;
    access.password_file = file("empty", "\nsecond\n");
    auto empty = read_etcd_access("etcd", access);
    ASSERT_FALSE(empty);
    EXPECT_NE(empty.error().message.find("the first line is empty"), std::string::npos)
        << empty.error().message;
}

}  // namespace
}  // namespace ddprun
