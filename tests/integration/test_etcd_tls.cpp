// The etcd backend reaching a secured etcd: TLS (--rdzv_conf protocol=https,
// ca_cert, and ssl_cert/ssl_cert_key for mutual TLS) and etcd's user/password
// authentication (user, password_file). Real etcd members that the test
// starts (tests/support/etcd_server.hpp) with a throwaway CA made by the
// harness; two agents on 127.0.0.1 and 127.0.0.2 meet through them. Every way
// a secured etcd refuses an agent is one line and exit 75; every bad option
// is one line and exit 2; nothing is left running either way.

#include <signal.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddprun/store/etcd_client.hpp"
#include "harness.hpp"
#include "multi_node.hpp"
#include "support/etcd_server.hpp"

namespace ddprun_it {
namespace {

using ddprun::EtcdCluster;

class EtcdTlsTest : public MultiNodeTest {
  protected:
    static void SetUpTestSuite() {
        // Mutual TLS: etcd wants a client certificate of its CA.
        s_mutual = std::make_unique<EtcdCluster>(
            1, ddprun::EtcdSecurity{.tls = true, .client_cert_auth = true});
        // Server-verified TLS and users; a token is forgotten after 2 s unused
        // (AClientRenewsAForgottenToken).
        s_users = std::make_unique<EtcdCluster>(
            1, ddprun::EtcdSecurity{.tls = true, .auth = true, .auth_token_ttl = 2});
        // Both: mutual TLS and users.
        s_both = std::make_unique<EtcdCluster>(
            1, ddprun::EtcdSecurity{.tls = true, .client_cert_auth = true, .auth = true});
        // Plain http, for https against an etcd that does not serve it.
        s_plain = std::make_unique<EtcdCluster>(1);
    }
    static void TearDownTestSuite() {
        s_mutual.reset();
        s_users.reset();
        s_both.reset();
        s_plain.reset();
    }

    void SetUp() override {
        MultiNodeTest::SetUp();
        const EtcdCluster* clusters[] = {s_mutual.get(), s_users.get(), s_both.get(),
                                         s_plain.get()};
        for (const auto* etcd : clusters)
            for (int member = 0; member < etcd->size(); ++member) add_service(etcd->pid(member));
        for (const auto* etcd : clusters)
            if (!etcd->ready()) GTEST_SKIP() << etcd->error();
    }

    static Job job_on(const EtcdCluster& etcd, std::map<std::string, std::string> conf) {
        Job job;
        job.flags = {"--rdzv_backend=etcd", "--rdzv_endpoint=" + etcd.endpoints()};
        job.conf.insert(conf.begin(), conf.end());
        return job;
    }
    static std::map<std::string, std::string> mutual_tls() {
        return {{"protocol", "https"},
                {"ca_cert", s_mutual->ca_cert()},
                {"ssl_cert", s_mutual->client_cert()},
                {"ssl_cert_key", s_mutual->client_key()}};
    }
    static std::map<std::string, std::string> as_user(const std::string& password_file) {
        return {{"protocol", "https"},
                {"ca_cert", s_users->ca_cert()},
                {"user", EtcdCluster::k_user},
                {"password_file", password_file}};
    }
    static std::map<std::string, std::string> mutual_tls_as_user() {
        return {{"protocol", "https"},
                {"ca_cert", s_both->ca_cert()},
                {"ssl_cert", s_both->client_cert()},
                {"ssl_cert_key", s_both->client_key()},
                {"user", EtcdCluster::k_user},
                {"password_file", s_both->password_file()}};
    }

    // Runs one agent of a two-node job that must be refused: `exit_code`, one
    // line of ddprun's own that says `says`, no worker started.
    void expect_refused(const std::string& name, const std::vector<std::string>& flags,
                        int exit_code, const std::string& says) {
        std::vector<std::string> args = {"--nnodes=2", "--nproc_per_node=1",
                                         "--rdzv_id=" + m_run_id, "--local_addr=127.0.0.1"};
        args.insert(args.end(), flags.begin(), flags.end());
        args.insert(args.end(), {k_fake_worker, "exit", "0"});
        auto r = run(args);
        EXPECT_EQ(r.exit_code, exit_code) << name << "\n" << r.describe();
        EXPECT_EQ(own_lines_with(r.err, {says}).size(), 1u) << name << "\n" << r.describe();
        EXPECT_TRUE(recorded_pids().empty()) << name << ": a worker started";
    }

    static std::string conf_flag(const std::map<std::string, std::string>& conf) {
        std::string text;
        for (const auto& [key, value] : conf) text += (text.empty() ? "" : ",") + key + "=" + value;
        return "--rdzv_conf=" + text;
    }

