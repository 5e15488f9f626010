// Signals as events of the agent's loop (see signal_reader.hpp).
#include "ddprun/base/signal_reader.hpp"

#include <fstream>

#include <fmt/format.h>

#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <system_error>

#include "ddprun/base/signals.hpp"

namespace asio = boost::asio;

namespace ddprun {

struct SignalReader::Impl {
    asio::posix::stream_descriptor fd;
    signalfd_siginfo info{};
    std::function<void(const ReceivedSignal&)> on_signal;

    Impl(asio::io_context& io, std::function<void(const ReceivedSignal&)> handler)
        : fd(io), on_signal(std::move(handler)) {}

    ReceivedSignal received() const {
        ReceivedSignal signal;
        signal.number = static_cast<int>(info.ssi_signo);
        signal.sender = static_cast<pid_t>(info.ssi_pid);
        signal.relayed = info.ssi_code == SI_QUEUE && signal.sender == ::getppid();
        if (signal.relayed) signal.sender = static_cast<pid_t>(info.ssi_int);
        return signal;
    }

    void read() {
        fd.async_read_some(asio::buffer(&info, sizeof info),
                           [this](boost::system::error_code ec, std::size_t n) {
                               if (ec == asio::error::operation_aborted) return;
                               if (!ec && n == sizeof info) on_signal(received());
                               read();
                           });
    }
};

SignalReader::SignalReader(asio::io_context& io, const std::vector<int>& signals,
                           std::function<void(const ReceivedSignal&)> on_signal)
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

bool sent_by_step_daemon(pid_t sender) {
    if (sender <= 0) return false;
    std::ifstream comm(fmt::format("/proc/{}/comm", sender));
    std::string name;
    std::getline(comm, name);
    return name == "slurmstepd";
}

bool SignalCopies::is_copy(const ReceivedSignal& received, Clock::time_point now) {
    std::erase_if(m_unpaired, [&](const Unpaired& u) { return now - u.at > m_window; });
    auto twin = std::find_if(m_unpaired.begin(), m_unpaired.end(), [&](const Unpaired& u) {
        return u.signal.number == received.number && u.signal.sender == received.sender &&
               u.signal.relayed != received.relayed;
    });
    if (twin != m_unpaired.end()) {
        m_unpaired.erase(twin);
        return true;
    }
    m_unpaired.push_back({received, now});
    return false;
}

}  // namespace ddprun
