// Elastic jobs over a Store (see elastic.hpp): the leader's thread. What it
// decides is MembershipPlanner's; this file only moves events, answers and
// records between it and the store.
#include "ddprun/elastic/elastic.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/logging.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"
#include "ddprun/store/signed_store.hpp"
#include "elastic_shared.hpp"

namespace ddprun {

namespace {

using std::chrono::milliseconds;
using Clock = MembershipPlanner::Clock;
using elastic_shared::answer_key;
using elastic_shared::k_slice;

// How long the leader gives waiting agents to read the job's end before its
// store goes away, and how long a hole in the event queue (an agent killed
// between numbering its event and writing it) is waited for.
constexpr milliseconds k_read_bound{2000};
constexpr milliseconds k_gap_bound{2000};

}  // namespace

// ---------------------------------------------------------------------------
// ElasticLeader

struct ElasticLeader::Impl {
    std::unique_ptr<Store> store;
    Options options;
    Rendezvous rounds;
    MembershipPlanner planner;
    HeartbeatMonitor monitor;
    std::map<int, int> next_answer;  // by agent: the number its next answer gets
    int next_event = 1;
    std::optional<Clock::time_point> gap_since;
    int restarts = 0;  // of the last round formed
    bool closed = false;
    std::atomic<bool> stopping{false};
    std::atomic<bool> abandoned{false};
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;  // run() returned

    Impl(std::unique_ptr<Store> s, Options o)
        : store(std::move(s)),
          options(std::move(o)),
          rounds(*store, options.run_id),
          planner(options.limits, options.leases ? -1 : options.agent, options.me.fingerprint,
                  Clock::now()),
          monitor({}, options.heartbeat_timeout, Clock::now()) {}