    static inline std::unique_ptr<EtcdCluster> s_mutual;
    static inline std::unique_ptr<EtcdCluster> s_users;
    static inline std::unique_ptr<EtcdCluster> s_both;
    static inline std::unique_ptr<EtcdCluster> s_plain;
};

std::vector<int> sorted_ranks(const std::vector<RunResult>& results) {
    std::vector<int> ranks;
    for (const auto& result : results)
        for (auto& [rank, env] : env_by_rank(result.out)) ranks.push_back(rank);
    std::sort(ranks.begin(), ranks.end());
    return ranks;
}

TEST_F(EtcdTlsTest, ATwoNodeJobRunsOverMutualTls) {
    Job job = job_on(*s_mutual, mutual_tls());
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"env"}},
                             {.addr = "127.0.0.2", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(sorted_ranks(r), (std::vector<int>{0, 1, 2, 3})) << describe_all(r);
}

// An elastic job's own calls (leases, the leader's election, its queue) over the
// same secured connections.
TEST_F(EtcdTlsTest, AnElasticJobRunsOverMutualTlsAsAnEtcdUser) {
    Job job = job_on(*s_both, mutual_tls_as_user());
    job.min_nnodes = 1;
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"env"}},
                             {.addr = "127.0.0.2", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(sorted_ranks(r), (std::vector<int>{0, 1, 2, 3})) << describe_all(r);
}

TEST_F(EtcdTlsTest, OverTlsAMemberThatIsDownIsSkipped) {
    // The first endpoint has nothing behind it: the handshake happens with the next.
    Job job = job_on(*s_mutual, mutual_tls());
    job.flags = {"--rdzv_backend=etcd", fmt::format("--rdzv_endpoint=127.0.0.1:{},{}", free_port(),
                                                    s_mutual->endpoints())};
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"exit", "0"}},
                             {.addr = "127.0.0.2", .actions = {"exit", "0"}}});
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
}

TEST_F(EtcdTlsTest, ATwoNodeJobRunsAsAnEtcdUser) {
    // TLS that checks etcd's certificate only (no client certificate), and a user.
    Job job = job_on(*s_users, as_user(s_users->password_file()));
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"env"}},
                             {.addr = "127.0.0.2", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(sorted_ranks(r), (std::vector<int>{0, 1, 2, 3})) << describe_all(r);
}

TEST_F(EtcdTlsTest, ATwoNodeJobRunsOverMutualTlsAsAnEtcdUser) {
    Job job = job_on(*s_both, mutual_tls_as_user());
    auto r = run_nodes(job, {{.addr = "127.0.0.1", .actions = {"env"}},
                             {.addr = "127.0.0.2", .actions = {"env"}}});
    ASSERT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
    EXPECT_EQ(sorted_ranks(r), (std::vector<int>{0, 1, 2, 3})) << describe_all(r);
}

TEST_F(EtcdTlsTest, AClientRenewsAForgottenToken) {
    ddprun::EtcdOptions options = s_users->client_options(0, 10s);
    options.tls->cert.clear();
    options.tls->key.clear();
    options.credentials = ddprun::EtcdCredentials{EtcdCluster::k_user, EtcdCluster::k_password};
    ddprun::EtcdClient client(options);
    const nlohmann::json put = {{"key", ddprun::etcd_base64("/ddprun/renew")},
                                {"value", ddprun::etcd_base64("1")}};
    client.call("/v3/kv/put", put);
    const std::string first = options.credentials->token->value;
    ASSERT_FALSE(first.empty());
    std::this_thread::sleep_for(3500ms);  // past --auth-token-ttl=2
    EXPECT_NO_THROW(client.call("/v3/kv/put", put));
    EXPECT_NE(options.credentials->token->value, first) << "a new token";
    // A key outside the user's role: refused, naming the user.
    try {
        client.call("/v3/kv/put", {{"key", ddprun::etcd_base64("/elsewhere")},
                                   {"value", ddprun::etcd_base64("1")}});
        ADD_FAILURE() << "etcd let the user write outside /ddprun/";
    } catch (const ddprun::StoreError& error) {
        EXPECT_TRUE(contains(error.what(), "refused user 'trainer'")) << error.what();
    }
}

