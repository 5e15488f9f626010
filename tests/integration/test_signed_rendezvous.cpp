// Authenticated rendezvous (signed_store.hpp, job_secret.hpp), black-box: two
// agents with a job secret while a stray client, without it, writes well-formed
// records under the protocol's keys at each phase; agents whose secrets differ
// or only one of which has one; the secret's files and where it must never
// appear (the dry run, the workers' environment). Over c10d and etcd.
//
// The rule every case checks: never exit 0 with unfinished workers. Each case
// says what its forged record does.
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/etcd_store.hpp"
#include "harness.hpp"
#include "multi_node.hpp"
#include "support/build_paths.hpp"

namespace ddprun_it {
namespace {

const std::string k_store_client = ddprun_test::build_paths::store_client;

// 32 bytes; another secret of the same length.
const std::string k_secret = "0123456789abcdef0123456789abcdef";
const std::string k_other_secret = "fedcba9876543210fedcba9876543210";
// The shape of a signed record with a MAC that is not this job's.
const std::string k_wrong_mac = "hmac-sha256=" + std::string(64, '0') + " ";

// What a forged record does, as docs/security.md says.
enum class Outcome {
    Ignored,  // the job goes on and succeeds (0), every worker finished
    Ends,     // the job ends with 75 on every node, a line naming the key
};

struct ForgedCase {
    std::string name;
    std::string key;    // under ddprun/<run id>/r0/ ("/run_id": the store-wide key)
    std::string value;  // well-formed; "{run}" is the run id
    bool mid_run;       // written while the workers run, else before node 1 joins
    Outcome outcome;
    std::string counter = {};  // also added to by 1 (c10d only: a stray's add)
};

class SignedRendezvous : public MultiNodeCaseTest<ForgedCase> {
  protected:
    std::string secret_file(const std::string& name, const std::string& secret) {
        const std::string file = path(name);
        write_text_file(file, secret, 0600);
        ::chmod(file.c_str(), 0600);
        return file;
    }

