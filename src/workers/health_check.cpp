// --health-check (see health_check.hpp): one run of the node's check on the
// agent's loop. The check is an owned child (process_tree.hpp): the agent's
// reaper keeps its exit status here, and its pid stays this object's to kill
// until it has ended, at its timeout, or when the agent stops. Each run has a
// number: a handler of an earlier run still queued on the loop does nothing.
#include "ddprun/workers/health_check.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ddprun/base/child_process.hpp"
#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/process_tree.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/plan/rank_plan.hpp"

namespace ddprun {
namespace {

// What is kept of the output: its end, where the verdict is.
constexpr std::size_t k_kept_bytes = 64 * 1024;
constexpr std::size_t k_line_bytes = 300;

}  // namespace

NodePlan node_plan(const LaunchContext& ctx) {
    NodePlan plan;
    plan.nproc = ctx.nproc;
    plan.run_id = ctx.config.rdzv_id;
    RoundInfo round;
    round.nproc_per_node = {ctx.nproc};
    std::vector<std::string> seen;
    for (const WorkerSpec& worker :
         plan_node(ctx.config, ctx.resources, round, ctx.env, ctx.scratch_dir, ctx.bindings)) {
        if (!worker.sets_devices) continue;
        std::string_view list = worker.devices;
        while (!list.empty()) {
            const std::size_t comma = list.find(',');
            std::string device(list.substr(0, comma));
            if (std::find(seen.begin(), seen.end(), device) == seen.end())
                seen.push_back(std::move(device));
            list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
        }
    }
    for (const std::string& device : seen)
        plan.devices += (plan.devices.empty() ? "" : ",") + device;
    return plan;
}

std::vector<std::pair<std::string, std::string>> health_check_env(const NodePlan& plan) {
    std::vector<std::pair<std::string, std::string>> env;
    if (!plan.devices.empty()) env.emplace_back("CUDA_VISIBLE_DEVICES", plan.devices);
    env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(plan.nproc));
    if (plan.node_rank) env.emplace_back("GROUP_RANK", std::to_string(*plan.node_rank));
    if (plan.ranks)
        env.emplace_back("DDPRUN_RANKS",
                         plan.ranks->first == plan.ranks->second
                             ? std::to_string(plan.ranks->first)
                             : fmt::format("{}-{}", plan.ranks->first, plan.ranks->second));
    env.emplace_back("TORCHELASTIC_RESTART_COUNT", std::to_string(plan.restart_count));
    env.emplace_back("TORCHELASTIC_RUN_ID", plan.run_id);
    return env;
}

std::string describe_check_end(const HealthCheckResult& result, std::chrono::milliseconds timeout) {
    switch (result.kind) {
        case HealthCheckResult::Kind::Healthy:
            return "passed";
        case HealthCheckResult::Kind::Failed:
            if (WIFSIGNALED(result.status))
                return "was killed by " + signal_name(WTERMSIG(result.status));
            return fmt::format("exited with {}", WEXITSTATUS(result.status));
        case HealthCheckResult::Kind::TimedOut:
            return fmt::format("did not finish within {} (--health-check-timeout): killed it",
                               duration_text(timeout));
        case HealthCheckResult::Kind::NotStarted:
            break;
    }
    return "could not start: " + result.error;
}

std::vector<std::string> last_lines(std::string_view output, std::size_t count) {
    std::vector<std::string> lines;
    while (!output.empty() && lines.size() < count) {
        // The last line, without its terminator; a progress bar's '\r' ends one too.
        while (!output.empty() && (output.back() == '\n' || output.back() == '\r'))
            output.remove_suffix(1);
        const std::size_t start = output.find_last_of("\r\n");
        std::string_view line = start == std::string_view::npos ? output : output.substr(start + 1);
        output.remove_suffix(line.size());
        const std::size_t first = line.find_first_not_of(" \t");
        if (first == std::string_view::npos) continue;
        line.remove_prefix(first);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        std::string kept(line.substr(0, k_line_bytes));
        if (line.size() > k_line_bytes) kept += "...";
        lines.insert(lines.begin(), std::move(kept));
    }
    return lines;
}

