// What moved out of ddprun's start-up with the OpenSSL plugin
// (openssl_plugin.hpp): base64 and the secret's random bytes done without
// OpenSSL, libcrypto loaded only by the first signed record or etcd client,
// and a plugin that cannot be loaded said in one line.
#include "ddprun/store/openssl_plugin.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ddprun/base/error.hpp"
#include "ddprun/fanout/job_secret.hpp"
#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/signed_store.hpp"
#include "support/free_port.hpp"
#include "support/memory_store.hpp"
#include "support/self_process.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

TEST(EtcdBase64, Rfc4648TestVectors) {
    const std::pair<std::string, std::string> vectors[] = {{"", ""},
                                                           {"f", "Zg=="},
                                                           {"fo", "Zm8="},
                                                           {"foo", "Zm9v"},
                                                           {"foob", "Zm9vYg=="},
                                                           {"fooba", "Zm9vYmE="},
                                                           {"foobar", "Zm9vYmFy"}};
    for (const auto& [raw, text] : vectors) {
        EXPECT_EQ(etcd_base64(raw), text) << raw;
        EXPECT_EQ(etcd_unbase64(text), raw) << text;
    }
}

TEST(EtcdBase64, RoundTripsEveryByte) {
    std::string all;
    for (int byte = 0; byte < 256; ++byte) all += static_cast<char>(byte);
    for (std::size_t length = 0; length <= all.size(); length += 37) {
        const std::string raw = all.substr(all.size() - length);
        EXPECT_EQ(etcd_unbase64(etcd_base64(raw)), raw) << length;
    }
    EXPECT_EQ(etcd_base64("\xff\xfe\xfd"), "//79");
}

