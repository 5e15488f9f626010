// A job's store from its rendezvous options (job_store.hpp), the Coordinator's
// options for this node around it, and node 0's host checked (store_options.hpp).
#include "store_options.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "ddprun/base/ports.hpp"
#include "ddprun/cluster/job_store.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {
namespace {

// How long a name server may answer "try again" before the store's host counts
// as unresolvable.
constexpr std::chrono::milliseconds k_resolve_retry{5000};

}  // namespace

JobStoreSettings job_store_settings(const LaunchConfig& config, std::string etcd_password,
                                    std::string secret) {
    JobStoreSettings settings;
    settings.backend = config.rdzv_backend;
    settings.endpoints = config.rdzv_endpoint.empty() ? config.master_addr : config.rdzv_endpoint;
    settings.run_id = config.rdzv_id;
    settings.rendezvous = config.rendezvous;
    settings.etcd_password = std::move(etcd_password);
    settings.secret = std::move(secret);
    return settings;
}

std::string JobStoreOptions::where() const {
    return fmt::format("{} at {}:{}", etcd ? "etcd" : "the c10d store", store.host, store.port);
}

std::expected<JobStoreOptions, Error> job_store_options(const JobStoreSettings& settings) {
    const RendezvousSettings& conf = settings.rendezvous;
    const std::string& endpoints = settings.endpoints;
    const bool etcd = settings.backend == "etcd";
    auto split =
        split_endpoint(endpoints.substr(0, endpoints.find(',')), etcd ? 2379 : k_default_rdzv_port);
    if (!split) return std::unexpected(split.error());
    JobStoreOptions options;
    options.store.host = split->host;
    options.store.port = split->port;
    options.store.timeout = conf.read_timeout;
    if (!etcd) return options;
    EtcdStoreOptions& store = options.etcd.emplace();
    for (std::size_t at = 0; at <= endpoints.size();) {
        auto comma = std::min(endpoints.find(',', at), endpoints.size());
        auto member = split_endpoint(endpoints.substr(at, comma - at), 2379);
        if (!member) return std::unexpected(member.error());
        store.client.endpoints.push_back(*member);
        at = comma + 1;
    }
    store.client.timeout = conf.read_timeout;
    if (auto prefix = conf.other.find("prefix"); prefix != conf.other.end())
        store.prefix = prefix->second;
    store.job_root = JobKeys::k_root;
    const EtcdAccess& access = conf.etcd;
    if (access.https)
        store.client.tls = EtcdTls{access.ca_cert, access.ssl_cert, access.ssl_cert_key};
    if (!access.user.empty())
        store.client.credentials = EtcdCredentials{access.user, settings.etcd_password};
    return options;
}

std::expected<Coordinator::Options, Error> coordinator_options(const LaunchContext& ctx) {
    const auto& config = ctx.config;
    const RendezvousSettings& settings = config.rendezvous;
    auto store = job_store_options(job_store_settings(config, ctx.etcd_password, ctx.rdzv_secret));
    if (!store) return std::unexpected(store.error());
    Coordinator::Options options;
    options.store = store->store;
    options.etcd = std::move(store->etcd);
    const bool etcd = options.etcd.has_value();
    if (etcd) {
        // Longer than this without etcd, the others give this agent up anyway.
        options.etcd->client.outage_grace = settings.heartbeat_timeout;
        // A job's keys outlive its last agent by this much at most: the others notice
        // a death within a heartbeat timeout and take at most the exit barrier to end.
        options.etcd->lease = std::make_shared<EtcdKeyLease>(
            options.etcd->client,
            std::chrono::ceil<std::chrono::seconds>(2 * settings.heartbeat_timeout +
                                                    settings.exit_barrier_timeout),
            JobKeys(config.rdzv_id).lease(options.etcd->prefix));
    }
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
    me.addr = !config.local_addr.empty() ? config.local_addr : etcd ? ctx.host : options.store.host;
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
    options.store.is_server = !etcd && is_host.value_or(is_local_host(options.store.host));
    return options;
}

std::expected<JobStoreClient, Error> open_job_store(const JobStoreSettings& settings,
                                                    std::chrono::milliseconds timeout) {
    auto options = job_store_options(settings);
    if (!options) return std::unexpected(options.error());
    JobStoreClient client;
    client.etcd = options->etcd.has_value();
    client.where = options->where();
    try {
        if (options->etcd) {
            options->etcd->client.timeout = timeout;
            client.store = open_etcd_store(*options->etcd);
        } else {
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
    client.store = sign_store(std::move(client.store), settings.secret);
    return client;
}

std::expected<std::string, Error> read_etcd_access(std::string_view backend,
                                                   const EtcdAccess& access) {
    if (backend != "etcd") return std::string();
    if (access.https) {
        try {
            if (auto problem =
                    check_tls_files({access.ca_cert, access.ssl_cert, access.ssl_cert_key}))
                return std::unexpected(usage_error(*problem));
        } catch (const StoreError& error) {
            // The OpenSSL plugin cannot be loaded: opening the store would fail the same way.
            return std::unexpected(rendezvous_error(error.what()));
        }
    }
    if (access.user.empty()) return std::string();
    const std::string shown = "--rdzv_conf password_file=" + access.password_file;
    std::ifstream file(access.password_file);
    if (!file)
        return std::unexpected(usage_error(
            fmt::format("{}: cannot read it ({}); it holds the password of etcd user '{}'", shown,
                        std::strerror(errno), access.user)));
    std::string password;
    std::getline(file, password);  // the first line, without its newline
    if (!password.empty() && password.back() == '\r') password.pop_back();
    if (password.empty())
        return std::unexpected(usage_error(
            fmt::format("{}: the first line is empty; write the password of etcd user '{}' there",
                        shown, access.user)));
    return password;
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
