// --health-check: the command a node runs before each join, whose exit status
// says whether the node may take part (0) or must stay out (anything else, a
// signal, or no answer within --health-check-timeout). It runs as `/bin/sh -c
// CMD` (so `nhc -t 60`, a site script and a pipeline all work) in a process
// group of its own, stdin /dev/null, stdout and stderr into one pipe whose last
// lines name the problem; whatever it leaves in its group is killed when it
// ends. It is started and watched on the agent's loop, so that a stop signal
// still stops the agent while it runs.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/base/environment.hpp"
#include "ddprun/plan/launch_context.hpp"

namespace ddprun {

// What the node is about to join with, as far as it is known before the join.
struct NodePlan {
    int nproc = 1;
    std::string devices;           // the devices its workers get ("0,1,2,3"); "": none set
    std::optional<int> node_rank;  // known: --node_rank, a scheduler, or an earlier round
    std::optional<std::pair<int, int>> ranks;  // first and last global rank, where known
    int restart_count = 0;
    std::string run_id;
};

// The plan of this node's workers for the health check: its devices (every
// local rank's CUDA_VISIBLE_DEVICES, in order, each once).
NodePlan node_plan(const LaunchContext& ctx);

// The variables the check gets on top of ddprun's environment (docs/failures.md):
// CUDA_VISIBLE_DEVICES, LOCAL_WORLD_SIZE, GROUP_RANK and DDPRUN_RANKS where known,
// TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID.
std::vector<std::pair<std::string, std::string>> health_check_env(const NodePlan& plan);

struct HealthCheckResult {
    enum class Kind { Healthy, Failed, TimedOut, NotStarted } kind = Kind::Healthy;
    int status = 0;                       // the wait status (Healthy, Failed)
    std::vector<std::string> last_lines;  // its output's last non-blank lines
    std::string error;                    // NotStarted: why
    std::chrono::milliseconds took{0};
    bool healthy() const { return kind == Kind::Healthy; }
};

// How the check ended, for a message: "exited with 3", "was killed by SIGSEGV",
// "did not finish within 60 s (--health-check-timeout): killed it", "could not
// start: ...".
std::string describe_check_end(const HealthCheckResult& result, std::chrono::milliseconds timeout);

// The last `count` non-blank lines of `output` (a '\r' segment counts as one),
// each cut to 300 bytes.
std::vector<std::string> last_lines(std::string_view output, std::size_t count);

// One per agent, reused for each run: handlers of a run may still be queued on
// the loop after it ended, so it lives as long as the loop.
class HealthCheck {
  public:
    using Done = std::function<void(HealthCheckResult)>;
    // How many of the output's last lines are kept.
    static constexpr std::size_t k_lines = 5;

    HealthCheck(boost::asio::io_context& io, std::string command, std::chrono::milliseconds timeout)
        : m_io(io), m_command(std::move(command)), m_timeout(timeout), m_timer(io) {}
    ~HealthCheck() { cancel(); }
    HealthCheck(const HealthCheck&) = delete;
    HealthCheck& operator=(const HealthCheck&) = delete;

    // Starts the command with `env` (ddprun's and the plan's); `done` runs on the
    // loop once, when it has ended, or at once if it cannot start.
    void start(const Environment& env, Done done);
    // A child was reaped (the agent's SIGCHLD): the check may have ended.
    void reaped();
    // Kills the check and its group; `done` is not called.
    void cancel();

  private:
    void read();
    bool drain();  // takes what the pipe holds; false at its end
    void finish(HealthCheckResult result);

    boost::asio::io_context& m_io;
    std::string m_command;
    std::chrono::milliseconds m_timeout;
    boost::asio::steady_timer m_timer;
    std::optional<boost::asio::posix::stream_descriptor> m_output;
    std::string m_text;  // the output's last 64 KiB
    pid_t m_pid = -1;
    std::uint64_t m_check = 0;  // the run's number
    std::chrono::steady_clock::time_point m_started;
    Done m_done;
};

}  // namespace ddprun
