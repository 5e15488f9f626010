// Which cluster a job's agents meet in (see cluster.hpp).
#include "ddprun/cluster/cluster.hpp"

namespace ddprun {

void Cluster::share_progress(std::vector<RankProgress> mine, std::chrono::milliseconds,
                             Progressed done) {
    done(std::move(mine));
}

std::unique_ptr<Cluster> make_cluster(boost::asio::io_context& io, const LaunchContext& context) {
    if (context.config.nnodes > 1) return make_store_cluster(io, context);
    return make_local_cluster(io, context);
}

}  // namespace ddprun