TEST_F(EtcdTlsTest, EtcdRefusalsAreOneLineAndTheRendezvousCode) {
    const std::string wrong_password = path("wrong-password");
    write_text_file(wrong_password, "not the password\n");
    auto with = [](std::map<std::string, std::string> conf,
                   const std::map<std::string, std::string>& changes) {
        for (const auto& [key, value] : changes) {
            if (value.empty())
                conf.erase(key);
            else
                conf[key] = value;
        }
        return conf;
    };
    auto etcd_flags = [](const EtcdCluster& etcd, const std::string& host = "127.0.0.1") {
        return "--rdzv_endpoint=" + host + ":" + std::to_string(etcd.client_ports().front());
    };
    struct Case {
        std::string name;
        std::string endpoint;
        std::map<std::string, std::string> conf;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"a CA that did not sign etcd's certificate", etcd_flags(*s_mutual),
         with(mutual_tls(), {{"ca_cert", s_mutual->other_ca()}}),
         "TLS handshake failed: certificate verify failed"},
        {"no client certificate where etcd requires one", etcd_flags(*s_mutual),
         with(mutual_tls(), {{"ssl_cert", ""}, {"ssl_cert_key", ""}}),
         "etcd requires a client certificate: add --rdzv_conf ssl_cert=PATH,ssl_cert_key=PATH"},
        {"a client certificate of a CA that etcd does not trust", etcd_flags(*s_mutual),
         with(mutual_tls(), {{"ssl_cert", s_mutual->other_client_cert()}}),
         "etcd does not accept --rdzv_conf ssl_cert"},
        {"a user whose role does not reach the prefix", etcd_flags(*s_users),
         with(as_user(s_users->password_file()), {{"prefix", "/elsewhere/"}}),
         "refused user 'trainer' (etcdserver: permission denied): grant the user's role"},
        {"a client certificate with a CN, authentication on", etcd_flags(*s_both),
         [&] {
             auto conf = mutual_tls_as_user();
             conf["ssl_cert"] = s_both->named_client_cert();
             return conf;
         }(),
         "refuses a client certificate with a CommonName on its JSON gateway"},
        {"a host name that etcd's certificate does not name", etcd_flags(*s_mutual, "localhost"),
         mutual_tls(), "etcd's certificate does not name this host"},
        {"plain http to an etcd that serves https",
         etcd_flags(*s_mutual),
         {},
         "if it serves https, add --rdzv_conf protocol=https"},
        {"https to an etcd that serves plain http", etcd_flags(*s_plain),
         with(mutual_tls(), {{"ssl_cert", ""}, {"ssl_cert_key", ""}}),
         "if it serves plain http, drop --rdzv_conf protocol=https"},
        {"a wrong password", etcd_flags(*s_users), as_user(wrong_password),
         "etcd refused user 'trainer': authentication failed (check --rdzv_conf user and "
         "password_file)"},
        {"no user where etcd requires one", etcd_flags(*s_users),
         with(as_user(wrong_password), {{"user", ""}, {"password_file", ""}}),
         "requires authentication"},
    };
    for (const auto& c : cases) {
        std::map<std::string, std::string> conf = {{"join_timeout", "20"}, {"read_timeout", "10"}};
        conf.insert(c.conf.begin(), c.conf.end());
        expect_refused(c.name, {"--rdzv_backend=etcd", c.endpoint, conf_flag(conf)},
                       k_rendezvous_exit, c.says);
    }
}

TEST_F(EtcdTlsTest, BadTlsAndUserOptionsAreUsageErrors) {
    const std::string not_pem = path("not-a-certificate.pem");
    write_text_file(not_pem, "hello\n");
    const std::string empty = path("empty-password");
    write_text_file(empty, "\n");
    const std::string etcd = "--rdzv_endpoint=" + s_mutual->endpoints();
    struct Case {
        std::string name;
        std::vector<std::string> flags;
        std::string says;
    };
    const std::vector<Case> cases = {
        {"a password on the command line",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=user=trainer,password=hunter2"},
         "a password is never taken on the command line"},
        {"a ca_cert that is not there",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=protocol=https,ca_cert=/nonexistent/ca.pem"},
         "--rdzv_conf ca_cert=/nonexistent/ca.pem: cannot read it (No such file or directory)"},
        {"a ca_cert that is not a certificate",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=protocol=https,ca_cert=" + not_pem},
         "not a CA certificate in PEM form"},
        {"ssl_cert without ssl_cert_key",
         {"--rdzv_backend=etcd", etcd,
          "--rdzv_conf=protocol=https,ssl_cert=" + s_mutual->client_cert()},
         "ssl_cert needs ssl_cert_key"},
        {"a key that is not the certificate's",
         {"--rdzv_backend=etcd", etcd,
          fmt::format("--rdzv_conf=protocol=https,ssl_cert={},ssl_cert_key={}",
                      s_mutual->client_cert(), s_users->client_key())},
         "is not the private key of ssl_cert="},
        {"a protocol that is neither http nor https",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=protocol=ftp"},
         "protocol must be http or https, not 'ftp'"},
        {"ca_cert without protocol=https",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=ca_cert=" + s_mutual->ca_cert()},
         "ca_cert, ssl_cert and ssl_cert_key need protocol=https"},
        {"user without password_file",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=user=trainer"},
         "user needs password_file"},
        {"a password_file that is not there",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=user=trainer,password_file=/nonexistent/pw"},
         "--rdzv_conf password_file=/nonexistent/pw: cannot read it (No such file or directory)"},
        {"an empty password",
         {"--rdzv_backend=etcd", etcd, "--rdzv_conf=user=trainer,password_file=" + empty},
         "the first line is empty"},
        {"TLS options without the etcd backend",
         {"--rdzv_backend=c10d", "--rdzv_conf=protocol=https,ca_cert=" + s_mutual->ca_cert()},
         "are for the etcd backend"},
        {"a user without the etcd backend",
         {"--rdzv_conf=user=trainer,password_file=" + s_users->password_file()},
         "are for the etcd backend"},
    };
    for (const auto& c : cases) expect_refused(c.name, c.flags, 2, c.says);
    // The password itself is never printed back.
    auto r = run({"--nnodes=2", "--rdzv_backend=etcd", etcd,
                  "--rdzv_conf=user=trainer,password=hunter2", k_fake_worker, "exit", "0"});
    EXPECT_FALSE(contains(r.err, "hunter2")) << r.describe();
}

}  // namespace
}  // namespace ddprun_it