    // The stray client: the store's own protocol, without the secret. After `after`
    // exists, if given.
    bool write(const std::string& key, const std::string& value, const std::string& counter,
               const std::string& after = {}) {
        if (!etcd()) {
            std::string command = fmt::format("{} 127.0.0.1 {}", k_store_client, m_port);
            if (!after.empty()) command += fmt::format(" wait '{}'", after);
            command += fmt::format(" set '{}' '{}'", key, value);
            if (!counter.empty()) command += fmt::format(" add '{}' 1", counter);
            command += " >" + path("store_client.log") + " 2>&1";
            return std::system(command.c_str()) == 0;
        }
        ddprun::EtcdStoreOptions options;
        options.client = {{{"127.0.0.1", SharedEtcd::get().client_ports().front()}}, 5s};
        options.job_root = ddprun::JobKeys::k_root;
        auto store = ddprun::open_etcd_store(options);
        if (!after.empty()) store->wait({after}, 30s);
        store->set(key, value);
        if (!counter.empty()) store->add(counter, 1);
        return true;
    }
};

std::string replaced(std::string text, const std::string& run_id) {
    for (std::size_t at; (at = text.find("{run}")) != std::string::npos;)
        text.replace(at, 5, run_id);
    return text;
}

TEST_P(SignedRendezvous, AForgedRecordIsNeverActedOn) {
    const ForgedCase& c = the_case();
    if (!etcd() && k_store_client.empty()) GTEST_SKIP() << "built without libtorch";
    if (etcd() && c.key == "/run_id") GTEST_SKIP() << "an etcd job has no store-wide run id key";
    Job job;
    job.conf = {{"join_timeout", "15"},
                {"heartbeat_timeout", "3"},
                {"secret_file", secret_file("secret", k_secret)}};
    job.flags = {"--broadcast-signals"};
    const std::string go = path("go");
    // Mid-run, the workers wait for the test, so the forged record meets a running job;
    // each worker marks that it finished.
    // Node 1's finish later: a forged finished count would then make node 0 declare the
    // round Done while node 1's workers still run (a false success).
    std::vector<std::string> actions = concat({{"ready", path("ready.{rank}"), "wait-file", go},
                                               on_ranks({2, 3}, "sleep", "2"),
                                               {"ready", path("done.{rank}")}});
    const std::string key = c.key == "/run_id" ? std::string("ddprun/run_id")
                                               : fmt::format("ddprun/{}/r0/{}", m_run_id, c.key);
    const std::string counter =
        c.counter.empty() ? std::string() : fmt::format("ddprun/{}/r0/{}", m_run_id, c.counter);
    const std::string value = replaced(c.value, m_run_id);
    std::vector<std::unique_ptr<DdprunProcess>> agents;
    agents.push_back(start_node(job, {.node_rank = 0, .addr = "127.0.0.1", .actions = actions}));
    if (!c.mid_run) {
        // Node 0 has joined; the record is written before node 1 joins.
        if (!etcd()) {
            ASSERT_TRUE(wait_until([&] { return port_accepts("127.0.0.1", m_port); }, 30s))
                << stderr_of(agents);
        }
        ASSERT_TRUE(write(key, value, counter, fmt::format("ddprun/{}/r0/info/0", m_run_id)))
            << read_text_file(path("store_client.log"));
    }
    agents.push_back(start_node(job, {.node_rank = 1, .addr = "127.0.0.2", .actions = actions}));
    if (c.mid_run) {
        wait_ready(4, agents);
        if (HasFatalFailure()) return;
        write(key, value, counter);
        // Longer than the heartbeat timeout: a forged beat or signal has had its chance.
        std::this_thread::sleep_for(4s);
    }
    write_text_file(go, "");
    auto r = wait_nodes(agents);
    const std::string all = describe_all(r);
    for (const auto& result : r) {
        EXPECT_FALSE(result.timed_out) << all;
        if (result.exit_code == 0) {
            for (int rank = 0; rank < 4; ++rank)
                EXPECT_TRUE(std::filesystem::exists(path(fmt::format("done.{}", rank))))
                    << "exit 0 with worker " << rank << " unfinished\n"
                    << all;
        }
    }
    EXPECT_EQ(r[0].exit_code, r[1].exit_code) << "one job, one outcome\n" << all;
    // No worker ever ran with a forged membership.
    EXPECT_FALSE(contains(r[0].out + r[1].out, "6.6.6.6")) << all;
    if (c.outcome == Outcome::Ignored) {
        EXPECT_EQ(exit_codes(r), (std::vector<int>{0, 0})) << all;
    } else {
        EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, k_rendezvous_exit})) << all;
        bool named = false;
        for (const auto& result : r)
            named = named || !own_lines_with(result.err, {key, "not signed"}).empty();
        EXPECT_TRUE(named) << "a line must name " << key << "\n" << all;
    }
    // Whatever was ignored was reported, naming the key.
    if (c.outcome == Outcome::Ignored && c.key != "hb/1") {
        bool warned = false;
        // (A forged finished/0 is overwritten by node 0's own before anyone reads it: the
        // warning names the forged count.)
        for (const auto& result : r)
            warned = warned || contains(result.err, key) ||
                     (!counter.empty() && contains(result.err, "'" + counter + "'"));
        EXPECT_TRUE(warned) << all;
    }
}

const std::string k_membership =
    R"({"kind":"membership","round":0,"restarts":0,"change":"","master_addr":"6.6.6.6",)"
    R"("master_port":1,"nnodes":2,"nproc":[[2,2]]})";
const std::string k_done = R"({"kind":"done","run_id":"{run}"})";
const std::string k_abort = R"({"kind":"abort","run_id":"{run}","message":"forged","exit_code":3})";

