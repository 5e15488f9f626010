// --metrics-port's parts: the Prometheus text of a snapshot, each rank's beat rate,
// and the HTTP server on a real socket (its answers, its bounds, garbage). The whole
// job's endpoint, promtool and a real Prometheus are in tests/integration/test_metrics.cpp.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddprun/hang/hang_monitor.hpp"
#include "ddprun/metrics/metrics.hpp"
#include "ddprun/metrics/metrics_server.hpp"
#include "support/text_lines.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;

bool has_line(const std::string& text, const std::string& line) {
    for (const auto& l : lines_of(text))
        if (l == line) return true;
    return false;
}

AgentSnapshot running_snapshot() {
    AgentSnapshot s;
    s.run_id = "job\"1\\\n";
    s.host = "gpu01";
    s.node_rank = 1;
    s.state = JobState::Running;
    s.round = 2;
    s.restarts = 2;
    s.workers = 4;
    s.workers_alive = 3;
    s.worker_exits = {{"failure", 1}, {"stopped", 7}};
    s.ranks = {{4, 10, 0.25, 2.5}, {5, 1, 3.0, std::nullopt}};
    s.rendezvous_seconds = 0.125;
    s.store_requests = 1234;
    s.store_errors = 2;
    return s;
}

TEST(PrometheusText, EveryFamilyHasItsHelpAndTypeAndEverySampleItsFamily) {
    const std::string text = prometheus_text(running_snapshot());
    std::string family;
    int families = 0;
    for (const auto& line : lines_of(text)) {
        if (line.starts_with("# HELP ")) {
            family = line.substr(7, line.find(' ', 7) - 7);
            ++families;
            continue;
        }
        if (line.starts_with("# TYPE ")) {
            EXPECT_EQ(line.substr(7, family.size()), family) << line;
            continue;
        }
        EXPECT_TRUE(line.starts_with(family + " ") || line.starts_with(family + "{"))
            << line << " outside its family " << family;
        EXPECT_TRUE(line.starts_with("ddprun_")) << line;
    }
    EXPECT_GE(families, 12);
    EXPECT_TRUE(text.ends_with("\n"));
}

TEST(PrometheusText, SaysWhatTheAgentKnows) {
    const std::string text = prometheus_text(running_snapshot());
    for (const char* line : {
             R"(ddprun_agent_info{run_id="job\"1\\\n",node_rank="1",host="gpu01"} 1)",
             R"(ddprun_job_state{state="connecting"} 0)",
             R"(ddprun_job_state{state="running"} 1)",
             R"(ddprun_job_state{state="between_rounds"} 0)",
             "ddprun_healthy 1",
             "ddprun_round 2",
             "ddprun_restarts_total 2",
             "ddprun_workers 4",
             "ddprun_workers_alive 3",
             R"(ddprun_worker_exits_total{cause="success"} 0)",
             R"(ddprun_worker_exits_total{cause="failure"} 1)",
             R"(ddprun_worker_exits_total{cause="stopped"} 7)",
             R"(ddprun_rank_beats_total{rank="4"} 10)",
             R"(ddprun_rank_last_beat_age_seconds{rank="5"} 3)",
             R"(ddprun_rank_beats_per_second{rank="4"} 2.5)",
             "ddprun_rendezvous_seconds 0.125",
             "ddprun_store_requests_total 1234",
             "ddprun_store_errors_total 2",
         }) {
        EXPECT_TRUE(has_line(text, line)) << "missing: " << line << "\n" << text;
    }
    // A rank without a rate yet has none; a barrier not yet entered has no family.
    EXPECT_EQ(text.find(R"(ddprun_rank_beats_per_second{rank="5"})"), std::string::npos);
    EXPECT_EQ(text.find("ddprun_exit_barrier_seconds"), std::string::npos);
}

