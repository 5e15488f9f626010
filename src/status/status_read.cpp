// `ddprun status`'s reading (see status.hpp): one look at the job's records, and the
// command around it (once, or --watch until the job ends).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/tcp_connect.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/cluster/job_store.hpp"
#include "ddprun/fanout/job_secret.hpp"
#include "ddprun/records/records.hpp"
#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/rendezvous/status_publisher.hpp"
#include "ddprun/scheduler/hostlist.hpp"
#include "ddprun/scheduler/scheduler_env.hpp"
#include "ddprun/status/status.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {
namespace {

// How long the reader waits for the store to answer one call, or to connect.
constexpr std::chrono::milliseconds k_read_timeout{3000};
// More nodes than this are not a job's (the CLI's bound on --nnodes).
constexpr int k_max_nodes = 1 << 16;

// How long a Slurm step's store port may take to accept a probe's connection: it is
// probed before a client is opened on it (which would wait its whole timeout for a
// port nothing listens on).
constexpr std::chrono::milliseconds k_probe_bound{500};

Error secret_refused(const std::string& run_id, bool with_secret) {
    return Error{
        fmt::format("job '{}': {}; give ddprun status the job's secret (--rdzv_conf "
                    "secret_file=PATH or DDPRUN_RDZV_SECRET_FILE)",
                    run_id,
                    with_secret ? "its records are not signed with the secret given (the job runs "
                                  "with another, or none)"
                                : "it runs with a job secret, and this reader was given none"),
        exit_code::kUsage};
}

// The text under `key`, if there is one. A record the secret refuses throws.
std::optional<std::string> read_key(Store& store, const std::string& key) {
    if (!store.check({key})) return std::nullopt;
    return store.get(key);
}

// Round 0 is being joined: the nodes that wrote their join records so far.
void read_join(Store& store, const std::string& run_id, JobView& view) {
    for (int node = 0; node < std::max(1, view.joining_nnodes) && node < k_max_nodes; ++node) {
        auto text = read_key(store, JobKeys(run_id).round(0, fmt::format("info/{}", node)));
        if (!text) continue;
        auto info = parse_node_info(*text);
        if (!info) continue;
        if (view.joined.empty()) view.joining_nnodes = info->fingerprint.nnodes;
        view.joined.push_back(*info);
    }
}

}  // namespace

std::expected<JobView, Error> read_job(Store& store, const std::string& run_id,
                                       const std::string& where, bool with_secret) {
    JobView view;
    view.run_id = run_id;
    view.where = where;
    view.now_ms = wall_ms();
    try {
        auto text = read_key(store, JobKeys(run_id).status(0));
        if (text) {
            auto zero = parse_node_status(*text, run_id);
            if (!zero)
                return std::unexpected(
                    Error{fmt::format("job '{}': node 0's status record ({}) is not one: {}",
                                      run_id, JobKeys(run_id).status(0), zero.error()),
                          1});
            view.zero = *zero;
            view.nodes.resize(static_cast<std::size_t>(std::max(1, zero->nnodes)));
            view.nodes[0] = *zero;
            // Node 0's opened: another that does not is not the job's, and is left out.
            for (int node = 1; node < zero->nnodes; ++node)
                view.nodes[static_cast<std::size_t>(node)] =
                    read_node_status(store, JobKeys(run_id).status(node), run_id);
            return view;
        }
        read_join(store, run_id, view);
        if (!view.joined.empty()) return view;
        // An elastic job forming its first round has agents, not nodes yet.
        if (store.check({JobKeys(run_id).elastic("arrivals")})) return view;
    } catch (const RecordRejected&) {
        return std::unexpected(secret_refused(run_id, with_secret));
    } catch (const StoreError& e) {
        return std::unexpected(
            Error{fmt::format("job '{}': {} stopped answering: {}", run_id, where, e.what()), 1});
    }
    return std::unexpected(
        Error{fmt::format("no job '{}' at {}: it ended (its records are gone), has not started, or "
                          "runs under another --rdzv_id",
                          run_id, where),
              1});
}

