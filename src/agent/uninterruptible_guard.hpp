// UninterruptibleGuard: TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT as the agent
// keeps it (agent_uninterruptible.cpp). While a round runs, a timer on the agent's
// loop looks at the running workers' states; one in D for the timeout is wedged
// in the kernel, and the agent is told once, with the line that names it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/hang/uninterruptible.hpp"
#include "ddprun/workers/worker_group.hpp"

namespace ddprun {

class UninterruptibleGuard {
  public:
    struct Round {
        std::function<bool()> running;  // whether the round still runs
        std::function<std::vector<WorkerGroup::Running>()> workers;
        std::string node;                                 // "node 1 (gpu02)", for the line
        std::function<void(const std::string&)> give_up;  // the line, once
    };

    explicit UninterruptibleGuard(boost::asio::io_context& io) : m_io(io) {}

    // At a round's start (a previous round's look, if pending, is cancelled): reads the
    // variable at the first round, warning once about a value that is no number.
    void start_round(const Environment& env, Round round);

  private:
    void look();

    boost::asio::io_context& m_io;
    std::optional<UninterruptibleSetting> m_setting;  // read at the first round
    std::optional<UninterruptibleWatch> m_watch;
    std::unique_ptr<boost::asio::steady_timer> m_timer;
    Round m_round;
};

}  // namespace ddprun
