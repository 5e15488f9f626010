// EtcdLiveness: an agent's liveness on the etcd backend, through an etcd
// lease instead of heartbeat counters. Each agent holds a lease whose TTL is
// heartbeat_timeout, kept alive from its heartbeat thread, and puts one key per
// round under it ("r<round>/alive/<node_rank>"). An agent that dies, freezes or
// is cut off stops keeping its lease alive: etcd deletes its key when the TTL
// runs out, and whoever watches sees the deletion at once (a watch, not a
// poll of counters).
//
// Two instances serve one agent: the join's puts the key before the round's
// workers start (so that a node is watched from its first worker on), the
// heartbeat thread's follows it, keeps the lease alive and watches the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/etcd_client.hpp"
#include "ddprun/etcd_store.hpp"

namespace ddprun {

class EtcdLiveness {
  public:
    // `ttl`: heartbeat_timeout (etcd rounds a TTL up to whole seconds, at least 2).
    EtcdLiveness(const EtcdStoreOptions& options, std::string run_id,
                 std::chrono::milliseconds ttl);

    // This agent takes part in `round` as `node_rank`: its key, under its lease
    // (granted on the first call). Returns the revision of the put. Throws StoreError.
    std::int64_t enter(int round, int node_rank);
    std::int64_t lease() const { return m_lease; }
    // Follows `round`, whose key another instance put under `lease` at `revision`:
    // deletions are watched from there on.
    void follow(int round, std::int64_t lease, std::int64_t revision);
    // Renews the lease (none before the first follow). Throws StoreError, also when
    // etcd says it has expired (this agent was given up for dead).
    void keep_alive();
    // The nodes among `watched` whose key disappeared since the last call,
    // waiting for one at most until `deadline`. Throws StoreError.
    std::vector<int> lost_until(const std::vector<int>& watched,
                                std::chrono::steady_clock::time_point deadline);
    // From another thread: ends a watch in progress (closing the agent).
    void cancel() { m_client.cancel(); }
    // The nodes among `watched` that have no key in the current round.
    std::vector<int> missing(const std::vector<int>& watched);

  private:
    std::string prefix() const;  // of the current round's keys

    EtcdClient m_client;
    std::string m_key_prefix;  // the store's prefix and the run id
    std::int64_t m_ttl_seconds;
    std::int64_t m_lease = 0;
    int m_round = -1;
    std::int64_t m_revision = 0;  // watched from here on
};

}  // namespace ddprun