TEST(EtcdBase64, RefusesWhatEtcdNeverSends) {
    for (const std::string text : {"Zg=", "Zg", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg=", "Zm 9"}) {
        try {
            etcd_unbase64(text);
            ADD_FAILURE() << "took '" << text << "'";
        } catch (const StoreError& error) {
            EXPECT_EQ(std::string(error.what()), "etcd sent a value that is not base64") << text;
        }
    }
}

TEST(JobSecretRandom, ThirtyTwoBytesNeverTheSameTwice) {
    std::set<std::string> seen;
    for (int i = 0; i < 100; ++i) {
        std::string secret = make_secret();
        EXPECT_EQ(secret.size(), k_min_secret_bytes);
        seen.insert(secret);
    }
    EXPECT_EQ(seen.size(), 100u);
}

// --- loading, in a fresh process ---------------------------------------------------

TEST(OpenSslPlugin, LibcryptoIsLoadedOnlyBySigning) {
    auto [status, output] = run_self("OpenSslPluginChild.LoadedOnlyBySigning", "");
    EXPECT_EQ(status, 0) << output;
    EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

TEST(OpenSslPluginChild, LoadedOnlyBySigning) {
    if (!in_child()) GTEST_SKIP() << "runs in a child process";
    EXPECT_FALSE(library_loaded("libcrypto")) << "libcrypto was loaded at start-up";
    // Work that never needs it: unsigned records, base64, a secret's bytes.
    auto plain = sign_store(make_memory_store(1s), "");
    plain->set("k", "v");
    EXPECT_EQ(plain->get("k"), "v");
    EXPECT_EQ(etcd_unbase64(etcd_base64("x")), "x");
    make_secret();
    EXPECT_FALSE(library_loaded("libcrypto")) << "loaded without a signed record";
    EXPECT_FALSE(library_loaded(k_openssl_plugin_name));
    auto guarded = sign_store(make_memory_store(1s), std::string(32, 's'));
    EXPECT_TRUE(library_loaded(k_openssl_plugin_name));
    EXPECT_TRUE(library_loaded("libcrypto"));
    guarded->set("k", "v");
    EXPECT_EQ(guarded->get("k"), "v");
}

TEST(OpenSslPlugin, MissingPluginIsOneLineAtTheJoin) {
    auto [status, output] = run_self("OpenSslPluginChild.Missing",
                                     "DDPRUN_OPENSSL_PLUGIN=/nonexistent/libddprun_openssl.so");
    EXPECT_EQ(status, 0) << output;
    EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

TEST(OpenSslPluginChild, Missing) {
    if (!in_child()) GTEST_SKIP() << "runs in a child process";
    const std::string expected =
        "cannot load /nonexistent/libddprun_openssl.so: /nonexistent/libddprun_openssl.so: "
        "cannot open shared object file: No such file or directory: it comes with ddprun (etcd "
        "jobs and job secrets need it): rebuild or reinstall ddprun, or name it with "
        "DDPRUN_OPENSSL_PLUGIN=PATH";
    for (int attempt = 0; attempt < 2; ++attempt) {  // the second from what was kept
        try {
            sign_store(make_memory_store(1s), std::string(32, 's'));
            ADD_FAILURE() << "a signed store without the plugin";
        } catch (const StoreError& error) {
            EXPECT_EQ(error.kind(), StoreError::Kind::Other);
            EXPECT_EQ(std::string(error.what()), expected);
        }
    }
    try {
        EtcdClient client(EtcdOptions{.endpoints = {{"127.0.0.1", 2379}}});
        ADD_FAILURE() << "an etcd client without the plugin";
    } catch (const StoreError& error) {
        EXPECT_EQ(std::string(error.what()), expected);
    }
}

TEST(OpenSslPlugin, FoundBesideTheBinaryFirst) {
    auto location = locate_openssl_plugin();
    // A test binary has none beside it: it falls back to its RUNPATH (the build tree).
    EXPECT_TRUE(location.path.empty()) << location.path;
    ASSERT_FALSE(location.searched.empty());
    EXPECT_EQ(location.searched[0], own_path().parent_path().string());
    EXPECT_NO_THROW(openssl_plugin());
}

// A plain http client whose member hangs up without an answer: before the job has reached
// etcd, that is an etcd serving https (one line saying so, at once); once it has, it is
// a member going down or starting (etcd killed mid-call and restarted, as in
// ElasticEtcdTest.AnEtcdOutOfReachForLessThanTheHeartbeatTimeoutLosesNoNode, whose
// agents would end 75 with the https hint), an outage the agent rides out.
TEST(EtcdTransport, AHangUpIsTheHttpsHintOnlyBeforeEtcdWasReached) {
    const auto [listener, port] = listen_on_loopback(16);
    ASSERT_GE(listener, 0);
    std::atomic<bool> done = false;
    std::thread member([&] {  // reads a request's first bytes, then hangs up
        while (!done) {
            pollfd pfd{listener, POLLIN, 0};
            if (::poll(&pfd, 1, 20) != 1) continue;
            int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
            char buffer[64];
            pollfd request{fd, POLLIN, 0};
            if (::poll(&request, 1, 1000) == 1) (void)::recv(fd, buffer, sizeof buffer, 0);
            ::close(fd);
        }
    });
    for (bool reached : {false, true}) {
        SCOPED_TRACE(reached ? "etcd reached before" : "etcd never reached");
        EtcdOptions options{.endpoints = {{"127.0.0.1", port}}, .timeout = 500ms};
        options.reached->store(reached);
        EtcdClient client(options);
        try {
            client.call("/v3/kv/range", {{"key", "a2V5"}});
            ADD_FAILURE() << "an answer from a member that hangs up";
        } catch (const StoreError& error) {
            const std::string message = error.what();
            EXPECT_EQ(error.kind(),
                      reached ? StoreError::Kind::Connection : StoreError::Kind::Other)
                << message;
            EXPECT_EQ(message.find("if it serves https") != std::string::npos, !reached) << message;
        }
    }
    done = true;
    member.join();
    ::close(listener);
}

}  // namespace
}  // namespace ddprun
