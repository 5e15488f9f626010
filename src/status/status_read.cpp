// `ddprun status`'s reading (see status.hpp): one look at the job's records, and the
// command around it (once, or --watch until the job ends).
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "ddprun/base/clock.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/cluster/job_store.hpp"
#include "ddprun/cluster/status_publisher.hpp"
#include "ddprun/elastic/elastic.hpp"
#include "ddprun/launch/launch.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
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

// How long a Slurm step's store port may take to accept a probe's connection.
constexpr int k_probe_bound_ms = 500;

// Whether something accepts a TCP connection at host:port within k_probe_bound_ms: a
// step's store, probed before a client is opened on it (which would wait its whole
// timeout for a port nothing listens on).
bool accepts(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
        return false;
    bool accepted = false;
    for (addrinfo* at = found; at != nullptr && !accepted; at = at->ai_next) {
        UniqueFd fd(::socket(at->ai_family, at->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) continue;
        if (::connect(fd.get(), at->ai_addr, at->ai_addrlen) == 0) {
            accepted = true;
            break;
        }
        if (errno != EINPROGRESS) continue;
        pollfd poll_fd{fd.get(), POLLOUT, 0};
        int error = 0;
        socklen_t size = sizeof error;
        accepted = ::poll(&poll_fd, 1, k_probe_bound_ms) == 1 &&
                   ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
    }
    ::freeaddrinfo(found);
    return accepted;
}

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
        auto text = read_key(store, round_key(run_id, 0, fmt::format("info/{}", node)));
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
        auto text = read_key(store, status_key(run_id, 0));
        if (text) {
            auto zero = parse_node_status(*text, run_id);
            if (!zero)
                return std::unexpected(
                    Error{fmt::format("job '{}': node 0's status record ({}) is not one: {}",
                                      run_id, status_key(run_id, 0), zero.error()),
                          1});
            view.zero = *zero;
            view.nodes.resize(static_cast<std::size_t>(std::max(1, zero->nnodes)));
            view.nodes[0] = *zero;
            // Node 0's opened: another that does not is not the job's, and is left out.
            for (int node = 1; node < zero->nnodes; ++node)
                view.nodes[static_cast<std::size_t>(node)] =
                    read_node_status(store, status_key(run_id, node), run_id);
            return view;
        }
        read_join(store, run_id, view);
        if (!view.joined.empty()) return view;
        // An elastic job forming its first round has agents, not nodes yet.
        if (store.check({elastic_key(run_id, "arrivals")})) return view;
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
        auto found = std::ranges::find_if(
            *steps, [](const SlurmStep& step) { return accepts(step.host, step.port); });
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
    auto ctx = prepare_status(config, env);
    if (!ctx) return fail(ctx.error());
    auto client = open_job_store(*ctx, k_read_timeout);
    if (!client) return fail(client.error());
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    bool seen = false;
    for (;;) {
        auto view =
            read_job(*client->store, config.rdzv_id, client->where, !ctx->rdzv_secret.empty());
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
