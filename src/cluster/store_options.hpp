// How a node reaches the others' store (store_cluster.cpp opens it): the
// Coordinator's options, from the launch context, and the check that node 0's
// host resolves here.
#pragma once

#include <expected>
#include <optional>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/cluster/coordinator.hpp"
#include "ddprun/plan/launch_context.hpp"

namespace ddprun {

// The store's endpoint (c10d or etcd) as job_store_options() makes it, with an
// agent's etcd lease and outage grace; this node's record and the job's
// fingerprint, the rendezvous timeouts; and whether this node hosts the store.
std::expected<Coordinator::Options, Error> coordinator_options(const LaunchContext& ctx);

// Node 0's host as every node reaches it. A name that does not resolve (a Slurm
// node name that is not in DNS, NodeAddr differing from the name) fails every
// node within seconds, naming the host, where it came from and the fix; else
// the others would fail after a socket timeout and node 0 after the join
// timeout, while the allocation burns.
std::optional<Error> check_store_host(const LaunchConfig& config, const std::string& host);

}  // namespace ddprun
