// Which cluster a job's agents meet in (see cluster.hpp).
#include "ddprun/cluster/cluster.hpp"

#include <fmt/format.h>

#include "ddprun/plan/worker_store.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

void Cluster::share_progress(std::vector<RankProgress> mine, std::chrono::milliseconds,
                             Progressed done) {
    done(std::move(mine));
}

namespace {

class HostedStore final : public WorkerStoreHost {
  public:
    explicit HostedStore(std::unique_ptr<Store> store) : m_store(std::move(store)) {}

  private:
    std::unique_ptr<Store> m_store;
};

}  // namespace

std::expected<std::unique_ptr<WorkerStoreHost>, Error> host_worker_store(
    int port, std::chrono::milliseconds timeout) {
    try {
        return std::make_unique<HostedStore>(open_tcp_store({"", port, true, timeout}));
    } catch (const StoreError& e) {
        return std::unexpected(rendezvous_error(fmt::format(
            "cannot host the workers' store at MASTER_PORT={} ({}); or set {}=1 to have "
            "rank 0 host it",
            port, e.what(), k_share_store_variable)));
    }
}

std::unique_ptr<Cluster> make_cluster(boost::asio::io_context& io, const LaunchContext& context) {
    if (context.config.nnodes > 1) return make_store_cluster(io, context);
    return make_local_cluster(io, context);
}

}  // namespace ddprun
