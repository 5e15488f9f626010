// SignalReader: delivers signals to a handler on an io_context. The signals
// are blocked in the calling thread and read from a signalfd, so they arrive
// as ordinary events of the loop, in order, with no handler and no race.
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ddprun {

class SignalReader {
  public:
    // Blocks `signals` in the calling thread (call it before starting threads
    // that should not receive them) and starts reading. Throws
    // std::system_error naming the call if the signalfd cannot be made.
    SignalReader(boost::asio::io_context& io, const std::vector<int>& signals,
                 std::function<void(int)> on_signal);
    ~SignalReader();
    SignalReader(const SignalReader&) = delete;
    SignalReader& operator=(const SignalReader&) = delete;

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace ddprun
