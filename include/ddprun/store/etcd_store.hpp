// The etcd rendezvous backend's Store (--rdzv_backend=etcd): the keys the
// rendezvous uses live in an etcd v3 cluster under a prefix, reached through
// EtcdClient (etcd_client.hpp). Unlike the c10d store no agent hosts it, and
// opening it loads no libtorch: an agent on etcd costs what a single-node one
// does.
#pragma once

#include <memory>
#include <string>

#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/etcd_lease.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

struct EtcdStoreOptions {
    EtcdOptions client;               // the cluster's members and each call's bound
    std::string prefix = "/ddprun/";  // --rdzv_conf prefix
    // The root the rendezvous starts its keys with (JobKeys::k_root): a key under it is
    // stored under `prefix` instead; any other key goes under `prefix` whole.
    std::string job_root;
    // Every key written is bound to it (etcd_lease.hpp), shared by the store's clones;
    // none: the keys stay until deleted.
    std::shared_ptr<EtcdKeyLease> lease;
};

// Opens the store and makes one call, so that no etcd at the endpoints (or a
// program that is not etcd) is a StoreError at once, in one line.
std::unique_ptr<Store> open_etcd_store(const EtcdStoreOptions& options);

}  // namespace ddprun
