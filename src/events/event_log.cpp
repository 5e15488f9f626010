// The event log's line format and its one writer (event_log.hpp). The
// builders only turn what the agent knows into fields; docs/events.md says
// what each field means, and the unit tests hold the two together.
#include "ddprun/events/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <numeric>

#include <fmt/format.h>

#include "ddprun/base/logging.hpp"
#include "ddprun/base/signals.hpp"

#ifndef DDPRUN_VERSION
#define DDPRUN_VERSION "unknown"
#endif

namespace ddprun {
namespace {

double in_seconds(std::chrono::nanoseconds duration) {
    return std::chrono::duration<double>(duration).count();
}

double in_seconds(std::chrono::milliseconds duration) {
    return std::chrono::duration<double>(duration).count();
}

// A signal by name ("SIGKILL"), or null for none.
EventFields signal_field(int signal) {
    return signal == 0 ? EventFields(nullptr) : EventFields(signal_name(signal));
}

// What the kernel's OOM killer's kill said ("killed by ... (memory cgroup
// ...)"), or null when it did not kill this worker or it could not be told.
EventFields oom_field(const std::string& oom) {
    return oom.empty() ? EventFields(nullptr) : EventFields(oom);
}

std::string_view stop_kind(StopEvent::Kind kind) {
    switch (kind) {
        case StopEvent::Kind::Done:
            return "done";
        case StopEvent::Kind::Failure:
            return "failure";
        case StopEvent::Kind::Abort:
            return "abort";
        case StopEvent::Kind::Reform:
            return "reform";
        case StopEvent::Kind::Timeout:
            return "timeout";
        case StopEvent::Kind::StoreLost:
            return "store_lost";
    }
    return "unknown";
}

}  // namespace

std::string format_event_time(EventTime time) {
    using namespace std::chrono;
    const auto since_epoch = duration_cast<nanoseconds>(time.time_since_epoch());
    const auto whole = floor<seconds>(since_epoch);
    const std::time_t secs = static_cast<std::time_t>(whole.count());
    std::tm utc{};
    ::gmtime_r(&secs, &utc);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &utc);
    return fmt::format("{}.{:09d}Z", date, (since_epoch - whole).count());
}

