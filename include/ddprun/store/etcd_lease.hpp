// The lease every key an agent writes to etcd is bound to, so that the keys of
// a job whose agents all died (SIGKILL, frozen, cut off) go by themselves: etcd
// deletes a lease's keys once nobody renewed it for its TTL. One per agent,
// shared by all its EtcdStore clones; a thread of its own renews it every
// third of the TTL, from the first key written until the agent is done.
//
// A key another agent writes later is bound to that agent's lease instead
// (a put rebinds), so a job's keys outlive every agent by at most the TTL.
//
// An elastic job shares one lease among all its agents instead (`shared_key`
// holds its id, bound to it): a leader that left wrote records the newcomers
// still read, so no key may go with the agent that wrote it. Every agent
// renews the one lease, and it lapses TTL after the last of them stopped.
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
    // `shared_key`: the etcd key of a lease shared by a job's agents; empty for
    // one of this agent's own.
    EtcdKeyLease(EtcdOptions client, std::chrono::seconds ttl, std::string shared_key = {});
    ~EtcdKeyLease();
    EtcdKeyLease(const EtcdKeyLease&) = delete;
    EtcdKeyLease& operator=(const EtcdKeyLease&) = delete;

    // The lease's id, granted at the first call (a StoreError if etcd refuses).
    std::int64_t id();

    std::chrono::seconds ttl() const { return m_ttl; }

  private:
    void renew_until_stopped();
    std::int64_t grant(EtcdClient& client);
    std::int64_t join_shared(EtcdClient& client);

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
