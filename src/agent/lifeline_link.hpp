// LifelineLink: the --hosts launcher's link as the agent reads it, its standard
// input (the ssh channel), on the agent's loop from its start to its end
// (fanout/lifeline.hpp has the protocol). It owns the descriptor, the reader and
// its buffer; the agent is told each line and, once, the link's end.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <functional>
#include <optional>
#include <string>

#include "ddprun/fanout/lifeline.hpp"

namespace ddprun {

class LifelineLink {
  public:
    using OnMessage = std::function<void(const LifelineMessage&)>;
    // `how`: empty at the link's end of file, else why reading it failed ("(...)").
    using OnEnd = std::function<void(const std::string& how)>;

    LifelineLink(boost::asio::io_context& io, OnMessage on_message, OnEnd on_end)
        : m_io(io), m_on_message(std::move(on_message)), m_on_end(std::move(on_end)) {}

    // Starts reading a copy of standard input. Throws std::system_error.
    void start();

  private:
    void read();

    boost::asio::io_context& m_io;
    OnMessage m_on_message;
    OnEnd m_on_end;
    std::optional<boost::asio::posix::stream_descriptor> m_link;
    LifelineReader m_reader;
    std::array<char, 4096> m_buffer{};
};

}  // namespace ddprun
