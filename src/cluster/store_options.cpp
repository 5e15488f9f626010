// The Coordinator's options for this node, and node 0's host checked (see
// store_options.hpp).
#include "store_options.hpp"

#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "ddprun/base/ports.hpp"
#include "ddprun/cluster/job_store.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {
namespace {

// How long a name server may answer "try again" before the store's host counts
// as unresolvable.
constexpr std::chrono::milliseconds k_resolve_retry{5000};

}  // namespace

std::expected<Coordinator::Options, Error> coordinator_options(const LaunchContext& ctx) {
    const auto& config = ctx.config;
    const RendezvousSettings& settings = config.rendezvous;
    Coordinator::Options options;
    const bool etcd = config.rdzv_backend == "etcd";
    const std::string endpoints =
        config.rdzv_endpoint.empty() ? config.master_addr : config.rdzv_endpoint;
    auto split =
        split_endpoint(endpoints.substr(0, endpoints.find(',')), etcd ? 2379 : k_default_rdzv_port);
    if (!split) return std::unexpected(split.error());
    const Endpoint& endpoint = *split;
    if (etcd) {
        EtcdStoreOptions store;
        for (std::size_t at = 0; at <= endpoints.size();) {
            auto comma = std::min(endpoints.find(',', at), endpoints.size());
            auto member = split_endpoint(endpoints.substr(at, comma - at), 2379);
            if (!member) return std::unexpected(member.error());
            store.client.endpoints.push_back(*member);
            at = comma + 1;
        }
        store.client.timeout = settings.read_timeout;
        // Longer than this without etcd, the others give this agent up anyway.
        store.client.outage_grace = settings.heartbeat_timeout;
        if (auto prefix = settings.other.find("prefix"); prefix != settings.other.end())
            store.prefix = prefix->second;
        const EtcdAccess& access = settings.etcd;
        if (access.https)
            store.client.tls = EtcdTls{access.ca_cert, access.ssl_cert, access.ssl_cert_key};
        if (!access.user.empty())
            store.client.credentials = EtcdCredentials{access.user, ctx.etcd_password};
        // A job's keys outlive its last agent by this much at most: the others notice
        // a death within a heartbeat timeout and take at most the exit barrier to end.
        store.lease = std::make_shared<EtcdKeyLease>(
            store.client,
            std::chrono::ceil<std::chrono::seconds>(2 * settings.heartbeat_timeout +
                                                    settings.exit_barrier_timeout),
            store.prefix + config.rdzv_id + "/lease");
        options.etcd = std::move(store);
    }
    options.store.host = endpoint.host;
    options.store.port = endpoint.port;
    options.store.timeout = settings.read_timeout;
    options.run_id = config.rdzv_id;
    options.secret = ctx.rdzv_secret;
    options.join_timeout = settings.join_timeout;
    options.heartbeat_timeout = settings.heartbeat_timeout;
    options.barrier_timeout = settings.exit_barrier_timeout;
    if (config.hang_timeout.count() > 0 && config.straggler_fraction > 0)
        options.stragglers = StragglerLimits{config.straggler_fraction, config.straggler_window};

    NodeInfo& me = options.me;
    me.node_rank = config.node_rank.value_or(-1);
    me.host = ctx.host;
    // Node 0's address is MASTER_ADDR: the store's host's (c10d), or its own (etcd).
    me.addr = !config.local_addr.empty() ? config.local_addr : etcd ? ctx.host : endpoint.host;
    me.nproc = ctx.nproc;
    me.pid = ::getpid();
    me.fingerprint.nnodes = config.nnodes;
    me.fingerprint.min_nnodes = config.min_nnodes;
    if (config.elastic()) {
        me.node_rank = -1;
        me.fingerprint.last_call_ms = settings.last_call_timeout.count();
        options.elastic = true;
        options.limits = {config.min_nnodes, config.nnodes, settings.last_call_timeout,
                          settings.join_timeout};
    }
    std::string program;
    for (const auto& word : worker_command(config, ctx.env)) program += word + " ";
    me.fingerprint.program = program;
    me.fingerprint.max_restarts = config.max_restarts;
    me.fingerprint.run_id = config.rdzv_id;
    me.fingerprint.version = DDPRUN_VERSION;

    // Who hosts the store: --rdzv_conf is_host, else node 0, else (ranks assigned at join)
    // the first agent on the endpoint's machine to bind its port.
    std::optional<bool> is_host = settings.is_host;
    if (!is_host && config.node_rank) is_host = *config.node_rank == 0;
    options.store.is_server = !etcd && is_host.value_or(is_local_host(endpoint.host));
    return options;
}

std::expected<JobStoreClient, Error> open_job_store(const LaunchContext& ctx,
                                                    std::chrono::milliseconds timeout) {
    auto options = coordinator_options(ctx);
    if (!options) return std::unexpected(options.error());
    JobStoreClient client;
    client.etcd = options->etcd.has_value();
    client.where = fmt::format("{} at {}:{}", client.etcd ? "etcd" : "the c10d store",
                               options->store.host, options->store.port);
    try {
        if (options->etcd) {
            options->etcd->lease.reset();  // a reader writes nothing: no lease to keep
            options->etcd->client.timeout = timeout;
            options->etcd->client.outage_grace = std::chrono::milliseconds(0);
            client.store = open_etcd_store(*options->etcd);
        } else {
            options->store.is_server = false;
            options->store.timeout = timeout;
            client.store = open_tcp_store(options->store);
        }
    } catch (const StoreError& e) {
        return std::unexpected(Error{
            fmt::format("no job answers there: {}; it ended, has not started, or runs with "
                        "other rendezvous options (--rdzv_endpoint, --rdzv_backend, --master_addr)",
                        e.what()),
            1});
    }
    client.store = sign_store(std::move(client.store), ctx.rdzv_secret);
    return client;
}

std::optional<Error> check_store_host(const LaunchConfig& config, const std::string& host) {
    auto why = resolve_failure(host, k_resolve_retry);
    if (!why) return std::nullopt;
    std::string source;
    for (const auto& [name, value] : config.value_sources)
        if (name == "master_addr" && value.ends_with(')') && value.find(" (") != std::string::npos)
            source = value.substr(value.find(" (") + 1);
    // A --rdzv_endpoint the user gave names the store's host itself.
    bool endpoint_given = !config.rdzv_endpoint.empty();
    for (const auto& [name, value] : config.value_sources)
        if (name == "rdzv_endpoint") endpoint_given = false;
    std::string fix =
        endpoint_given ? "fix --rdzv_endpoint=HOST:PORT" : "pass --master_addr=ADDRESS of node 0";
    if (config.scheduler == "slurm")
        fix += fmt::format(" (`scontrol show node {}` shows its NodeAddr)", host);
    return usage_error(fmt::format("node 0's host '{}'{} does not resolve here ({}): {}", host,
                                   source.empty() || endpoint_given ? "" : " " + source, *why,
                                   fix));
}

}  // namespace ddprun
