// A job's rendezvous store, from the rendezvous options alone: the endpoint,
// the backend, --rdzv_conf (timeouts, etcd access, prefix), the run id and the
// job secret. An agent's coordinator takes its store part from here
// (store_options.hpp); a process outside the job (`ddprun status`) opens it as
// a client only: it never hosts a c10d store, never takes an etcd lease, and
// writes nothing.
#pragma once

#include <chrono>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/store/etcd_store.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

// What names a job's store and lets one in.
struct JobStoreSettings {
    std::string backend = "c10d";   // --rdzv_backend: c10d or etcd
    std::string endpoints;          // --rdzv_endpoint, else --master_addr (etcd: members, by ',')
    std::string run_id;             // --rdzv_id
    RendezvousSettings rendezvous;  // --rdzv_conf
    std::string etcd_password;      // of rendezvous.etcd.user (read_etcd_access)
    std::string secret;             // the job secret (job_secret.hpp); empty: none
};

// The settings `config`'s options give; the password and the secret are read
// elsewhere (read_etcd_access, job_secret.hpp).
JobStoreSettings job_store_settings(const LaunchConfig& config, std::string etcd_password,
                                    std::string secret);

// Where the store is and how a client reaches it: c10d's host and port, or
// etcd's members, TLS, credentials, prefix and the job's key root; each call
// bounded by read_timeout. No lease, and nobody hosts it: an agent adds those.
struct JobStoreOptions {
    StoreOptions store;                    // c10d; for etcd, its first member (for messages)
    std::optional<EtcdStoreOptions> etcd;  // --rdzv_backend=etcd
    // "the c10d store at HOST:PORT", "etcd at HOST:PORT"
    std::string where() const;
};

// Errors: an endpoint that is not HOST[:PORT] (a usage error naming it).
std::expected<JobStoreOptions, Error> job_store_options(const JobStoreSettings& settings);

struct JobStoreClient {
    std::unique_ptr<Store> store;  // behind the job secret's guard (signed_store.hpp)
    std::string where;             // JobStoreOptions::where()
    bool etcd = false;
};

// A reader's client of the store; `timeout` bounds connecting and every call. A
// store that cannot be reached is an error of exit code 1 naming it.
std::expected<JobStoreClient, Error> open_job_store(const JobStoreSettings& settings,
                                                    std::chrono::milliseconds timeout);

// The etcd backend's access, as an agent and a reader need it before either
// opens the store: the TLS files checked (a usage error naming the bad one; a
// rendezvous error when the OpenSSL plugin cannot be loaded) and the password
// file's first line read (a usage error). Empty for c10d and for no etcd user.
std::expected<std::string, Error> read_etcd_access(std::string_view backend,
                                                   const EtcdAccess& access);

}  // namespace ddprun
