// The lease every key of a job is bound to in etcd, so that the keys of a job
// whose agents all died (SIGKILL, frozen, cut off) go by themselves: etcd
// deletes a lease's keys once nobody renewed it for its TTL. One lease for the
// whole job, its id under `shared_key` (bound to it as well): the first agent
// to write grants it, the others join it, and every agent renews it, from its
// first key written until it is done, by a thread of its own every third of
// the TTL. One lease, not one per agent: a leader that left wrote records the
// newcomers still read, and the last agent out revokes the one lease with the
// keys (a lease per agent would each stay in etcd's database for its TTL).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddprun/store/etcd_client.hpp"

namespace ddprun {

class EtcdKeyLease {
  public:
    EtcdKeyLease(EtcdOptions client, std::chrono::seconds ttl, std::string shared_key);
    ~EtcdKeyLease();
    EtcdKeyLease(const EtcdKeyLease&) = delete;
    EtcdKeyLease& operator=(const EtcdKeyLease&) = delete;

    // The lease's id, granted at the first call (a StoreError if etcd refuses).
    std::int64_t id();

    std::chrono::seconds ttl() const { return m_ttl; }

    // For the last agent out, once the job's keys are deleted: ends the lease in
    // etcd now rather than at its TTL, and renews it no more. Nothing if this agent
    // never wrote. Throws StoreError.
    void revoke();

  private:
    void renew_until_stopped();
    std::int64_t grant(EtcdClient& client);
    std::int64_t join_shared(EtcdClient& client);
    void stop_renewing();

    EtcdOptions m_options;
    std::chrono::seconds m_ttl;
    std::string m_shared_key;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::int64_t m_id = 0;
    bool m_stopping = false;
    std::unique_ptr<EtcdClient> m_renew_client;
    std::thread m_renewer;
};

}  // namespace ddprun
