// Agent: this node's state machine for the job: open the cluster, then round
// after round join, run the workers, stop them when the round ends, and
// restart or report. Signals, child exits and the cluster's news are events
// of one Boost.Asio loop; the WorkerGroup does what happens to processes and
// the Cluster what happens between nodes, so the agent only decides.
#pragma once

#include <functional>
#include <memory>

#include "ddprun/cluster/cluster.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/workers/worker_group.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

class Agent {
  public:
    using ClusterFactory =
        std::function<std::unique_ptr<Cluster>(boost::asio::io_context&, const LaunchContext&)>;

    // `make_cluster` is called once, from run(); tests pass a fake.
    explicit Agent(LaunchContext context, ClusterFactory make_cluster = ddprun::make_cluster,
                   WorkerGroup::Options worker_options = {});
    ~Agent();
    Agent(const Agent&) = delete;
    Agent& operator=(const Agent&) = delete;

    // Runs the job to its end; returns ddprun's exit code. Never throws for a
    // worker's failure; prints the summary box when the job fails. Blocks the
    // stop signals, SIGCHLD and parent_death_signal() in the calling thread.
    int run();

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace ddprun