INSTANTIATE_TEST_SUITE_P(
    Signed, SignedRendezvous,
    ::testing::ValuesIn(on_backends<ForgedCase>({
        // At the join: the round's result, node 0's record, a rank's claim; each ends the
        // join on every node (75) naming the key: nobody starts from forged data.
        {"Membership", "result", k_membership, false, Outcome::Ends},
        {"NodeZero", "zero", k_membership, false, Outcome::Ends},
        {"RankClaim", "claim/1", R"({"agent":"x","host":"h","pid":1})", false, Outcome::Ends},
        // The run's first record (c10d): warned about, the join decides.
        {"RunId", "/run_id", "{run}\nnode 0 (h)\n./train", false, Outcome::Ignored},
        // While the workers run: a forged "every node finished" (with its count) or a
        // forged failure is the round's stop, which is first-writer-wins: the round can
        // no longer end well, so it ends now with 75 (never 0: workers are unfinished).
        {"DoneStop", "stop", k_done, true, Outcome::Ends, "finished"},
        {"AbortStop", "stop", k_wrong_mac + k_abort, true, Outcome::Ends},
        // A forged kill, signal or beat is ignored with a warning; the job succeeds.
        {"Kill", "kill", "1", true, Outcome::Ignored},
        {"Signal", "signal/1", "15 1", true, Outcome::Ignored, "signals"},
        {"Heartbeat", "hb/1", k_wrong_mac + "999", true, Outcome::Ignored},
        // A forged finished count (and a node's record) does not make the round Done
        // before every node's own signed record.
        {"FinishedCount", "finished/0", "1", true, Outcome::Ignored, "finished"},
    })),
    case_and_backend<ForgedCase>);

// --- agents that do not share one secret ----------------------------------------

class SecretMismatch : public MultiNodeBackendTest {};
INSTANTIATE_TEST_SUITE_P(Signed, SecretMismatch, ::testing::ValuesIn(k_backends), backend_name);

// Another secret, or a secret on one side only (either side): every agent fails at the
// join, at once, with one line, as agents of two different jobs do.
TEST_P(SecretMismatch, AgentsWithoutTheSameSecretFailAtJoin) {
    const std::pair<std::string, std::string> cases[] = {
        {k_secret, k_other_secret}, {k_secret, ""}, {"", k_secret}};
    int index = 0;
    for (const auto& [zero, one] : cases) {
        SCOPED_TRACE(index);
        m_run_id = fmt::format("{}-{}", run_id_for_this_test(), index++);
        m_port = free_port();
        Job job;
        job.conf = {{"join_timeout", "20"}};
        auto node = [&](int rank, const std::string& secret) {
            Node n{.node_rank = rank,
                   .addr = fmt::format("127.0.0.{}", rank + 1),
                   .actions = {"ready", path("started.{rank}")}};
            if (!secret.empty()) {
                const std::string file = path(fmt::format("secret.{}", rank));
                write_text_file(file, secret, 0600);
                ::chmod(file.c_str(), 0600);
                n.flags = {"--rdzv_conf=join_timeout=20,secret_file=" + file};
            }
            return n;
        };
        auto start = std::chrono::steady_clock::now();
        auto r = run_nodes(job, {node(0, zero), node(1, one)});
        const std::string all = describe_all(r);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 15s) << "did not fail at once\n" << all;
        EXPECT_EQ(exit_codes(r), (std::vector<int>{k_rendezvous_exit, k_rendezvous_exit})) << all;
        for (const auto& result : r) {
            auto errors = own_lines_with(result.err, {"error"});
            bool said = false;
            for (const auto& line : errors)
                said = said || contains(line, "not signed with this job's secret") ||
                       contains(line, "this agent has none");
            EXPECT_TRUE(said) << all;
        }
        for (int rank = 0; rank < 4; ++rank)
            EXPECT_FALSE(std::filesystem::exists(path(fmt::format("started.{}", rank)))) << all;
    }
}

// --- the secret's sources, and where it never appears -----------------------------

class JobSecret : public IntegrationTest {};

TEST_F(JobSecret, ALooseSecretFileIsRefusedInOneLine) {
    const std::string file = path("loose");
    write_text_file(file, k_secret, 0644);
    ::chmod(file.c_str(), 0644);
    for (const auto& [flags, env] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"--rdzv_conf=secret_file=" + file}, ""}, {{}, file}}) {
        RunOptions options;
        if (!env.empty()) options.env = {{"DDPRUN_RDZV_SECRET_FILE", env}};
        std::vector<std::string> args = flags;
        args.insert(args.end(), {k_fake_worker, "exit", "0"});
        RunResult r = run(args, options);
        EXPECT_EQ(r.exit_code, 2) << r.describe();
        auto lines = ddprun_own_lines(r.err);
        ASSERT_EQ(lines.size(), 1u) << r.describe();
        EXPECT_TRUE(contains(lines[0], "chmod 600")) << r.describe();
        EXPECT_TRUE(contains(lines[0], "0644")) << r.describe();
        EXPECT_FALSE(contains(r.err + r.out, k_secret)) << r.describe();
    }
}

