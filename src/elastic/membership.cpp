// The leader's decisions in an elastic job (see membership.hpp).
#include "ddprun/elastic/membership.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/exit_codes.hpp"
#include "ddprun/config/config.hpp"
#include "ddprun/records/wire.hpp"

namespace ddprun {

namespace {

std::string join_changes(const std::vector<std::string>& changes) {
    std::string text;
    for (const auto& change : changes) text += (text.empty() ? "" : "; ") + change;
    return text;
}

}  // namespace

MembershipPlanner::MembershipPlanner(MembershipLimits limits, int leader, Fingerprint job,
                                     Clock::time_point start)
    : m_limits(limits), m_leader(leader), m_job(std::move(job)), m_forming_since(start) {}

void MembershipPlanner::resume(int round, const std::vector<std::pair<int, NodeInfo>>& members,
                               bool running, const std::vector<int>& others,
                               Clock::time_point now) {
    m_round = round;
    m_members.clear();
    for (const auto& [agent, node] : members) {
        m_agents[agent] = Agent{State::Member, node};
        m_members.push_back(agent);
    }
    for (int agent : others)
        if (!m_agents.contains(agent)) {
            m_agents[agent] = Agent{State::Expected, {}};
            m_spares.insert(agent);
        }
    m_running = running;
    m_stop_sent = false;
    m_forming_since = now;
}

const NodeInfo* MembershipPlanner::info(int agent) const {
    auto it = m_agents.find(agent);
    return it == m_agents.end() ? nullptr : &it->second.info;
}

std::string MembershipPlanner::describe(int agent) const {
    const NodeInfo* node = info(agent);
    return node && !node->host.empty() ? wire::describe_agent(node->host, node->pid)
                                       : fmt::format("agent {}", agent);
}

std::vector<int> MembershipPlanner::waiting() const {
    std::vector<int> ids;
    for (const auto& [id, agent] : m_agents)
        if (agent.state == State::Waiting) ids.push_back(id);
    return ids;
}

std::vector<int> MembershipPlanner::live() const {
    std::vector<int> ids;
    for (const auto& [id, agent] : m_agents)
        if (agent.state != State::Gone) ids.push_back(id);
    return ids;
}

std::vector<MembershipAction> MembershipPlanner::take_actions() {
    return std::exchange(m_actions, {});
}

void MembershipPlanner::join(int agent, const NodeInfo& node, Clock::time_point now) {
    auto answer = [&](MembershipAction::Reply reply, std::string message, int exit_code) {
        MembershipAction action;
        action.kind = MembershipAction::Kind::Answer;
        action.agent = agent;
        action.reply = reply;
        action.message = std::move(message);
        action.exit_code = exit_code;
        m_actions.push_back(std::move(action));
    };
    auto it = m_agents.find(agent);
    if (it != m_agents.end() && it->second.state == State::Expected) {
        // A spare of the lost leader: it comes as a newcomer that was waiting already.
        m_agents.erase(it);
        it = m_agents.end();
    }
    if (it != m_agents.end() && it->second.state == State::Gone) {
        answer(MembershipAction::Reply::Refused,
               "rendezvous: the others gave this node up (it left or stopped answering); start "
               "ddprun again to rejoin the job",
               exit_code::kRendezvous);
        return;
    }
    if (it == m_agents.end()) {
        if (std::string conflict = wire::fingerprint_conflict(m_job, node.fingerprint);
            !conflict.empty()) {
            answer(MembershipAction::Reply::Refused,
                   "rendezvous: this node does not run the same job as node 0: " + conflict,
                   exit_code::kRendezvous);
            return;
        }
        if (m_given_up) {
            answer(MembershipAction::Reply::Refused, "rendezvous: the job has given up",
                   exit_code::kRendezvous);
            return;
        }
        if (m_finishing) {
            answer(MembershipAction::Reply::Finished,
                   "the job is finishing (a node's workers have all succeeded); nothing to join",
                   exit_code::kSuccess);
            return;
        }
        m_agents[agent] = Agent{State::Waiting, node};
        if (m_running) {
            if (static_cast<int>(m_members.size()) < m_limits.max_nnodes) {
                if (!m_spares.contains(agent)) m_changes.push_back(describe(agent) + " joined");
                if (!m_stop_sent) {
                    m_stop_sent = true;
                    MembershipAction stop;
                    stop.kind = MembershipAction::Kind::Stop;
                    stop.round = m_round;
                    stop.message = describe(agent) + " joined";
                    m_actions.push_back(std::move(stop));
                }
            } else {
                m_spares.insert(agent);
                answer(MembershipAction::Reply::Spare, {}, 0);
            }
            return;
        }
        if (m_round >= 0 && !m_spares.contains(agent))
            m_changes.push_back(describe(agent) + " joined");
        try_form(now);
        return;
    }
    // A member whose round stopped, asking for the next one.
    it->second.info = node;
    if (it->second.state == State::Member) {
        it->second.state = State::Waiting;
        if (m_running) round_stopped(now);
    }
    try_form(now);
}

void MembershipPlanner::leave(int agent, const std::string& why, Clock::time_point now) {
    depart(agent, why, false, now);
}

void MembershipPlanner::lost(int agent, const std::string& why, Clock::time_point now) {
    depart(agent, why, true, now);
}

void MembershipPlanner::depart(int agent, const std::string& why, bool lost,
                               Clock::time_point now) {
    auto it = m_agents.find(agent);
    // The leader hosts the store: it never departs while the job goes on.
    if (agent == m_leader || it == m_agents.end() || it->second.state == State::Gone) return;
    const bool member = it->second.state == State::Member;
    it->second.state = State::Gone;
    m_spares.erase(agent);
    std::string change = describe(agent) + " " + why;
    m_departed.push_back(change);
    if (member && m_running) {
        if (!m_stop_sent || m_finishing) {
            m_stop_sent = true;
            MembershipAction stop;
            stop.kind = MembershipAction::Kind::Stop;
            stop.round = m_round;
            stop.message = change;
            // Once the job is finishing its membership is frozen: a node gone now is a
            // failure, as in a fixed-size job.
            stop.failure = m_finishing;
            stop.failure_kind = lost ? FailureKind::NodeLost : FailureKind::Signal;
            const auto rank = std::find(m_members.begin(), m_members.end(), agent);
            stop.agent = static_cast<int>(rank - m_members.begin());
            m_actions.push_back(std::move(stop));
        }
    }
    m_changes.push_back(std::move(change));
    if (!m_running) try_form(now);
}

void MembershipPlanner::round_stopped(Clock::time_point now) {
    if (!m_running) return;
    m_running = false;
    m_forming_since = now;
    try_form(now);
}

void MembershipPlanner::finishing() {
    if (m_finishing) return;
    m_finishing = true;
    // Spares and newcomers have nothing left to join.
    for (auto& [id, agent] : m_agents) {
        if (agent.state != State::Waiting || !m_running) continue;
        agent.state = State::Gone;
        MembershipAction action;
        action.kind = MembershipAction::Kind::Answer;
        action.agent = id;
        action.reply = MembershipAction::Reply::Finished;
        action.message =
            "the job is finishing (a node's workers have all succeeded); nothing to join";
        m_actions.push_back(std::move(action));
    }
}

void MembershipPlanner::tick(Clock::time_point now) {
    try_form(now);
}

std::optional<MembershipPlanner::Clock::time_point> MembershipPlanner::next_deadline() const {
    if (m_running || m_given_up) return std::nullopt;
    auto deadline = m_forming_since + m_limits.join_timeout;
    if (m_round < 0 && m_min_reached)
        deadline = std::min(deadline, *m_min_reached + m_limits.last_call);
    return deadline;
}

void MembershipPlanner::try_form(Clock::time_point now) {
    if (m_running || m_given_up) return;
    const auto waiting_ids = waiting();
    const int waiting_count = static_cast<int>(waiting_ids.size());
    const int live_count = static_cast<int>(live().size());
    const bool leader_waits = m_leader < 0 || std::find(waiting_ids.begin(), waiting_ids.end(),
                                                        m_leader) != waiting_ids.end();
    bool ready = false;
    if (m_round < 0) {
        if (waiting_count < m_limits.min_nnodes) {
            m_min_reached.reset();
        } else {
            if (!m_min_reached) m_min_reached = now;
            ready =
                waiting_count >= m_limits.max_nnodes || now - *m_min_reached >= m_limits.last_call;
        }
    } else {
        ready = waiting_count == live_count && waiting_count >= m_limits.min_nnodes;
    }
    if (ready && leader_waits) {
        form();
        return;
    }
    if (now - m_forming_since < m_limits.join_timeout) return;
    // No round within join_timeout: every waiting agent leaves, saying why.
    m_given_up = true;
    MembershipAction give_up;
    give_up.kind = MembershipAction::Kind::GiveUp;
    give_up.exit_code = exit_code::kRendezvous;
    const std::string nnodes = nnodes_text(m_limits.min_nnodes, m_limits.max_nnodes);
    if (m_round < 0) {
        give_up.message = fmt::format(
            "rendezvous timed out after {}: {} of at least {} nodes joined (--nnodes={})",
            duration_text(m_limits.join_timeout), waiting_count, m_limits.min_nnodes, nnodes);
    } else if (live_count < m_limits.min_nnodes) {
        give_up.message = fmt::format(
            "rendezvous: {} node(s) left of at least {} (--nnodes={}), and no node joined within "
            "{} (join_timeout); lost: {}",
            live_count, m_limits.min_nnodes, nnodes, duration_text(m_limits.join_timeout),
            join_changes(m_departed));
    } else {
        give_up.message = fmt::format(
            "rendezvous: the next round did not form within {} (join_timeout): {} of {} nodes "
            "came back",
            duration_text(m_limits.join_timeout), waiting_count, live_count);
    }
    // Every waiting agent is told, and is gone for the planner.
    give_up.members = waiting_ids;
    for (int id : waiting_ids) m_agents[id].state = State::Gone;
    m_actions.push_back(std::move(give_up));
}

void MembershipPlanner::form() {
    std::vector<int> order;
    if (m_leader >= 0) order.push_back(m_leader);
    for (int id : m_members)
        if (id != m_leader && m_agents[id].state == State::Waiting) order.push_back(id);
    for (int id : waiting())
        if (std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
    const auto placed =
        std::min<std::size_t>(order.size(), static_cast<std::size_t>(m_limits.max_nnodes));
    MembershipAction action;
    action.kind = MembershipAction::Kind::Form;
    action.round = ++m_round;
    action.members.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(placed));
    action.spares.assign(order.begin() + static_cast<std::ptrdiff_t>(placed), order.end());
    for (int id : action.members)
        if (m_spares.erase(id) && m_round > 0)
            m_changes.push_back(describe(id) + " joined (a spare)");
    for (int id : action.spares) m_spares.insert(id);
    action.message = m_round == 0 ? std::string() : join_changes(m_changes);
    for (int id : action.members) m_agents[id].state = State::Member;
    m_members = action.members;
    m_changes.clear();
    m_running = true;
    m_stop_sent = false;
    m_min_reached.reset();
    m_actions.push_back(std::move(action));
}

}  // namespace ddprun
