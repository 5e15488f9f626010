// Cluster: what the agent knows of the other nodes. The agent is a state
// machine over one round at a time; everything job-wide (who takes part,
// where rank 0 is, how the round ended) comes from here, through handlers
// that run on the agent's loop. A single-node job has a trivial cluster (the
// round's end is decided locally); a multi-node job meets the others through
// a store (store_cluster.hpp). Nothing here blocks the loop for longer than
// one bounded store call, and end_round() between rounds.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ddprun/base/error.hpp"
#include "ddprun/hang/hang_monitor.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/plan/rank_plan.hpp"
#include "ddprun/records/node_status.hpp"
#include "ddprun/records/records.hpp"

namespace boost::asio {
class io_context;
}

namespace ddprun {

// What the cluster tells the agent during a round. Each runs on the loop.
struct RoundHandlers {
    // How the round ended job-wide (the first failure anywhere, an abort, a
    // lost store, or every node done). Called once per round.
    std::function<void(StopEvent)> on_stop;
    // A node that was told twice to stop asks every node to kill its workers.
    std::function<void()> on_kill;
    // --broadcast-signals: a signal that reached another node's agent.
    std::function<void(int)> on_signal;
    // With --hang-timeout: node 0 named a straggler, or one recovered (straggler.hpp).
    std::function<void(Straggler)> on_straggler;
};

class Cluster {
  public:
    using Opened = std::function<void(Status)>;
    using Joined = std::function<void(std::expected<RoundInfo, Error>)>;

    virtual ~Cluster() = default;

    // Connects to (or hosts) whatever the nodes meet through; `done` runs on
    // the loop. The agent may stop waiting and destroy the cluster meanwhile
    // (a signal): the destructor then abandons the attempt instead of waiting.
    virtual void open(Opened done) = 0;

    // Joins `round`: `done` gets this node's place in it. `master_port` is the
    // port this node reserved, used where it becomes the node of rank 0.
    // `handlers` serve the round from the moment `done` has run.
    virtual void join(int round, int master_port, RoundHandlers handlers, Joined done) = 0;

    // Fire and forget; what they lead to comes back through on_stop. The
    // first stop of a round wins.
    virtual void publish_failure(FailureRecord record) = 0;
    virtual void publish_finished() = 0;  // every worker of this node succeeded
    // Every node kills its workers now, no grace: this node was told twice to stop, or its
    // supervisor or --hosts launcher is gone.
    virtual void publish_kill() = 0;
    virtual void broadcast_signal(int signal) = 0;

    // Gives the round up on every node (a signal during the join, workers that
    // cannot start): joiners fail with `message`, on_stop gets an Abort.
    virtual void abort(const std::string& message, int exit_code) = 0;

    // This node does not join `round` (its --health-check failed, or it was stopped while
    // the check ran). An elastic job goes on without it, the others told that it left
    // (`reason`): true. Else (a fixed-size job, or this node hosts an elastic job's store)
    // every node's join of `round` fails with `message` (which names this node) and
    // `exit_code`: false. A single node has nobody to tell. Blocking.
    virtual bool stay_out(int /*round*/, const std::string& /*message*/,
                          const std::string& /*reason*/, int /*exit_code*/) {
        return false;
    }

    // Between rounds, after the workers are gone: this node is done with the
    // round. The store's host waits (bounded) for the others, so the store
    // never vanishes under a slower node. `killed`: this agent was killed and
    // leaves at once. Blocking.
    virtual void end_round(bool killed) = 0;

    // An elastic job (--nnodes=MIN:MAX) lets one node leave on a stop signal:
    // the others re-form without it. False where this node cannot leave alone
    // (a fixed-size job, or it hosts the store): the signal ends the job.
    virtual bool leave(int /*signal*/) { return false; }
    // The agent is about to exit with `exit_code`: agents still waiting to join
    // (spares of an elastic job) are told. Blocking, bounded.
    virtual void end_job(int /*exit_code*/) {}

    // Where every node's output shares one console (srun, mpirun), a failed
    // job prints one summary, on node 0, listing every node's workers: before
    // end_round each node hands over its failed workers; after it, node 0 gets
    // the others'. A single node has no others.
    virtual void share_outcomes(std::vector<FailureRecord> /*workers*/) {}

    // At a hang, every node tells the others how its ranks progressed, so that each
    // prints the job-wide picture: `done` (on the loop) gets every node's ranks that
    // arrived within `bound`, this node's included. A single node has only its own
    // (and calls `done` at once).
    using Progressed = std::function<void(std::vector<RankProgress>)>;
    virtual void share_progress(std::vector<RankProgress> mine, std::chrono::milliseconds /*bound*/,
                                Progressed done);
    virtual std::vector<FailureRecord> others_outcomes() const { return {}; }

    // This node's latest status (node_status.hpp), for `ddprun status` and node 0's
    // straggler watch; the cluster publishes it at its own pace. A single node has
    // nobody to show it to.
    virtual void publish_status(NodeStatus /*status*/) {}

    // The calls this node made on the rendezvous store, and those that failed
    // (store_counts.hpp); nullopt without a store.
    struct StoreCalls {
        std::int64_t requests = 0;
        std::int64_t errors = 0;
    };
    virtual std::optional<StoreCalls> store_calls() const { return std::nullopt; }

    // --max-no-progress-restarts: at a failed round's stop, whether this node's ranks
    // made progress; between rounds (blocking, bounded), whether any node's did, so
    // that every node makes the same decision. A single node has only its own.
    virtual void publish_made_progress(bool /*made*/) {}
    virtual bool made_progress_anywhere(bool mine) { return mine; }
};

// The workers' store node 0's agent hosts for a round that shares it
// (worker_store.hpp): a TCPStore listening on `port` while the handle lives.
class WorkerStoreHost {
  public:
    virtual ~WorkerStoreHost() = default;
};
// Binds on this host and connects over loopback: milliseconds, never a peer.
// Errors: the port taken, the plugin or its libtorch missing (exit 75).
std::expected<std::unique_ptr<WorkerStoreHost>, Error> host_worker_store(
    int port, std::chrono::milliseconds timeout);

// The cluster for `context`: single-node for --nnodes=1, else the store's.
std::unique_ptr<Cluster> make_cluster(boost::asio::io_context& io, const LaunchContext& context);

// A single-node job's cluster: join places this node alone; the round stops
// at its first published failure or abort, or when it finished.
std::unique_ptr<Cluster> make_local_cluster(boost::asio::io_context& io,
                                            const LaunchContext& context);

// A multi-node job's cluster over the c10d TCPStore (coordinator.hpp): node 0,
// or --rdzv_conf is_host, hosts the store at --rdzv_endpoint (default
// MASTER_ADDR:29400); heartbeats find lost nodes and a frozen store.
std::unique_ptr<Cluster> make_store_cluster(boost::asio::io_context& io,
                                            const LaunchContext& context);

}  // namespace ddprun
