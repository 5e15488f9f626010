// --lifeline: an agent started by a --hosts launcher reads the launcher's link
// (its standard input, the ssh channel) on the agent's loop, in every phase,
// from its start to its end (lifeline.hpp has the protocol). A "signal N" line
// is answered as signal N from a user is (agent_signals.cpp); the link's end
// means that the launcher or its connection is gone, and nobody is left to
// stop the job: it is killed on every node, as when the supervisor is killed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "agent_impl.hpp"
#include "ddprun/base/logging.hpp"
#include "lifeline_link.hpp"

namespace ddprun {

void LifelineLink::start() {
    // A copy of its own: the loop makes it non-blocking, and no worker inherits it (they
    // get /dev/null as stdin).
    const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        throw std::system_error(errno, std::generic_category(),
                                "--lifeline: fcntl(stdin, F_DUPFD_CLOEXEC)");
    // Not a pipe or socket (a file, /dev/null): epoll cannot wait on it, but reading it
    // never blocks either, so the loop just reads it (to its end, which is the link's).
    m_link.emplace(m_io, fd);
    read();
}

void LifelineLink::read() {
    m_link->async_read_some(
        asio::buffer(m_buffer), [this](boost::system::error_code ec, std::size_t n) {
            if (ec == asio::error::operation_aborted) return;
            if (ec) {
                m_link.reset();
                return m_on_end(ec == asio::error::eof ? std::string() : " (" + ec.message() + ")");
            }
            for (const auto& message : m_reader.feed({m_buffer.data(), n})) m_on_message(message);
            read();
        });
}

void Agent::Impl::watch_lifeline() {
    if (!ctx.config.lifeline) return;
    lifeline.emplace(
        io, [this](const LifelineMessage& message) { on_lifeline_message(message); },
        [this](const std::string& how) {
            kill_everywhere(fmt::format("the --hosts launcher's link closed{} (its ssh "
                                        "connection or the launcher is gone)",
                                        how),
                            fmt::format("node {} ({}) lost its link to the --hosts launcher "
                                        "(its ssh connection or the launcher is gone)",
                                        node_rank, ctx.host));
        });
    lifeline->start();
}

void Agent::Impl::on_lifeline_message(const LifelineMessage& message) {
    if (message.kind == LifelineMessage::Kind::Bad) {
        spdlog::warn("ignored a line from the --hosts launcher: {} (expected 'signal N')",
                     message.shown);
        return;
    }
    const int signal = message.signal;
    const auto& stops = ctx.config.stop_signals;
    const auto& forwards = ctx.config.forward_signals;
    // Only what the agent would take from a user: any other signal would not reach it.
    if (std::find(stops.begin(), stops.end(), signal) == stops.end() &&
        std::find(forwards.begin(), forwards.end(), signal) == forwards.end()) {
        spdlog::warn(
            "ignored 'signal {}' from the --hosts launcher: ddprun does not handle {} (see "
            "--signals_to_handle)",
            signal, signal_name(signal));
        return;
    }
    spdlog::debug("{} from the --hosts launcher", signal_name(signal));
    on_signal(ReceivedSignal{signal, 0, false});
}

}  // namespace ddprun
