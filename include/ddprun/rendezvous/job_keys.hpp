// JobKeys: the one place that spells the store keys of a run. Every other file
// asks it for a key, so that the key space reads whole here:
//
//   ddprun/run_id                     which run a c10d store serves (outside every run)
//   ddprun/<run>/r<round>/<name>      a round: join, stop, barrier, heartbeats, signals
//                                     (the names: rendezvous.hpp)
//   ddprun/<run>/e/<name>             an elastic job's membership (elastic.hpp)
//   ddprun/<run>/status/<node>        each node's latest status (node_status.hpp)
//   ddprun/<run>/out                  etcd: the agents done with the run's keys
//   ddprun/<run>/lease                etcd: the lease every key of the run is bound to
//
// On etcd, "ddprun/" is the cluster's prefix instead (--rdzv_conf prefix, default
// "/ddprun/"): the store swaps the root (EtcdStoreOptions::job_root), and the lease
// keys, which reach etcd outside the Store, are named relative to the run
// (in_round, in_elastic).
#pragma once

#include <string>
#include <string_view>

namespace ddprun {

class JobKeys {
  public:
    // What every key starts with; on etcd, replaced by the cluster's prefix.
    static constexpr std::string_view k_root = "ddprun/";
    static std::string run_id_key();

    // `run_id`: --rdzv_id, which namespaces every key below.
    explicit JobKeys(std::string run_id) : m_run_id(std::move(run_id)) {}
    const std::string& run_id() const { return m_run_id; }

    std::string round(int round, std::string_view name) const;
    std::string elastic(std::string_view name) const;
    std::string status(int node_rank) const;
    std::string out() const;

    // What every key of the run starts with, under `root` (etcd: the cluster's prefix).
    std::string run_prefix(std::string_view root = k_root) const;
    // The etcd key of the lease every key of the run is bound to (etcd_lease.hpp).
    std::string lease(std::string_view root) const;
    // The round's and elastic keys relative to run_prefix(), as etcd's lease keys
    // (etcd_liveness.hpp) name them.
    static std::string in_round(int round, std::string_view name);
    static std::string in_elastic(std::string_view name);

  private:
    std::string m_run_id;
};

}  // namespace ddprun