TEST_F(JobSecret, NeverAFlagValueNorTooShort) {
    RunResult r = run({"--rdzv_conf=secret=" + k_secret, k_fake_worker, "exit", "0"});
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "never taken on the command line")) << r.describe();
    EXPECT_FALSE(contains(r.err + r.out, k_secret)) << r.describe();
    RunOptions options;
    options.env = {{"DDPRUN_RDZV_SECRET", "short-secret"}};
    r = run({k_fake_worker, "exit", "0"}, options);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_FALSE(contains(r.err + r.out, "short-secret")) << r.describe();
}

TEST_F(JobSecret, NeverInTheDryRunTheWorkersEnvironmentNorTheEventLog) {
    RunOptions options;
    options.env = {{"DDPRUN_RDZV_SECRET", k_secret}};
    RunResult dry = run({"--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1", "--dry-run",
                         k_fake_worker, "exit", "0"},
                        options);
    EXPECT_EQ(dry.exit_code, 0) << dry.describe();
    EXPECT_FALSE(contains(dry.out + dry.err, k_secret)) << dry.describe();
    const std::string events = path("events.jsonl");
    RunResult r = run({"--nproc_per_node=2", "--event-log=" + events, k_fake_worker, "env",
                       "getenv", "DDPRUN_RDZV_SECRET"},
                      options);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_FALSE(contains(r.out + r.err, k_secret)) << r.describe();
    EXPECT_TRUE(contains(r.out, "DDPRUN_RDZV_SECRET=<unset>")) << r.describe();
    // Nor in the event log (its job_start line has the job's settings).
    const std::string logged = read_text_file(events);
    EXPECT_TRUE(contains(logged, "job_start")) << logged;
    EXPECT_FALSE(contains(logged, k_secret)) << logged;
}

// --hosts: the agents get the secret on their lifeline, never on the command line
// (here a {host} template launcher that logs every command line it runs).
TEST_F(JobSecret, HostsHandTheSecretOverTheLifelineNeverTheCommandLine) {
    const std::string log = path("command-lines.log");
    const std::string launcher = path("launcher.sh");
    write_text_file(launcher,
                    fmt::format("#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\nshift\nexec sh -c "
                                "\"$1\"\n",
                                log),
                    0755);
    ::chmod(launcher.c_str(), 0755);
    for (const bool user_secret : {true, false}) {
        SCOPED_TRACE(user_secret);
        RunOptions options;
        options.cwd = m_dir;
        if (user_secret) options.env = {{"DDPRUN_RDZV_SECRET", k_secret}};
        RunResult r = run(
            {"--hosts=a,b", "--ssh-command=" + launcher + " {host}", "--env=FAKE_WORKER_PIDFILE",
             "--rdzv_conf=join_timeout=20", "--master_addr=127.0.0.1",
             fmt::format("--rdzv_id=hosts-{}", user_secret), k_fake_worker, "getenv",
             "DDPRUN_RDZV_SECRET", "getenv", "DDPRUN_RDZV_SECRET_ON_STDIN"},
            options);
        EXPECT_EQ(r.exit_code, 0) << r.describe();
        const std::string lines = read_text_file(log);
        EXPECT_TRUE(contains(lines, "DDPRUN_RDZV_SECRET_ON_STDIN=1 ")) << lines;
        EXPECT_FALSE(contains(lines, k_secret)) << lines;
        EXPECT_FALSE(contains(r.out + r.err, k_secret)) << r.describe();
        EXPECT_FALSE(contains(r.out, "DDPRUN_RDZV_SECRET=0")) << r.describe();
        EXPECT_TRUE(contains(r.out, "DDPRUN_RDZV_SECRET_ON_STDIN=<unset>")) << r.describe();
    }
}

}  // namespace
}  // namespace ddprun_it