    void run();
    void take_over(Clock::time_point now);
    void handle(const std::string& text, Clock::time_point now);
    void skip_gap(Clock::time_point now);
    void check_heartbeats(Clock::time_point now);
    void check_finishing();
    void carry_out(const MembershipAction& action);
    void answer(int agent, wire::ElasticAnswer reply);
    void close(int exit_code, const std::string& message);
    std::string key(std::string_view name) const { return JobKeys(options.run_id).elastic(name); }
    std::string queue(std::string_view name) const {
        return queue_key(options.run_id, options.leases ? options.agent : -1, name);
    }
};

ElasticLeader::ElasticLeader(std::unique_ptr<Store> store, Options options)
    : m_impl(std::make_unique<Impl>(std::move(store), std::move(options))) {}

ElasticLeader::~ElasticLeader() {
    m_impl->stopping = true;
    if (!m_thread.joinable()) return;
    if (m_impl->abandoned) {
        // Blocked in a call to a store that stopped answering; the process exits right after.
        m_thread.detach();
        (void)m_impl.release();
        return;
    }
    m_thread.join();
}

void ElasticLeader::start() {
    m_thread = std::thread([impl = m_impl.get()] {
        try {
            impl->run();
        } catch (const RecordRejected& error) {
            if (impl->options.on_untrusted) impl->options.on_untrusted(error.what());
        } catch (const StoreError& error) {
            spdlog::error("the elastic job's leader lost its store: {}", error.what());
        }
        std::lock_guard lock(impl->mutex);
        impl->finished = true;
        impl->done.notify_all();
    });
}

void ElasticLeader::wait_closed(std::chrono::milliseconds bound) {
    std::unique_lock lock(m_impl->mutex);
    m_impl->done.wait_for(lock, bound, [this] { return m_impl->finished; });
}

bool ElasticLeader::stop_within(std::chrono::milliseconds bound) {
    m_impl->stopping = true;
    if (!m_thread.joinable()) return true;
    std::unique_lock lock(m_impl->mutex);
    return m_impl->done.wait_for(lock, bound, [this] { return m_impl->finished; });
}

void ElasticLeader::abandon() {
    m_impl->abandoned = true;
}

void ElasticLeader::Impl::run() {
    // Agents of a fixed-size job that reach this store read node 0's record there and
    // learn that the node counts differ.
    NodeInfo zero = options.me;
    zero.node_rank = 0;
    store->set(JobKeys(options.run_id).round(0, "zero"), to_json(zero));
    if (options.lost_leader >= 0) take_over(Clock::now());
    for (const auto& action : planner.take_actions()) carry_out(action);
    const auto interval = std::max<milliseconds>(options.heartbeat_timeout / 5, milliseconds(50));
    auto next_check = Clock::now() + interval;
    while (!stopping && !closed) {
        auto now = Clock::now();
        auto until = next_check;
        if (auto deadline = planner.next_deadline()) until = std::min(until, *deadline);
        auto slice = std::clamp(std::chrono::duration_cast<milliseconds>(until - now),
                                milliseconds(1), k_slice);
        const std::string event_key = queue(fmt::format("event/{}", next_event));
        std::optional<std::string> text;
        if (wait_for(*store, {event_key}, slice)) {
            try {
                text = store->get(event_key);
            } catch (const RecordRejected&) {
                ++next_event;  // warned by the store: a forged event is skipped, never acted on
                gap_since.reset();
                continue;
            }
        }
        now = Clock::now();
        if (text) {
            ++next_event;
            gap_since.reset();
            handle(*text, now);
        } else {
            skip_gap(now);
        }
        if (now >= next_check) {
            check_heartbeats(now);
            check_finishing();
            next_check = now + interval;
        }
        planner.tick(now);
        for (const auto& action : planner.take_actions()) carry_out(action);
    }
}

void ElasticLeader::Impl::skip_gap(Clock::time_point now) {
    if (store->add(queue("events"), 0) < next_event) {
        gap_since.reset();
        return;
    }
    if (!gap_since) gap_since = now;
    if (now - *gap_since < k_gap_bound) return;
    spdlog::warn("elastic leader: event {} was numbered but never written; skipping it",
                 next_event);
    ++next_event;
    gap_since.reset();
}

void ElasticLeader::Impl::handle(const std::string& text, Clock::time_point now) {
    auto event = wire::parse_event(text);
    if (!event) {
        spdlog::warn(
            "{}", wire::malformed(queue(fmt::format("event/{}", next_event - 1)), event.error()));
        return;
    }
    switch (event->kind) {
        case wire::ElasticEvent::Kind::Join:
            next_answer[event->agent] = event->answer;
            if (!planner.info(event->agent) && event->agent != options.agent) {
                check_finishing();  // a newcomer must not stop a round that is finishing
                monitor.observe(event->agent, std::nullopt, now);
            }
            planner.join(event->agent, event->node, now);
            break;
        case wire::ElasticEvent::Kind::Leave:
            monitor.forget(event->agent);
            planner.leave(event->agent, fmt::format("left ({})", event->message), now);
            break;
        case wire::ElasticEvent::Kind::Lost:
            planner.lost(event->agent, event->message, now);
            break;
        case wire::ElasticEvent::Kind::Close:
            if (event->agent == options.agent) close(event->exit_code, event->message);
            break;
    }
}

// A successor (etcd): the last round the lost leader formed, stopped now without it;
// its members that are alive come back through the new queue.
void ElasticLeader::Impl::take_over(Clock::time_point now) {
    const std::string state_key = key("state");
    if (!store->check({state_key})) return;  // it formed no round: every agent asks again
    auto state = wire::parse_state(store->get(state_key));
    if (!state) {
        spdlog::warn("{}", wire::malformed(state_key, state.error()));
        return;
    }
    restarts = state->restarts;
    const bool running = !store->check({rounds.key(state->round, "stop")});
    std::vector<int> others;
    for (int agent : options.alive)
        if (std::none_of(state->members.begin(), state->members.end(),
                         [agent](const auto& member) { return member.first == agent; }))
            others.push_back(agent);
    planner.resume(state->round, state->members, running, others, now);
    // Gone: they left (their key says why) or their lease expired.
    auto depart = [&](int agent, const std::string& suffix) {
        const std::string left_key = key(fmt::format("left/{}", agent));
        if (store->check({left_key})) {
            planner.leave(agent, fmt::format("left ({})", store->get(left_key)) + suffix, now);
            return;
        }
        planner.lost(agent, lease_expired(options.heartbeat_timeout) + suffix, now);
    };
    depart(options.lost_leader, "; it led the job");
    for (const auto& [agent, node] : state->members)
        if (std::find(options.alive.begin(), options.alive.end(), agent) == options.alive.end())
            depart(agent, "");
}

void ElasticLeader::Impl::check_heartbeats(Clock::time_point now) {
    if (options.leases) return;  // losses come as events
    for (int agent : planner.live()) {
        if (agent == options.agent) continue;
        const std::string hb_key = key(fmt::format("hb/{}", agent));
        // Missing or rejected (warned by the store): no beat; the agent's next replaces it.
        auto beat = read_record(*store, hb_key);
        monitor.observe(agent, beat ? to_integer(*beat) : std::nullopt, now);
    }
    for (int agent : monitor.stale(now)) {
        monitor.forget(agent);
        planner.lost(agent,
                     fmt::format("stopped answering (no heartbeat for {}: killed, frozen or "
                                 "cut off)",
                                 duration_text(options.heartbeat_timeout)),
                     now);
    }
}

// The count carries no MAC: a forged add only makes the leader stop re-forming the
// round (it waits for the nodes to finish); the round's Done stop is written by
// publish_finished() alone, which checks every node's signed record with a secret.
void ElasticLeader::Impl::check_finishing() {
    if (planner.running() && store->add(rounds.key(planner.round(), "finished"), 0) > 0)
        planner.finishing();
}

void ElasticLeader::Impl::answer(int agent, wire::ElasticAnswer reply) {
    store->set(answer_key(options.run_id, agent, next_answer[agent]++), wire::answer_json(reply));
}

void ElasticLeader::Impl::carry_out(const MembershipAction& action) {
    using Kind = MembershipAction::Kind;
    using Answer = wire::ElasticAnswer;
    switch (action.kind) {
        case Kind::Form: {
            if (action.round > 0) {
                // A worker's failure (or a hang) used a restart; a membership change did not.
                const std::string stop_key = rounds.key(action.round - 1, "stop");
                if (store->check({stop_key})) {
                    StopEvent stop =
                        wire::parse_stop(store->get(stop_key), stop_key, options.run_id);
                    if (stop.kind == StopEvent::Kind::Failure &&
                        (stop.failure.kind == FailureKind::Worker ||
                         stop.failure.kind == FailureKind::Hang))
                        ++restarts;
                }
            }
            std::vector<NodeInfo> nodes;
            wire::ElasticState state{action.round, restarts, {}};
            for (int agent : action.members) {
                nodes.push_back(*planner.info(agent));
                nodes.back().node_rank = static_cast<int>(nodes.size()) - 1;
                state.members.emplace_back(agent, nodes.back());
            }
            // For a successor, should this leader be lost (etcd).
            if (options.leases) store->set(key("state"), wire::state_json(state));
            store->compare_set(rounds.key(action.round, "result"), "",
                               wire::membership_json(action.round, nodes, options.me.fingerprint,
                                                     restarts, action.message));
            for (int agent : action.members)
                answer(agent, Answer{Answer::Kind::Round, action.round, {}, 0});
            for (int agent : action.spares)
                answer(agent, Answer{Answer::Kind::Spare, action.round, {}, 0});
            return;
        }
        case Kind::Stop: {
            if (!action.failure) {
                store->compare_set(rounds.key(action.round, "stop"), "",
                                   wire::reform_stop_json(action.message, options.run_id));
                return;
            }
            FailureRecord record;
            record.kind = action.failure_kind;
            record.node_rank = action.agent;
            record.exit_code = exit_code::kRendezvous;
            record.message = fmt::format("node {}: {}, while the job was finishing", action.agent,
                                         action.message);
            rounds.publish_failure(action.round, record);
            return;
        }
        case Kind::Answer: {
            Answer reply;
            reply.kind = action.reply == MembershipAction::Reply::Spare ? Answer::Kind::Spare
                         : action.reply == MembershipAction::Reply::Finished
                             ? Answer::Kind::Finished
                             : Answer::Kind::Refused;
            reply.round = std::max(planner.round(), 0);
            reply.message = action.message;
            reply.exit_code = action.exit_code;
            answer(action.agent, reply);
            return;
        }
        case Kind::GiveUp:
            for (int agent : action.members)
                answer(agent, Answer{Answer::Kind::Refused, 0, action.message, action.exit_code});
            return;
    }
}

void ElasticLeader::Impl::close(int exit_code, const std::string& message) {
    closed = true;
    using Answer = wire::ElasticAnswer;
    const Answer end = exit_code == 0 ? Answer{Answer::Kind::Finished, 0,
                                               "the job has finished; nothing to join", 0}
                                      : Answer{Answer::Kind::Refused, 0, message, exit_code};
    // Whoever comes later reads this instead of waiting for an answer.
    store->set(key("closed"), wire::answer_json(end));
    std::vector<std::string> reads;
    for (int agent : planner.waiting()) {
        if (agent != options.agent)
            reads.push_back(answer_key(options.run_id, agent, next_answer[agent]) + "/read");
        answer(agent, end);
    }
    if (reads.empty()) return;
    wait_for(*store, reads, k_read_bound);
}

}  // namespace ddprun
