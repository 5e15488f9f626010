// SignalReader: delivers signals to a handler on an io_context. The signals
// are blocked in the calling thread and read from a signalfd, so they arrive
// as ordinary events of the loop, in order, with no handler and no race.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ddprun {

// One signal as the agent received it.
struct ReceivedSignal {
    int number = 0;
    // Who sent it; for a copy the supervisor relayed, who sent the original
    // (the supervisor passes it along with sigqueue). 0: the kernel (a terminal).
    pid_t sender = 0;
    bool relayed = false;  // relayed by the supervisor, the agent's parent
};

class SignalReader {
  public:
    // Blocks `signals` in the calling thread (call it before starting threads
    // that should not receive them) and starts reading. Throws
    // std::system_error naming the call if the signalfd cannot be made.
    SignalReader(boost::asio::io_context& io, const std::vector<int>& signals,
                 std::function<void(const ReceivedSignal&)> on_signal);
    ~SignalReader();
    SignalReader(const SignalReader&) = delete;
    SignalReader& operator=(const SignalReader&) = delete;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// A signal sent to every process of the job (Slurm's proctrack/linuxproc,
// systemd's KillMode=control-group, `kill` of every pid) reaches the agent
// twice: directly, and relayed by the supervisor, which got its own copy.
// They are one event for the workers. A direct copy and a relayed one of the
// same signal from the same sender, within `window` of each other, pair up:
// the second to arrive is the duplicate. Two signals that arrive the same way
// never pair, so a second Ctrl-C or a second `kill` still counts. Pure.
// Slurm's step daemon (slurmstepd) signals, under proctrack/linuxproc and
// proctrack/cgroup, every process of the step, the workers included; under
// proctrack/pgid only ddprun's top process. The agent sits where the workers
// do (a descendant, in a process group of its own), so a copy that reaches it
// directly from slurmstepd means the workers have theirs, and forwarding it
// would deliver it twice. True when `sender`'s name is slurmstepd.
bool sent_by_step_daemon(pid_t sender);

class SignalCopies {
  public:
    using Clock = std::chrono::steady_clock;
    explicit SignalCopies(std::chrono::milliseconds window = std::chrono::milliseconds(1000))
        : m_window(window) {}

    // True when `received` is the second copy of one delivery.
    bool is_copy(const ReceivedSignal& received, Clock::time_point now);

  private:
    struct Unpaired {
        ReceivedSignal signal;
        Clock::time_point at;
    };
    std::chrono::milliseconds m_window;
    std::vector<Unpaired> m_unpaired;
};

}  // namespace ddprun