std::string format_event_line(EventTime time, const EventNode& node, std::string_view event,
                              const EventFields& fields) {
    EventFields line;
    line["time"] = format_event_time(time);
    line["schema"] = k_event_schema;
    line["event"] = event;
    line["node_rank"] = node.node_rank;
    line["host"] = node.host;
    if (fields.is_object())
        for (const auto& [key, value] : fields.items()) line[key] = value;
    // Replace, not throw, on invalid UTF-8 (a program argument, a worker's message).
    return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

EventFields failure_fields(const FailureRecord& record) {
    EventFields cause;
    cause["kind"] = to_string(record.kind);
    cause["node_rank"] = record.node_rank;
    cause["host"] = record.host;
    cause["rank"] = record.rank;
    cause["local_rank"] = record.local_rank;
    cause["pid"] = record.pid;
    cause["exit_code"] = record.exit_code;
    cause["signal"] = signal_field(record.signal);
    cause["time"] = format_event_time(EventTime(std::chrono::milliseconds(record.time_ms)));
    cause["message"] = record.message;
    cause["oom"] = oom_field(record.oom);
    return cause;
}

EventFields job_start_event(const LaunchContext& context, std::int64_t agent_pid) {
    const LaunchConfig& c = context.config;
    EventFields config;
    config["nnodes"] = c.nnodes;
    config["min_nnodes"] = c.min_nnodes;
    config["nproc_per_node"] = context.nproc;
    config["node_rank"] = c.node_rank ? EventFields(*c.node_rank) : EventFields(nullptr);
    config["rdzv_backend"] = c.rdzv_backend;
    config["rdzv_endpoint"] = c.rdzv_endpoint;
    config["rdzv_id"] = c.rdzv_id;
    config["master_addr"] = c.master_addr;
    config["master_port"] = c.master_port ? EventFields(*c.master_port) : EventFields(nullptr);
    config["max_restarts"] = c.max_restarts;
    config["role"] = c.role;
    config["program"] = c.program;
    config["args"] = c.args;
    config["log_dir"] = c.log_dir;
    config["shutdown_timeout_s"] = in_seconds(c.shutdown_timeout);
    config["hang_timeout_s"] = in_seconds(c.hang_timeout);

    EventFields sources = EventFields::object();
    for (const auto& [name, value] : c.value_sources) sources[name] = value;

    EventFields fields;
    fields["ddprun_version"] = DDPRUN_VERSION;
    fields["agent_pid"] = agent_pid;
    fields["config"] = std::move(config);
    fields["scheduler"] = c.scheduler;
    fields["value_sources"] = std::move(sources);
    fields["devices"] = context.resources.devices;
    return fields;
}

EventFields round_event(const RoundInfo& info) {
    EventFields fields;
    fields["round"] = info.round;
    fields["restart_count"] = info.restart_count;
    fields["nnodes"] = info.nproc_per_node.size();
    fields["nproc_per_node"] = info.nproc_per_node;
    fields["world_size"] =
        std::accumulate(info.nproc_per_node.begin(), info.nproc_per_node.end(), 0);
    fields["master_addr"] = info.master_addr;
    fields["master_port"] = info.master_port;
    fields["change"] = info.change;
    return fields;
}

EventFields worker_start_event(int round, const WorkerGroup::Running& worker) {
    EventFields fields;
    fields["round"] = round;
    fields["rank"] = worker.rank;
    fields["local_rank"] = worker.local_rank;
    fields["pid"] = worker.pid;
    fields["devices"] = worker.devices;
    return fields;
}

EventFields worker_end_event(int round, const WorkerOutcome& outcome,
                             std::chrono::nanoseconds duration) {
    EventFields fields;
    fields["round"] = round;
    fields["rank"] = outcome.rank;
    fields["local_rank"] = outcome.local_rank;
    fields["pid"] = outcome.pid;
    fields["exit_code"] = exit_code_of(outcome);
    fields["signal"] = signal_field(outcome.signal);
    fields["failed"] = outcome.failed();
    fields["stopped_by_ddprun"] = outcome.stopped_by_ddprun;
    fields["duration_s"] = in_seconds(duration);
    fields["error_message"] = outcome.error_message;
    fields["oom"] = oom_field(outcome.oom);
    return fields;
}

EventFields failure_event(int round, const FailureRecord& record) {
    EventFields fields;
    fields["round"] = round;
    fields["root_cause"] = failure_fields(record);
    return fields;
}

EventFields round_stop_event(int round, const StopEvent& stop, int node_rank) {
    const bool failure = stop.kind == StopEvent::Kind::Failure;
    EventFields fields;
    fields["round"] = round;
    fields["kind"] = stop_kind(stop.kind);
    fields["exit_code"] = stop.exit_code;
    fields["message"] = failure ? stop.failure.message : stop.message;
    fields["root_cause"] = failure ? failure_fields(stop.failure) : EventFields(nullptr);
    fields["from_other_node"] = failure && stop.failure.node_rank != node_rank;
    return fields;
}

EventFields progress_event(int round, bool made_progress, int restarts_without_progress,
                           int max_no_progress_restarts) {
    EventFields fields;
    fields["round"] = round;
    fields["made_progress"] = made_progress;
    fields["restarts_without_progress"] = restarts_without_progress;
    fields["max_no_progress_restarts"] = max_no_progress_restarts;
    fields["stopping"] = restarts_without_progress > max_no_progress_restarts;
    return fields;
}

EventFields straggler_event(int round, const Straggler& straggler) {
    EventFields fields;
    fields["round"] = round;
    fields["rank"] = straggler.rank;
    fields["straggler_node_rank"] = straggler.node_rank;
    fields["steps_per_second"] = straggler.rate;
    fields["median_steps_per_second"] = straggler.median;
    return fields;
}

EventFields health_check_event(int round, bool healthy, std::string_view outcome,
                               std::optional<int> exit_code, std::chrono::milliseconds took,
                               const std::vector<std::string>& lines) {
    EventFields fields;
    fields["round"] = round;
    fields["healthy"] = healthy;
    fields["outcome"] = outcome;
    if (exit_code)
        fields["exit_code"] = *exit_code;
    else
        fields["exit_code"] = nullptr;
    fields["seconds"] = static_cast<double>(took.count()) / 1000.0;
    fields["lines"] = lines;
    return fields;
}

EventFields restart_event(int round, int restart, int max_restarts, std::string_view reason) {
    EventFields fields;
    fields["round"] = round;
    fields["restart"] = restart;
    fields["max_restarts"] = max_restarts;
    fields["reason"] = reason;
    return fields;
}

EventFields membership_change_event(int round, std::string_view change) {
    EventFields fields;
    fields["round"] = round;
    fields["change"] = change;
    return fields;
}

EventFields hang_event(int round, const FailureRecord& cause) {
    EventFields fields;
    fields["round"] = round;
    fields["root_cause"] = failure_fields(cause);
    return fields;
}

EventFields exit_barrier_event(int round, std::optional<std::chrono::nanoseconds> waited) {
    EventFields fields;
    fields["round"] = round;
    fields["state"] = waited ? "left" : "entered";
    fields["waited_s"] = waited ? EventFields(in_seconds(*waited)) : EventFields(nullptr);
    return fields;
}

EventFields job_end_event(int exit_code, int rounds, int restarts,
                          const std::optional<StopEvent>& stop) {
    const bool failure = stop && stop->kind == StopEvent::Kind::Failure;
    EventFields fields;
    fields["exit_code"] = exit_code;
    fields["rounds"] = rounds;
    fields["restarts"] = restarts;
    fields["root_cause"] = failure ? failure_fields(stop->failure) : EventFields(nullptr);
    fields["message"] = !stop ? std::string() : failure ? stop->failure.message : stop->message;
    return fields;
}

void EventLog::open(const std::string& path, std::string host) {
    m_path = path;
    m_node.host = std::move(host);
    m_fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!m_fd)
        spdlog::warn("cannot open the event log {}: {}; the job goes on without it", path,
                     std::strerror(errno));
}

void EventLog::write_line(std::string_view event, const EventFields& fields) {
    const std::string line =
        format_event_line(std::chrono::system_clock::now(), m_node, event, fields);
    // One write(2) per line: O_APPEND keeps a line whole even beside another writer.
    ssize_t written;
    do {
        written = ::write(m_fd.get(), line.data(), line.size());
    } while (written < 0 && errno == EINTR);
    if (written == static_cast<ssize_t>(line.size())) return;
    const std::string why =
        written < 0 ? std::strerror(errno)
                    : fmt::format("only {} of {} bytes written (disk full?)", written, line.size());
    spdlog::warn("cannot write the event log {}: {}; the job goes on without it", m_path, why);
    m_fd.reset();
}

}  // namespace ddprun
