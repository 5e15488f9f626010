// --metrics-port with the real tools (docs/metrics.md): curl for /healthz through a
// job's phases, promtool on /metrics, a real Prometheus the test starts on loopback
// scraping two agents, and bad clients (garbage, 10,000 connections at once) that
// leave the job untouched.
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "multi_node.hpp"

namespace ddprun_it {
namespace {

const std::string k_promtool = "/usr/bin/promtool";
const std::string k_prometheus = "/usr/bin/prometheus";

class Metrics : public MultiNodeTest {
  protected:
    void SetUp() override {
        MultiNodeTest::SetUp();
        for (const auto& tool : {k_curl, k_promtool, k_prometheus})
            if (!std::filesystem::exists(tool))
                GTEST_SKIP() << tool << " is not installed (scripts/install-deps.sh installs it)";
    }
};

// One node, two workers that beat: /healthz is 200 while the job runs and 503 once it
// stops because rank 1 failed (rank 0 holds the stop open: it traps SIGTERM and waits
// for the test);
// /metrics says so too, and promtool accepts it.
TEST_F(Metrics, HealthAndMetricsThroughAJobsPhases) {
    const std::string go = path("go");
    const std::string release = path("release");
    auto agent = start({"--nproc_per_node=2", "--metrics-port=0", "--hang-timeout=60",
                        "--shutdown_timeout=300", k_fake_worker, "trap", "SIGTERM", "ready",
                        path("ready.{rank}"), "beat-background", "20", "wait-file", go, "if-rank",
                        "1", "exit", "3", "wait-file", release});
    const int port = announced_metrics_port(*agent);
    ASSERT_GT(port, 0) << agent->err_so_far();
    ASSERT_TRUE(wait_for_file(path("ready.0"), 30s) && wait_for_file(path("ready.1"), 30s))
        << agent->err_so_far();

    auto health = http_get("127.0.0.1", port, "/healthz");
    EXPECT_EQ(health.status, 200) << health.body;
    EXPECT_EQ(health.body, "ok\n");
    HttpAnswer metrics;
    ASSERT_TRUE(wait_for_metrics(
        "127.0.0.1", port,
        [](const std::string& body) {
            return contains(body, "ddprun_rank_beats_per_second{rank=\"1\"}");
        },
        metrics, 20s))
        << metrics.body;
    EXPECT_EQ(metrics.status, 200);
    for (const char* sample : {R"(ddprun_job_state{state="running"} 1)", "ddprun_healthy 1",
                               "ddprun_workers 2", "ddprun_workers_alive 2", "ddprun_round 0"})
        EXPECT_TRUE(has_sample(metrics.body, sample)) << sample << "\n" << metrics.body;
    write_text_file(path("metrics.txt"), metrics.body);
    RunOptions sh;
    sh.program = "/bin/sh";
    auto check =
        run_command({"/bin/sh", "-c", k_promtool + " check metrics < " + path("metrics.txt")}, sh);
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err << metrics.body;

    write_text_file(go, "");
    ASSERT_TRUE(
        wait_until([&] { return http_get("127.0.0.1", port, "/healthz").status == 503; }, 20s))
        << agent->err_so_far();
    health = http_get("127.0.0.1", port, "/healthz");
    EXPECT_EQ(health.body, "unhealthy: rank 1 failed; the round stops\n");
    metrics = http_get("127.0.0.1", port, "/metrics");
    for (const char* sample :
         {R"(ddprun_job_state{state="stopping"} 1)", "ddprun_healthy 0", "ddprun_workers_alive 1",
          R"(ddprun_worker_exits_total{cause="failure"} 1)"})
        EXPECT_TRUE(has_sample(metrics.body, sample)) << sample << "\n" << metrics.body;

    write_text_file(release, "");
    auto r = agent->wait();
    EXPECT_EQ(r.exit_code, 3) << r.describe();
}

// Garbage and 10,000 connections at once: each bad request gets a 400 and nothing
// else, the flood is shed, the workers run on untouched and the endpoint answers
// again once it is over.
TEST_F(Metrics, BadClientsAndTenThousandConnectionsLeaveTheJobAlone) {
    rlimit files{};
    ::getrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_max < 10'300) GTEST_SKIP() << "RLIMIT_NOFILE's hard limit is below 10,300";
    const rlimit saved = files;
    files.rlim_cur = std::max<rlim_t>(files.rlim_cur, 10'300);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
    const std::string go = path("go");
    auto agent = start({"--nproc_per_node=2", "--metrics-port=0", k_fake_worker, "ready",
                        path("ready.{rank}"), "wait-file", go, "print", "3"});
    const int port = announced_metrics_port(*agent);
    ASSERT_GT(port, 0) << agent->err_so_far();
    ASSERT_TRUE(wait_for_file(path("ready.0"), 30s) && wait_for_file(path("ready.1"), 30s));

    RunOptions sh;
    sh.program = "/bin/sh";
    auto garbage = run_command(
        {"/bin/sh", "-c",
         fmt::format("printf 'GARBAGE\\r\\n\\r\\n' | {} -s -i telnet://127.0.0.1:{} --max-time 5",
                     k_curl, port)},
        sh);
    EXPECT_TRUE(garbage.out.starts_with("HTTP/1.1 400 Bad Request")) << garbage.out;
    EXPECT_FALSE(contains(garbage.out, "ddprun_")) << garbage.out;

    std::vector<int> flood;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    for (int i = 0; i < 10'000; ++i) {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0) << std::strerror(errno);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
            ::close(fd);  // the backlog is full for a moment: the kernel refuses
            continue;
        }
        flood.push_back(fd);
    }
    EXPECT_GT(flood.size(), 9'000u);
    EXPECT_TRUE(agent->running()) << agent->err_so_far();
    for (int fd : flood) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved);
    EXPECT_TRUE(
        wait_until([&] { return http_get("127.0.0.1", port, "/healthz").status == 200; }, 20s));

    write_text_file(go, "");
    auto r = agent->wait();
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    auto out = lines_by_rank(r.out);
    for (int rank : {0, 1}) EXPECT_EQ(out[rank].size(), 3u) << r.describe();
}

// A port it cannot have: one line naming it and what to do, exit 2, no worker started.
TEST_F(Metrics, APortInUseIsOneLineAndExit2BeforeAnythingStarts) {
    const int port = free_port();
    int taken = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(taken, 4), 0);
    auto r = run({"--local_addr=127.0.0.1", fmt::format("--metrics-port={}", port), k_fake_worker,
                  "print", "1"});
    ::close(taken);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_EQ(r.out, "") << r.describe();
    auto lines = own_lines_with(
        r.err, {"--metrics-port", fmt::format("127.0.0.1:{}", port), "pick a free port"});
    EXPECT_EQ(lines.size(), 1u) << r.describe();
}

// Two agents on 127.0.0.1 and 127.0.0.2, one port (each on its --local_addr), and a
// real Prometheus scraping both: its query API returns a ddprun series for each.
TEST_F(Metrics, ARealPrometheusScrapesTwoAgents) {
    const int metrics_port = free_port();
    const std::string go = path("go");
    Job job;
    job.flags = {fmt::format("--metrics-port={}", metrics_port)};
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    for (int node = 0; node < 2; ++node)
        agents.push_back(
            start_node(job, {node,
                             fmt::format("127.0.0.{}", node + 1),
                             {},
                             {},
                             {"ready", path("ready.{rank}"), "wait-file", go, "print", "1"}}));
    for (int rank = 0; rank < 4; ++rank)
        ASSERT_TRUE(wait_for_file(path(fmt::format("ready.{}", rank)), 30s))
            << agents[0]->err_so_far() << agents[1]->err_so_far();

    const int web_port = free_port();
    write_text_file(path("prometheus.yml"),
                    fmt::format("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                "scrape_configs:\n  - job_name: ddprun\n    static_configs:\n"
                                "      - targets: ['127.0.0.1:{0}', '127.0.0.2:{0}']\n",
                                metrics_port));
    RunOptions options;
    options.program = k_prometheus;
    options.timeout = 60s;
    auto prometheus =
        start({"--config.file=" + path("prometheus.yml"), "--storage.tsdb.path=" + path("tsdb"),
               fmt::format("--web.listen-address=127.0.0.1:{}", web_port)},
              options);
    add_service(prometheus->pid());
    nlohmann::json result;
    const bool scraped = wait_until(
        [&] {
            auto answer =
                http_get("127.0.0.1", web_port, "/api/v1/query?query=ddprun_workers_alive");
            if (answer.status != 200) return false;
            auto json = nlohmann::json::parse(answer.body, nullptr, false);
            if (json.is_discarded()) return false;
            result = json["data"]["result"];
            return result.is_array() && result.size() == 2;
        },
        40s);
    prometheus->send_signal(SIGTERM);
    prometheus->wait();
    ASSERT_TRUE(scraped) << result.dump() << "\n" << prometheus->err_so_far();
    std::set<std::string> instances;
    for (const auto& series : result) {
        EXPECT_EQ(series["value"][1], "2") << series.dump();
        instances.insert(series["metric"]["instance"].get<std::string>());
    }
    EXPECT_EQ(instances, (std::set<std::string>{fmt::format("127.0.0.1:{}", metrics_port),
                                                fmt::format("127.0.0.2:{}", metrics_port)}));
    // A multi-node agent counts its calls on the store; a healthy job's never failed.
    for (const std::string host : {"127.0.0.1", "127.0.0.2"}) {
        const std::string text = http_get(host, metrics_port, "/metrics").body;
        std::smatch requests;
        ASSERT_TRUE(std::regex_search(text, requests,
                                      std::regex(R"(\nddprun_store_requests_total (\d+)\n)")))
            << text;
        EXPECT_GT(std::stoll(requests[1]), 0) << text;
        EXPECT_TRUE(has_sample(text, "ddprun_store_errors_total 0")) << text;
    }
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << describe_all(r);
}

}  // namespace
}  // namespace ddprun_it
