// Workers stuck in uninterruptible sleep (see agent_impl.hpp, uninterruptible.hpp):
// with torch's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT set, a timer looks at
// this node's running workers' /proc/PID/stat while a round runs. A worker in
// state D for the timeout is wedged in the kernel and holds what a restarted
// worker would need (a GPU, a NIC): as torch marks the group UNHEALTHY and
// disables its restarts, the round is given up on every node, whatever
// --max_restarts says, with one line that names the rank, its pid and how long.
#include <signal.h>

#include "agent_impl.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/logging.hpp"
#include "uninterruptible_guard.hpp"

namespace ddprun {

void UninterruptibleGuard::start_round(const Environment& env, Round round) {
    if (!m_setting) {
        m_setting = uninterruptible_setting(env);
        if (!m_setting->warning.empty()) spdlog::warn("{}", m_setting->warning);
    }
    m_timer.reset();  // a previous round's look, if still pending, is cancelled with it
    if (!m_setting->timeout) return;
    m_round = std::move(round);
    m_watch.emplace(*m_setting->timeout);
    m_timer = std::make_unique<boost::asio::steady_timer>(m_io);
    look();
}

void UninterruptibleGuard::look() {
    if (!m_round.running()) return;  // stopping already: nothing to give up
    // The kernel sends no event when a process enters or stays in D: reading
    // /proc/PID/stat now and then is the only way to tell.
    const auto running = m_round.workers();
    std::vector<UninterruptibleWatch::Seen> seen;
    for (const auto& w : running) seen.push_back({w.pid, read_proc_state(w.pid)});
    const auto looked = m_watch->look(seen, UninterruptibleWatch::Clock::now());
    auto describe = [&](pid_t pid) {
        for (const auto& w : running)
            if (w.pid == pid) return fmt::format("rank {} (pid {})", w.rank, pid);
        return fmt::format("pid {}", pid);
    };
    for (pid_t pid : looked.entered)
        spdlog::debug("{} is in uninterruptible sleep (D state); the job stops if it stays {}",
                      describe(pid), duration_text(*m_setting->timeout));
    if (!looked.stuck.empty()) {
        const auto& first = looked.stuck.front();
        std::string also;
        for (std::size_t i = 1; i < looked.stuck.size(); ++i)
            also +=
                fmt::format("{}{} for {}", also.empty() ? "; also " : ", ",
                            describe(looked.stuck[i].pid), duration_text(looked.stuck[i].dwell));
        m_round.give_up(fmt::format(
            "{} on {} has been in uninterruptible sleep (D state) for {}{} "
            "({}={}): wedged in the kernel (a driver, a device, a file system); the job "
            "stops without a restart",
            describe(first.pid), m_round.node, duration_text(first.dwell), also,
            k_uninterruptible_variable, m_setting->value));
        return;  // no more looks this round
    }
    m_timer->expires_after(uninterruptible_look_period(*m_setting->timeout));
    m_timer->async_wait([this](boost::system::error_code ec) {
        if (!ec) look();
    });
}

void Agent::Impl::watch_uninterruptible() {
    d_state.start_round(ctx.env, {.running = [this] { return phase == Phase::Running; },
                                  .workers = [this] { return workers.running_workers(); },
                                  .node = describe_node(),
                                  .give_up =
                                      [this](const std::string& message) {
                                          // As for a worker's failure: this node's workers stop at
                                          // once (their exits are ddprun's doing from here on); the
                                          // abort comes back as the round's stop, on every node,
                                          // which prints `message` and exits kUnhealthy without a
                                          // restart. Should another node's failure have stopped the
                                          // round first, that stop is the job's.
                                          begin_stop(SIGTERM);
                                          cluster->abort(message, exit_code::kUnhealthy);
                                      }});
}

}  // namespace ddprun