TEST(PrometheusText, NoBeatingRanksNoRankFamilies) {
    AgentSnapshot s;
    s.healthy = false;
    const std::string text = prometheus_text(s);
    EXPECT_EQ(text.find("ddprun_rank_"), std::string::npos) << text;
    // A single node has no store.
    EXPECT_EQ(text.find("ddprun_store_"), std::string::npos) << text;
    EXPECT_TRUE(has_line(text, "ddprun_healthy 0"));
    EXPECT_TRUE(has_line(text, R"(ddprun_job_state{state="connecting"} 1)"));
}

TEST(HangMonitorRates, BeatsPerSecondOverTheWindowOnceASecondHasPassed) {
    const auto t0 = HangMonitor::Clock::now();
    HangMonitor monitor(HangLimits{10s, std::nullopt}, {0, 1, 2}, t0);
    for (int i = 0; i < 40; ++i) monitor.beat(0, t0 + i * 500ms, "step");  // 2 per second
    monitor.beat(1, t0 + 19500ms, "step");
    auto rates = monitor.rates(t0 + 20s);
    ASSERT_EQ(rates.size(), 3u);
    EXPECT_EQ(rates[0].beats, 40);
    ASSERT_TRUE(rates[0].beats_per_second);
    EXPECT_NEAR(*rates[0].beats_per_second, 2.0, 0.06);
    EXPECT_EQ(rates[0].since_beat, 500ms);
    EXPECT_FALSE(rates[1].beats_per_second) << "its first beat half a second ago: no rate yet";
    EXPECT_EQ(rates[2].beats, 0);
    EXPECT_FALSE(rates[2].beats_per_second);
    // A rank that stops beating slows down to nothing over the window.
    rates = monitor.rates(t0 + 80s);
    ASSERT_TRUE(rates[0].beats_per_second);
    EXPECT_EQ(*rates[0].beats_per_second, 0.0);
}

// --- the server, on a real socket ---------------------------------------------------

class MetricsServerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        auto started = MetricsServer::start(m_io, "127.0.0.1", 0, [this] { return m_snapshot; });
        ASSERT_TRUE(started) << started.error().message;
        m_server = std::move(*started);
        m_snapshot = running_snapshot();
        m_thread = std::thread([this] {
            auto guard = boost::asio::make_work_guard(m_io);
            m_io.run();
        });
    }
    void TearDown() override {
        boost::asio::post(m_io, [this] {
            m_server.reset();
            m_io.stop();
        });
        if (m_thread.joinable()) m_thread.join();
    }

    int connect_to_server() const {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        address.sin_port = htons(static_cast<std::uint16_t>(m_port()));
        if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
            ::close(fd);
            return -1;
        }
        return fd;
    }

    // Sends `request` on a new connection and reads the answer until the server closes.
    std::string ask(const std::string& request) const {
        int fd = connect_to_server();
        if (fd < 0) return "connect failed";
        (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        std::string answer;
        char buffer[4096];
        for (;;) {
            pollfd pfd{fd, POLLIN, 0};
            if (::poll(&pfd, 1, 10'000) != 1) break;  // hang guard
            ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) break;
            answer.append(buffer, static_cast<std::size_t>(n));
        }
        ::close(fd);
        return answer;
    }

    int m_port() const { return m_server->port(); }

    boost::asio::io_context m_io;
    std::unique_ptr<MetricsServer> m_server;
    AgentSnapshot m_snapshot;
    std::thread m_thread;
};

TEST_F(MetricsServerTest, ServesTheMetricsAndTheHealth) {
    auto metrics = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(metrics.starts_with("HTTP/1.1 200 OK\r\n")) << metrics;
    EXPECT_NE(metrics.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
    EXPECT_NE(metrics.find("\r\n\r\n" + prometheus_text(running_snapshot())), std::string::npos)
        << metrics;
    auto health = ask("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(health.starts_with("HTTP/1.1 200 OK\r\n")) << health;
    EXPECT_TRUE(health.ends_with("\r\n\r\nok\n")) << health;
}

TEST_F(MetricsServerTest, AnUnhealthyAgentIs503WithWhy) {
    std::promise<void> changed;
    boost::asio::post(m_io, [&] {
        m_snapshot.healthy = false;
        m_snapshot.unhealthy_why = "rank 3 failed; the round stops";
        changed.set_value();
    });
    changed.get_future().wait();
    auto health = ask("GET /healthz HTTP/1.0\r\n\r\n");
    EXPECT_TRUE(health.starts_with("HTTP/1.1 503 Service Unavailable\r\n")) << health;
    EXPECT_TRUE(health.ends_with("unhealthy: rank 3 failed; the round stops\n")) << health;
}

TEST_F(MetricsServerTest, AnythingElseIsRefusedWithItsStatusAndNothingElse) {
    struct Case {
        std::string request;
        std::string status;
    };
    const std::vector<Case> cases = {
        {"GET /other HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found\r\n"},
        {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
         "HTTP/1.1 405 Method Not Allowed\r\n"},
        {"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "HTTP/1.1 400 Bad Request\r\n"},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n",
         "HTTP/1.1 400 Bad Request\r\n"},
        {"GET /metrics HTTP/1.1\r\nX: " + std::string(10'000, 'a') + "\r\n\r\n",
         "HTTP/1.1 400 Bad Request\r\n"},
    };
    for (const auto& c : cases) {
        auto answer = ask(c.request);
        EXPECT_TRUE(answer.starts_with(c.status)) << c.request.substr(0, 40) << " -> " << answer;
        EXPECT_EQ(answer.find("ddprun_"), std::string::npos) << answer;
    }
}

// More connections than it keeps open: the excess is closed at once, those open are
// bounded by the request time, and a scrape gets through again once they are gone.
TEST_F(MetricsServerTest, ConnectionsAreBoundedAndTheServerRecovers) {
    std::vector<int> idle;
    for (int i = 0; i < 300; ++i) {
        int fd = connect_to_server();
        ASSERT_GE(fd, 0);
        idle.push_back(fd);
    }
    // The server keeps at most k_max_connections of them: the rest see their end at once.
    int closed = 0;
    for (int fd : idle) {
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, 2000) == 1) ++closed;
    }
    EXPECT_GE(closed, 300 - static_cast<int>(MetricsServer::k_max_connections));
    for (int fd : idle) ::close(fd);
    // Once they are gone, a scrape is answered.
    std::string answer;
    for (int attempt = 0; attempt < 100 && !answer.starts_with("HTTP/1.1 200"); ++attempt) {
        answer = ask("GET /healthz HTTP/1.1\r\n\r\n");
        if (!answer.starts_with("HTTP/1.1 200")) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer;
}

TEST(MetricsServerStart, APortInUseIsOneLineNamingIt) {
    boost::asio::io_context io;
    auto first = MetricsServer::start(io, "127.0.0.1", 0, [] { return AgentSnapshot{}; });
    ASSERT_TRUE(first);
    const int port = (*first)->port();
    auto second = MetricsServer::start(io, "127.0.0.1", port, [] { return AgentSnapshot{}; });
    ASSERT_FALSE(second);
    EXPECT_EQ(second.error().exit_code, 2);
    EXPECT_NE(second.error().message.find(fmt::format("127.0.0.1:{}", port)), std::string::npos)
        << second.error().message;
    EXPECT_NE(second.error().message.find("pick a free port"), std::string::npos);
    auto named = MetricsServer::start(io, "localhost", 0, [] { return AgentSnapshot{}; });
    EXPECT_TRUE(named) << named.error().message;
    auto bad = MetricsServer::start(io, "no-such-host.invalid", 0, [] { return AgentSnapshot{}; });
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("'no-such-host.invalid' does not resolve"),
              std::string::npos)
        << bad.error().message;
}

}  // namespace
}  // namespace ddprun
