// The calls an agent makes on its rendezvous store, counted behind the Store
// interface, and those that failed: --metrics-port's ddprun_store_requests_total and
// ddprun_store_errors_total (docs/metrics.md), and what docs/status.md's cost of the
// status records is measured with. Shared by every clone, as the agent's threads
// each have one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "ddprun/store/store.hpp"

namespace ddprun {

struct StoreCounts {
    std::atomic<std::int64_t> requests{0};
    // Calls that threw a StoreError. A wait that timed out is not one: the agent's
    // threads wait in slices, and a slice that ends without its key is their normal.
    std::atomic<std::int64_t> errors{0};
};

// `inner` with its calls counted into `counts`; its clones count there too.
std::unique_ptr<Store> count_store(std::unique_ptr<Store> inner,
                                   std::shared_ptr<StoreCounts> counts);

}  // namespace ddprun