void HealthCheck::start(const Environment& env, Done done) {
    m_done = std::move(done);
    m_text.clear();
    m_started = std::chrono::steady_clock::now();
    auto fail = [this](std::string why) {
        HealthCheckResult result;
        result.kind = HealthCheckResult::Kind::NotStarted;
        result.error = std::move(why);
        finish(std::move(result));
    };
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) return fail(fmt::format("pipe2: {}", std::strerror(errno)));
    UniqueFd read_end(ends[0]);
    UniqueFd write_end(ends[1]);
    UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!null) return fail(fmt::format("/dev/null: {}", std::strerror(errno)));

    std::vector<std::string> storage;
    for (const auto& [name, value] : env) storage.push_back(name + "=" + value);
    std::vector<const char*> envp;
    for (const std::string& item : storage) envp.push_back(item.c_str());
    envp.push_back(nullptr);
    const char* argv[] = {"/bin/sh", "-c", m_command.c_str(), nullptr};

    ChildSetup setup;
    setup.what = "the health check";
    setup.in = null.get();
    setup.out = write_end.get();
    setup.err = write_end.get();
    std::error_code error;
    m_pid = owned_children::start([&]() -> pid_t {
        auto pid = launch_process("/bin/sh", argv, envp.data(), setup);
        if (!pid) error = pid.error();
        return pid ? *pid : -1;
    });
    if (m_pid < 0) return fail(fmt::format("/bin/sh: {}", error.message()));
    ::fcntl(read_end.get(), F_SETFL, O_NONBLOCK);  // read as far as it goes, never waited on
    m_output.emplace(m_io, read_end.release());
    read();
    m_timer.expires_after(m_timeout);
    m_timer.async_wait([this, check = m_check](const boost::system::error_code& ec) {
        if (ec || check != m_check) return;
        drain();
        owned_children::kill(m_pid, SIGKILL);
        owned_children::release(m_pid);  // the reaper takes it as it ends
        HealthCheckResult result;
        result.kind = HealthCheckResult::Kind::TimedOut;
        finish(std::move(result));
    });
}

// Waits for output and takes it as it comes (the read itself is always here, so
// that reaped() can take the rest without a read of the loop's in between).
void HealthCheck::read() {
    m_output->async_wait(boost::asio::posix::descriptor_base::wait_read,
                         [this, check = m_check](const boost::system::error_code& ec) {
                             if (ec || check != m_check) return;  // it ended meanwhile
                             if (drain()) read();
                         });
}

bool HealthCheck::drain() {
    const ReadEnd end = read_chunks(m_output->native_handle(), [this](std::string_view chunk) {
        m_text.append(chunk);
        if (m_text.size() > k_kept_bytes) m_text.erase(0, m_text.size() - k_kept_bytes);
        return true;
    });
    return end == ReadEnd::Drained;
}

void HealthCheck::reaped() {
    if (m_pid <= 0) return;
    auto status = owned_children::exit_status(m_pid);
    if (!status) return;
    // What it left in its group (a daemon, a stuck child holding the pipe) goes with it: the
    // group lives on while it has members, so its id is not another's yet.
    ::kill(-m_pid, SIGKILL);
    owned_children::release(m_pid);
    // Whatever it wrote before it ended is in the pipe (where a process of another group
    // still holds the pipe, what it wrote so far).
    drain();
    HealthCheckResult result;
    result.kind = WIFEXITED(*status) && WEXITSTATUS(*status) == 0 ? HealthCheckResult::Kind::Healthy
                                                                  : HealthCheckResult::Kind::Failed;
    result.status = *status;
    finish(std::move(result));
}

void HealthCheck::finish(HealthCheckResult result) {
    ++m_check;  // a wait or a timer of this run still queued on the loop finds it over
    m_pid = -1;
    m_timer.cancel();
    m_output.reset();
    result.took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - m_started);
    result.last_lines = last_lines(m_text, k_lines);
    // Always on the loop, never inside start(): the caller's state is settled by then.
    boost::asio::post(m_io, [done = std::move(m_done), result = std::move(result)] {
        if (done) done(result);
    });
    m_done = nullptr;
}

void HealthCheck::cancel() {
    if (m_pid > 0) {
        owned_children::kill(m_pid, SIGKILL);
        owned_children::release(m_pid);
    }
    ++m_check;
    m_pid = -1;
    m_timer.cancel();
    m_output.reset();
    m_done = nullptr;
}

}  // namespace ddprun