std::expected<std::vector<SlurmStep>, Error> slurm_steps(const Environment& env) {
    auto job = env.find("SLURM_JOB_ID");
    auto nodes = env.find("SLURM_JOB_NODELIST");
    if (job == env.end() || nodes == env.end()) return std::vector<SlurmStep>{};
    auto id = to_integer(job->second);
    if (!id || *id < 0)
        return std::unexpected(usage_error(fmt::format(
            "SLURM_JOB_ID={}: not a job id; pass --rdzv_endpoint and --rdzv_id", job->second)));
    auto hosts = expand_hostlist(nodes->second);
    if (!hosts || hosts->empty())
        return std::unexpected(
            usage_error(fmt::format("SLURM_JOB_NODELIST={}: {}; pass --rdzv_endpoint and --rdzv_id",
                                    nodes->second, hosts ? "no host" : hosts.error())));
    std::vector<SlurmStep> steps;
    for (int step = 0; step < k_slurm_steps; ++step)
        steps.push_back({fmt::format("slurm-{}.{}", *id, step), hosts->front(),
                         job_ports(*id, step).store_port});
    return steps;
}

int run_status(LaunchConfig config, const Environment& env, const StatusRequest& request) {
    auto fail = [](const Error& error) {
        std::fprintf(stderr, "ddprun status: %s\n", error.message.c_str());
        return error.exit_code;
    };
    if (!request.rendezvous_given && config.scheduler == "slurm") {
        auto steps = slurm_steps(env);
        if (!steps) return fail(steps.error());
        auto found = std::ranges::find_if(*steps, [](const SlurmStep& step) {
            return accepts_tcp(step.host, step.port, k_probe_bound);
        });
        if (found == steps->end())
            return fail(Error{
                fmt::format("no ddprun job in Slurm job {}: no store answers at {} on the "
                            "ports of steps 0-{}; pass --rdzv_endpoint and --rdzv_id of the job",
                            env.at("SLURM_JOB_ID"), steps->empty() ? "?" : steps->front().host,
                            k_slurm_steps - 1),
                1});
        config.rdzv_backend = "c10d";
        config.rdzv_endpoint = fmt::format("{}:{}", found->host, found->port);
        config.rdzv_id = found->run_id;
    }
    const bool watch = request.watch;
    const bool json = request.json;
    // The secret and etcd's access, read as the job's agents read them (usage errors).
    auto secret = read_user_secret(config.rendezvous, env);
    if (!secret) return fail(secret.error());
    auto password = read_etcd_access(config.rdzv_backend, config.rendezvous.etcd);
    if (!password) return fail(password.error());
    const bool with_secret = !secret->empty();
    auto client = open_job_store(
        job_store_settings(config, std::move(*password), std::move(*secret)), k_read_timeout);
    if (!client) return fail(client.error());
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    bool seen = false;
    for (;;) {
        auto view = read_job(*client->store, config.rdzv_id, client->where, with_secret);
        if (!view) {
            // A job that was there and is gone ended while it was watched.
            if (!seen || view.error().exit_code != 1) return fail(view.error());
            std::printf("job '%s' ended: %s\n", config.rdzv_id.c_str(),
                        view.error().message.c_str());
            return exit_code::kSuccess;
        }
        seen = true;
        std::string out = json ? status_json(*view, config.straggler_fraction) + "\n"
                               : render_status(*view, config.straggler_fraction);
        if (watch && terminal && !json)
            out = "\x1b[H\x1b[2J" + out;  // in place
        else if (watch && !json)
            out += "\n";
        std::fputs(out.c_str(), stdout);
        std::fflush(stdout);
        if (!watch) return exit_code::kSuccess;
        std::this_thread::sleep_for(k_watch_interval);
    }
}

}  // namespace ddprun
