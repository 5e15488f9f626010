// Signals as events of the agent's loop (see signal_reader.hpp).
#include "ddprun/signal_reader.hpp"

#include <sys/signalfd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <system_error>

#include "ddprun/signals.hpp"

namespace asio = boost::asio;

namespace ddprun {

struct SignalReader::Impl {
    asio::posix::stream_descriptor fd;
    signalfd_siginfo info{};
    std::function<void(int)> on_signal;

    Impl(asio::io_context& io, std::function<void(int)> handler)
        : fd(io), on_signal(std::move(handler)) {}

    void read() {
        fd.async_read_some(asio::buffer(&info, sizeof info),
                           [this](boost::system::error_code ec, std::size_t n) {
                               if (ec == asio::error::operation_aborted) return;
                               if (!ec && n == sizeof info)
                                   on_signal(static_cast<int>(info.ssi_signo));
                               read();
                           });
    }
};

SignalReader::SignalReader(asio::io_context& io, const std::vector<int>& signals,
                           std::function<void(int)> on_signal)
    : m_impl(std::make_unique<Impl>(io, std::move(on_signal))) {
    block_signals(signals);
    sigset_t set;
    sigemptyset(&set);
    for (int sig : signals) sigaddset(&set, sig);
    int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
    m_impl->fd.assign(fd);
    m_impl->read();
}

SignalReader::~SignalReader() = default;

}  // namespace ddprun
