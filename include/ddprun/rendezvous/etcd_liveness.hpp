// EtcdLiveness: an agent's liveness on the etcd backend, through an etcd
// lease instead of heartbeat counters. Each agent holds a lease whose TTL is
// heartbeat_timeout, kept alive from its heartbeat thread, and puts its keys
// under it: one per round in a fixed-size job ("r<round>/alive/<node_rank>"),
// one for its life in an elastic job ("e/alive/<agent>", and "e/leader" while
// it leads). An agent that dies, freezes or is cut off stops keeping its lease
// alive: etcd deletes its keys when the TTL runs out, and whoever watches sees
// the deletion at once (a watch, not a poll of counters).
//
// Two instances serve one agent: the join's puts the keys before the round's
// workers start (so that a node is watched from its first worker on), the
// heartbeat thread's follows it, keeps the lease alive and watches the others.
// Names are relative to the job's keys (the prefix and the run id).
//
// With a job secret (signed_store.hpp) every value put here is signed over its
// full key and checked where it is read: a leader key another program wrote
// fails the election in one line naming it (75), an alive key it wrote is
// ignored with a warning (a phantom agent never joins a round). Deletions carry
// no value: a stray client that deletes keys can end a job (a denial of
// service, as deleting any record is), never make one succeed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/etcd_store.hpp"

namespace ddprun {

// The round whose key one instance (the join's) put, under which lease, at which
// revision, for the other (the heartbeat thread's) to follow: written by one thread,
// read by the other (the revision and lease are stored before the round).
struct EnteredRound {
    std::atomic<int> round{-1};
    std::atomic<std::int64_t> lease{0};
    std::atomic<std::int64_t> revision{0};
};

class EtcdLiveness {
  public:
    // `ttl`: heartbeat_timeout (etcd rounds a TTL up to whole seconds, at least 2).
    EtcdLiveness(const EtcdStoreOptions& options, std::string run_id, std::chrono::milliseconds ttl,
                 std::string secret = {});

    // Puts `name` under this agent's lease (granted on the first call); returns
    // the revision of the put. Throws StoreError.
    std::int64_t hold(const std::string& name, const std::string& value = "1");
    // This agent takes part in `round` as `node_rank`: its key, and the round's
    // keys watched from there on. Returns the revision of the put.
    std::int64_t enter(int round, int node_rank);
    std::int64_t lease() const { return m_lease; }
    // Follows `round`, whose key another instance put under `lease` at `revision`.
    void follow(int round, std::int64_t lease, std::int64_t revision);
    // Renews the lease (none before the first hold or follow). Throws StoreError,
    // also when etcd says it has expired (this agent was given up for dead).
    void keep_alive();

    // Puts `name` = `value` under this agent's lease unless it exists: returns
    // the value it holds after the call (whoever won), and the revision then.
    // Throws RecordRejected when the value held fails the secret's check.
    struct Held {
        std::string value;
        std::int64_t revision = 0;
    };
    Held campaign(const std::string& name, const std::string& value);

    // Deletions to watch: `name`, or every key under it when it ends in '/',
    // from `revision` on (replacing the round's keys of enter/follow).
    void watch(const std::string& name, std::int64_t revision);
    const std::string& watched() const { return m_watched; }
    // The names (relative, as given) deleted since the last call, waiting for
    // one at most until `deadline`. Throws StoreError.
    std::vector<std::string> deleted_until(std::chrono::steady_clock::time_point deadline);
    // The nodes among `watched` whose round key disappeared (enter or follow).
    std::vector<int> lost_until(const std::vector<int>& watched,
                                std::chrono::steady_clock::time_point deadline);
    // The names under `name` (ending in '/') that exist now, without it; one whose
    // value fails the secret's check is left out (warned about once).
    std::vector<std::string> present(const std::string& name);
    // The nodes among `watched` that have no key in the current round.
    std::vector<int> missing(const std::vector<int>& watched);
    // From another thread: ends a watch in progress (closing the agent).
    void cancel() { m_client.cancel(); }

  private:
    std::string round_prefix() const;  // of the current round's keys, relative
    std::string sealed(const std::string& name, const std::string& value) const;

    EtcdClient m_client;
    std::string m_secret;            // empty: none; signed values are then refused
    std::set<std::string> m_warned;  // keys whose values were refused
    std::string m_key_prefix;        // the store's prefix and the run id
    std::int64_t m_ttl_seconds;
    std::int64_t m_lease = 0;
    int m_round = -1;
    std::string m_watched;        // relative; a trailing '/' watches a prefix
    std::int64_t m_revision = 0;  // watched from here on
};

// A fixed-size job's end over etcd, for each agent that took part in it (its
// join succeeded), once its threads are done with the store: counts this agent
// out, and the last of `nnodes` out deletes every key of the run in one
// request (the prefix and the run id), so that the id can be used again. An
// agent that died never counts out: the job's keys then go with their leases
// (etcd_lease.hpp). Returns whether this agent deleted them. Throws StoreError.
bool count_out_of_run(EtcdStoreOptions options, const std::string& run_id, int nnodes);

// An elastic job's end over etcd, for each agent on its way out once its own
// lease (and so its e/alive and e/arriving keys) is revoked: if no agent holds
// such a key any more, deletes every key of the run in one transaction, so that
// the id can be used again. Agents come and go in an elastic job, so "last" is
// "none left in", not a count; an agent arriving meanwhile holds e/arriving
// first and keeps the keys. One that died leaves its keys to the job's shared
// lease (etcd_lease.hpp). Returns whether this agent deleted them. Throws StoreError.
bool end_elastic_run_if_last(EtcdStoreOptions options, const std::string& run_id);

}  // namespace ddprun
