// A single-node job's cluster (see cluster.hpp): the round is this node's
// alone, so its end is whatever this agent publishes first.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "ddprun/cluster/cluster.hpp"
#include "ddprun/plan/worker_store.hpp"

namespace asio = boost::asio;

namespace ddprun {
namespace {

class LocalCluster final : public Cluster {
  public:
    // The workers' store: the agent's only when asked, as hosting it loads libtorch
    // (worker_store.hpp).
    LocalCluster(asio::io_context& io, const LaunchContext& context)
        : m_io(io),
          m_ctx(context),
          m_agent_store(choose_worker_store(AgentsMeet::OneNode, context.env, [] {
                            return false;
                        }).agent_hosts) {}

    void open(Opened done) override {
        asio::post(m_io, [done = std::move(done)] { done({}); });
    }

    void join(int round, int master_port, RoundHandlers handlers, Joined done) override {
        m_handlers = std::move(handlers);
        m_stopped = false;
        RoundInfo info;
        info.node_rank = m_ctx.config.node_rank.value_or(0);
        info.nproc_per_node = {m_ctx.nproc};
        info.master_addr = m_ctx.config.master_addr;
        info.master_port = master_port;
        info.agent_store = m_agent_store;
        info.round = round;
        info.restart_count = fixed_size_restarts(round);
        asio::post(m_io, [done = std::move(done), info] { done(info); });
    }

    void publish_failure(FailureRecord record) override {
        StopEvent event;
        event.kind = StopEvent::Kind::Failure;
        event.exit_code = record.exit_code;
        event.failure = std::move(record);
        stop(std::move(event));
    }

    void publish_finished() override {
        StopEvent event;
        event.kind = StopEvent::Kind::Done;
        stop(std::move(event));
    }

    void publish_kill() override {}
    void broadcast_signal(int) override {}

    void abort(const std::string& message, int exit_code) override {
        StopEvent event;
        event.kind = StopEvent::Kind::Abort;
        event.message = message;
        event.exit_code = exit_code;
        stop(std::move(event));
    }

    void end_round(bool) override {}

  private:
    void stop(StopEvent event) {
        if (m_stopped || !m_handlers.on_stop) return;
        m_stopped = true;
        asio::post(m_io,
                   [on_stop = m_handlers.on_stop, event = std::move(event)] { on_stop(event); });
    }

    asio::io_context& m_io;
    const LaunchContext& m_ctx;
    const bool m_agent_store;
    RoundHandlers m_handlers;
    bool m_stopped = false;
};

}  // namespace

std::unique_ptr<Cluster> make_local_cluster(asio::io_context& io, const LaunchContext& context) {
    return std::make_unique<LocalCluster>(io, context);
}

}  // namespace ddprun
