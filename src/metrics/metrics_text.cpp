// The Prometheus text of an agent's snapshot (metrics.hpp). Families and their
// meaning are documented in docs/metrics.md; names follow Prometheus' conventions
// (a unit suffix, _total on counters).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "ddprun/metrics/metrics.hpp"

namespace ddprun {
namespace {

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escaped(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string number(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", value);
}

class Text {
  public:
    void family(std::string_view name, std::string_view type, std::string_view help) {
        fmt::format_to(std::back_inserter(m_out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                       type);
    }
    // Integers as they are, doubles as Prometheus spells them.
    template <class Number>
    void sample(std::string_view name, Number value, std::string_view labels = {}) {
        std::string text;
        if constexpr (std::is_floating_point_v<Number>)
            text = number(value);
        else
            text = fmt::format("{}", value);
        if (labels.empty())
            fmt::format_to(std::back_inserter(m_out), "{} {}\n", name, text);
        else
            fmt::format_to(std::back_inserter(m_out), "{}{{{}}} {}\n", name, labels, text);
    }
    std::string take() { return std::move(m_out); }

  private:
    std::string m_out;
};

}  // namespace

std::string_view state_name(JobState state) {
    return k_job_states[static_cast<int>(state)];
}

std::string prometheus_text(const AgentSnapshot& s) {
    Text t;
    t.family("ddprun_agent_info", "gauge", "This agent: its job, node and host (always 1).");
    t.sample("ddprun_agent_info", 1,
             fmt::format(R"(run_id="{}",node_rank="{}",host="{}")", escaped(s.run_id), s.node_rank,
                         escaped(s.host)));
    t.family("ddprun_job_state", "gauge", "1 for the state this agent is in, 0 for the others.");
    for (std::size_t i = 0; i < std::size(k_job_states); ++i) {
        const bool current = static_cast<std::size_t>(s.state) == i;
        t.sample("ddprun_job_state", current ? 1 : 0,
                 fmt::format(R"(state="{}")", k_job_states[i]));
    }
    t.family("ddprun_healthy", "gauge",
             "1 while the agent is healthy, 0 once it stops because of a failure (/healthz).");
    t.sample("ddprun_healthy", s.healthy ? 1 : 0);
    t.family("ddprun_round", "gauge", "The round the job is in (0 first, one more per restart).");
    t.sample("ddprun_round", s.round);
    t.family("ddprun_restarts_total", "counter", "Restarts of the job this agent took part in.");
    t.sample("ddprun_restarts_total", s.restarts);
    t.family("ddprun_workers", "gauge", "Workers this node starts in a round.");
    t.sample("ddprun_workers", s.workers);
    t.family("ddprun_workers_alive", "gauge", "This node's workers running now.");
    t.sample("ddprun_workers_alive", s.workers_alive);
    t.family("ddprun_worker_exits_total", "counter", "This node's worker exits, by cause.");
    for (std::string_view cause : k_exit_causes) {
        auto it = s.worker_exits.find(std::string(cause));
        t.sample("ddprun_worker_exits_total",
                 it == s.worker_exits.end() ? std::int64_t{0} : it->second,
                 fmt::format(R"(cause="{}")", cause));
    }
    if (!s.ranks.empty()) {
        t.family("ddprun_rank_beats_total", "counter",
                 "Progress beats of each rank of this node in this round (DDPRUN_PROGRESS_FD).");
        for (const auto& r : s.ranks)
            t.sample("ddprun_rank_beats_total", r.beats, fmt::format(R"(rank="{}")", r.rank));
        t.family("ddprun_rank_last_beat_age_seconds", "gauge",
                 "Seconds since each rank of this node last beat.");
        for (const auto& r : s.ranks)
            t.sample("ddprun_rank_last_beat_age_seconds", r.seconds_since_beat,
                     fmt::format(R"(rank="{}")", r.rank));
        t.family("ddprun_rank_beats_per_second", "gauge",
                 "Each rank's beats (steps) per second over the last 30 s "
                 "(half of a shorter --straggler-window).");
        for (const auto& r : s.ranks) {
            if (r.beats_per_second)
                t.sample("ddprun_rank_beats_per_second", *r.beats_per_second,
                         fmt::format(R"(rank="{}")", r.rank));
        }
    }
    if (s.rendezvous_seconds) {
        t.family("ddprun_rendezvous_seconds", "gauge", "How long this agent's last join took.");
        t.sample("ddprun_rendezvous_seconds", *s.rendezvous_seconds);
    }
    if (s.exit_barrier_seconds) {
        t.family("ddprun_exit_barrier_seconds", "gauge",
                 "How long this agent waited in its last exit barrier.");
        t.sample("ddprun_exit_barrier_seconds", *s.exit_barrier_seconds);
    }
    if (s.store_requests) {
        t.family("ddprun_store_requests_total", "counter",
                 "Calls this agent made on the rendezvous store.");
        t.sample("ddprun_store_requests_total", *s.store_requests);
        t.family("ddprun_store_errors_total", "counter",
                 "Calls on the rendezvous store that failed (a wait that timed out is not one).");
        t.sample("ddprun_store_errors_total", s.store_errors.value_or(0));
    }
    return t.take();
}

}  // namespace ddprun
