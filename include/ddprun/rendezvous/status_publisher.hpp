// StatusPublisher: what an agent does with its status record once per status period
// (docs/status.md): it writes the record; node 0 first reads every other node's and
// names stragglers from their ranks' rates (straggler.hpp), the others then read node
// 0's for its namings. The Coordinator's heartbeat thread drives it at its own pace
// (coordinator.hpp); kept apart so that the protocol runs, and is measured
// (bench/status_scale.cpp), on any Store without an agent around it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/records/node_status.hpp"
#include "ddprun/rendezvous/job_keys.hpp"
#include "ddprun/rendezvous/straggler.hpp"
#include "ddprun/store/store.hpp"

namespace ddprun {

class StatusPublisher {
  public:
    // `stragglers`: with progress beats (--hang-timeout), node 0 judges; else none.
    StatusPublisher(std::string run_id, std::optional<StragglerLimits> stragglers)
        : m_keys(std::move(run_id)), m_limits(stragglers) {}

    // Writes `mine` (its time is the caller's) and returns the namings of this round
    // this node has not been given yet, in order. Node 0 reads the round's other nodes
    // (mine.nnodes) first, only while it runs; a record that is missing, malformed,
    // another round's or not signed with the job's secret is left out. Throws
    // StoreError when the store fails. Its store operations: one set; node 0 watching
    // stragglers also a check and a get per other node, the others a check and a get
    // of node 0's record (docs/status.md, what it costs).
    std::vector<Straggler> tick(Store& store, NodeStatus mine,
                                StragglerWatch::Clock::time_point now);

  private:
    bool watching() const { return m_limits && m_limits->enabled(); }
    std::vector<StragglerWatch::Rate> read_rates(Store& store, const NodeStatus& mine);

    JobKeys m_keys;
    std::optional<StragglerLimits> m_limits;
    int m_round = -1;
    StragglerWatch m_watch;
    int m_news_seen = 0;  // the last naming handed out
};

// The status record under `key`, nullopt where there is none, or it is malformed or not
// signed with the job's secret (a status is never a reason to fail a job).
std::optional<NodeStatus> read_node_status(Store& store, const std::string& key,
                                           const std::string& run_id);

}  // namespace ddprun
