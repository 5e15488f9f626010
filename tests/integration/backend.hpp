// The rendezvous backend a multi-node test runs over, for the suites that run
// each test over both (multi-node, reliability, elastic): c10d, where node 0's
// agent hosts a TCPStore on a free port, and etcd, a real one that the test
// process starts on first use and shares between its tests. What behaves the
// same on both is one test instantiated twice ("<test>/c10d", "<test>/etcd",
// or "<case>_c10d", "<case>_etcd" for a test that has cases of its own).
#pragma once

#include <sys/types.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "harness.hpp"
#include "support/etcd_server.hpp"

namespace ddprun_it {

inline const std::vector<std::string> k_backends = {"c10d", "etcd"};

// The one-member etcd the etcd variants of a test process meet through,
// started when a test first needs it (about a second) and stopped, by pid, when
// its suite ends. Each test has its own run id, so the jobs never meet; a
// failed start leaves ready() false and error() saying why (the test skips).
class SharedEtcd {
  public:
    static ddprun::EtcdCluster& get() {
        if (!s_cluster) s_cluster = std::make_unique<ddprun::EtcdCluster>(1);
        return *s_cluster;
    }
    static void stop() { s_cluster.reset(); }
    // Its members' pids while it runs: every test of the process (c10d ones
    // too) takes them as services, never as leftovers of its job.
    static std::vector<pid_t> pids() {
        std::vector<pid_t> all;
        for (int member = 0; s_cluster && member < s_cluster->size(); ++member)
            all.push_back(s_cluster->pid(member));
        return all;
    }

  private:
    static inline std::unique_ptr<ddprun::EtcdCluster> s_cluster;
};

// An integration test whose agents meet over either backend: etcd() says which.
class BackendTest : public IntegrationTest {
  protected:
    // Whether the agents meet over etcd (the test process's shared one) instead
    // of a c10d store that node 0's agent hosts on m_port.
    virtual bool etcd() const { return false; }

    void SetUp() override {
        IntegrationTest::SetUp();
        if (etcd() && !SharedEtcd::get().ready()) GTEST_SKIP() << SharedEtcd::get().error();
        for (pid_t member : SharedEtcd::pids()) add_service(member);
    }
    static void TearDownTestSuite() { SharedEtcd::stop(); }
};

// --rdzv_backend and --rdzv_endpoint of a job: over etcd the shared one's
// members, over c10d the store node 0's agent hosts on `c10d_port`.
inline std::vector<std::string> rendezvous_flags(bool etcd, int c10d_port) {
    if (etcd) return {"--rdzv_backend=etcd", "--rdzv_endpoint=" + SharedEtcd::get().endpoints()};
    return {fmt::format("--rdzv_endpoint=127.0.0.1:{}", c10d_port)};
}

// A test's parameter when it has cases of its own: one case over one backend.
template <class Case>
struct OnBackend {
    Case c;
    std::string backend;
};

// Every case over each of `backends`.
template <class Case>
std::vector<OnBackend<Case>> on_backends(const std::vector<Case>& cases,
                                         const std::vector<std::string>& backends = k_backends) {
    std::vector<OnBackend<Case>> all;
    for (const auto& c : cases)
        for (const auto& backend : backends) all.push_back({c, backend});
    return all;
}

template <class Case>
void PrintTo(const OnBackend<Case>& param, std::ostream* os) {
    *os << param.c.name << " over " << param.backend;
}

template <class Case>
std::string case_and_backend(const ::testing::TestParamInfo<OnBackend<Case>>& info) {
    return info.param.c.name + "_" + info.param.backend;
}

inline std::string backend_name(const ::testing::TestParamInfo<std::string>& info) {
    return info.param;
}

}  // namespace ddprun_it
