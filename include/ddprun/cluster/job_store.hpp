// A way into a running job's rendezvous store for a process that is not one of its
// agents (`ddprun status`): the same endpoint, backend and job secret as the job's
// agents would use with these options, as a client only (it never hosts a c10d store,
// never takes an etcd lease, and writes nothing).
#pragma once

#include <chrono>
#include <expected>
#include <memory>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

struct JobStoreClient {
    std::unique_ptr<Store> store;  // behind the job secret's guard (signed_store.hpp)
    std::string where;             // "c10d store at HOST:PORT", "etcd at HOST:PORT"
    bool etcd = false;
};

// `ctx` as prepare_status() (launch.hpp) makes it; `timeout` bounds connecting and
// every call. A store that cannot be reached is an error of exit code 1 naming it.
std::expected<JobStoreClient, Error> open_job_store(const LaunchContext& ctx,
                                                    std::chrono::milliseconds timeout);

}  // namespace ddprun
