// Where the workers' store lives (see worker_store.hpp).
#include "ddprun/plan/worker_store.hpp"

#include <fmt/format.h>

namespace ddprun {

WorkerStoreChoice choose_worker_store(AgentsMeet meet, const Environment& env,
                                      const std::function<bool()>& defaults_start) {
    if (meet == AgentsMeet::Etcd) return {};
    auto set = env.find(std::string(k_share_store_variable));
    if (set != env.end() && !set->second.empty()) return {set->second != "1", {}};
    if (meet == AgentsMeet::OneNode) return {};
    if (defaults_start()) return {true, {}};
    return {false,
            fmt::format("the workers keep their own store (rank 0 hosts it at "
                        "MASTER_ADDR:MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=False): this "
                        "torch has no libuv, and its client of a shared store asks for it; {}=0 "
                        "shares the agent's anyway",
                        k_share_store_variable)};
}

}  // namespace ddprun
