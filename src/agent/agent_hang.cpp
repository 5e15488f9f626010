// Hangs (see agent_impl.hpp): the agent looks at its workers' progress beats a
// few times per --hang-timeout; a rank silent for longer is published as the
// round's failure. Whichever node's hang stops the round, every node then
//  1. shares its ranks' progress through the cluster, and prints the job-wide
//     picture in one line;
//  2. captures its workers' native stacks (eu-stack or gdb, stacks.hpp) while
//     they are still stuck, then sends each Python worker SIGABRT, on which the
//     faulthandler ddprun enabled prints every thread's traceback to its stderr;
//  3. stops what is left as for any failure (SIGTERM, the grace, SIGKILL).
// After the round the stacks go to --log_dir and the summary shows the top
// frames; --max_restarts applies as for a worker's failure.
#include <signal.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>

#include "agent_impl.hpp"
#include "ddprun/base/clock.hpp"
#include "ddprun/base/logging.hpp"

namespace ddprun {

namespace {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

// The native stacks of a node's workers are taken in parallel within this bound.
constexpr milliseconds k_native_bound{3000};
// How long a Python worker gets to print its tracebacks after SIGABRT.
constexpr milliseconds k_dump_bound{2000};
// How long a node waits for the others' progress at a hang.
constexpr milliseconds k_share_bound{1500};

// How often the beats are looked at: a tenth of the timeout, within [50 ms, 500 ms],
// so that a hang is seen within the timeout plus at most half a second.
milliseconds look_period(const LaunchConfig& config) {
    return std::clamp(config.hang_timeout / 10, milliseconds(50), milliseconds(500));
}

}  // namespace

HangLimits Agent::Impl::limits() const {
    return HangLimits{ctx.config.hang_timeout, ctx.config.hang_timeout_first};
}

void Agent::Impl::watch_hangs() {
    if (ctx.config.hang_timeout.count() == 0) return;
    std::vector<int> ranks;
    for (const auto& w : workers.running_workers()) ranks.push_back(w.rank);
    hang_monitor = HangMonitor(limits(), ranks, HangMonitor::Clock::now(), node_rank);
    hang_monitor.set_rate_window(rate_window());
    hang_timer = std::make_unique<asio::steady_timer>(io);
    look_for_hang();
}

void Agent::Impl::look_for_hang() {
    if (phase != Phase::Running) return;
    const auto now = HangMonitor::Clock::now();
    for (auto& beat : workers.read_beats())
        hang_monitor.beat(beat.rank, now, beat.label, beat.lines);
    const auto progress = hang_monitor.progress(now);
    if (auto first = first_to_stop(progress)) {
        // The round's failure: the stop comes back to every node, this one too, and
        // begins the capture there (begin_hang_stop).
        FailureRecord record;
        record.kind = FailureKind::Hang;
        record.node_rank = node_rank;
        record.host = ctx.host;
        record.rank = first->rank;
        for (const auto& w : workers.running_workers())
            if (w.rank == record.rank) {
                record.local_rank = w.local_rank;
                record.pid = w.pid;
            }
        record.exit_code = exit_code::kHang;
        record.time_ms = wall_ms();
        std::vector<RankProgress> others;
        for (const auto& r : progress)
            if (r.hung && r.rank != first->rank) others.push_back(r);
        record.message = describe_first_stop(*first, limits()) +
                         (others.empty() ? std::string() : "; also: " + describe_progress(others));
        spdlog::debug("hang seen here: {}", record.message);
        publish_failure(std::move(record));
        return;  // no more looks this round
    }
    hang_timer->expires_after(look_period(ctx.config));
    hang_timer->async_wait([this](boost::system::error_code ec) {
        if (!ec) look_for_hang();
    });
}

void Agent::Impl::begin_hang_stop() {
    if (hang_timer) hang_timer->cancel();
    phase = Phase::Stopping;  // exits from here on are ddprun's doing, not failures
    events.write("hang", [&] { return hang_event(round, stop_event->failure); });
    hang_stop = std::make_unique<HangStop>();
    hang_stop->workers = workers.running_workers();
    // Frozen first, on every node, as the stop reaches it: a worker killed for its
    // tracebacks on one node must not wake the others from the collective they are
    // stuck in (their all_reduce would fail, and their stacks be lost). Each node
    // shares its progress only once its workers are frozen, and kills only once it
    // read every node's: a barrier.
    for (const auto& w : hang_stop->workers) workers.signal_worker(w.pid, SIGSTOP);
    hang_stop->share_bound = std::make_unique<asio::steady_timer>(io, k_share_bound + 500ms);
    hang_stop->share_bound->async_wait([this](boost::system::error_code ec) {
        if (!ec) progress_shared({});  // a store that does not answer: the picture is this node's
    });
    cluster->share_progress(
        hang_monitor.progress(HangMonitor::Clock::now()), k_share_bound,
        [this](std::vector<RankProgress> all) { progress_shared(std::move(all)); });
    std::vector<pid_t> pids;
    for (const auto& w : hang_stop->workers) pids.push_back(w.pid);
    // Blocking (a tool per worker, bounded): off the loop, which keeps serving signals.
    hang_stop->tool = native_stack_tool();  // one PATH search: the stacks file names it
    hang_stop->capture = std::thread([this, pids, tool = hang_stop->tool] {
        auto stacks = capture_native_stacks(pids, k_native_bound, tool);
        asio::post(io, [this, stacks = std::move(stacks)]() mutable {
            stacks_captured(std::move(stacks));
        });
    });
}

void Agent::Impl::progress_shared(std::vector<RankProgress> all) {
    if (!hang_stop || hang_stop->shared) return;
    hang_stop->shared = true;
    hang_stop->share_bound->cancel();
    if (all.empty()) all = hang_monitor.progress(HangMonitor::Clock::now());
    // One line on every node: who stopped first, then every rank.
    auto first = first_to_stop(all);
    spdlog::error("hang: {}every rank: {}",
                  first ? describe_first_stop(*first, limits()) + "; " : std::string(),
                  describe_progress(all));
    hang_stop->progress = std::move(all);
    dump_tracebacks();
}

void Agent::Impl::stacks_captured(std::vector<NativeStack> stacks) {
    if (!hang_stop) return;
    if (hang_stop->capture.joinable()) hang_stop->capture.join();
    hang_stop->native = std::move(stacks);
    hang_stop->captured = true;
    dump_tracebacks();
}

void Agent::Impl::dump_tracebacks() {
    if (!hang_stop->captured || !hang_stop->shared) return;
    if (phase != Phase::Stopping) return;  // killed meanwhile: nothing left to ask
    for (const auto& w : hang_stop->workers) {
        if (!is_python(w.pid)) continue;
        (void)disable_core_dumps(w.pid);  // the dump is the point, not a core file
        // Pending until the SIGCONT below, on the main thread: the thread that runs
        // the program then dumps at once, still where it waited, and its tracebacks
        // are "Current thread". Sent to the process, any thread could take it, and
        // the main thread run on meanwhile: out of a collective whose peer another
        // node has just killed, its frames unwinding as they are printed.
        workers.signal_worker(w.pid, SIGABRT, WorkerGroup::Target::MainThread);
        hang_stop->dumping.push_back(w.pid);
    }
    for (const auto& w : hang_stop->workers) workers.signal_worker(w.pid, SIGCONT);
    if (hang_stop->dumping.empty()) return end_hang_stop();
    hang_stop->dump_bound = std::make_unique<asio::steady_timer>(io, k_dump_bound);
    hang_stop->dump_bound->async_wait([this](boost::system::error_code ec) {
        if (!ec) end_hang_stop();
    });
}

void Agent::Impl::dump_exited(pid_t pid) {
    if (!hang_stop) return;
    auto& dumping = hang_stop->dumping;
    auto it = std::find(dumping.begin(), dumping.end(), pid);
    if (it == dumping.end()) return;
    dumping.erase(it);
    if (dumping.empty() && hang_stop->dump_bound) {
        hang_stop->dump_bound->cancel();
        end_hang_stop();
    }
}

void Agent::Impl::end_hang_stop() {
    if (phase != Phase::Stopping) return;
    begin_stop(SIGTERM);
}

void Agent::Impl::keep_hang_stacks() {
    if (!hang_stop) return;
    if (hang_stop->capture.joinable()) hang_stop->capture.join();
    const auto outcomes = workers.outcomes();
    bool kept = false;
    for (const auto& w : hang_stop->workers) {
        std::string dump;  // faulthandler's, from the worker's stderr
        for (const auto& outcome : outcomes) {
            if (outcome.rank != w.rank) continue;
            bool in_dump = false;
            for (const auto& line : outcome.stderr_tail) {
                in_dump = in_dump || line.starts_with("Fatal Python error");
                if (in_dump) dump += line + "\n";
            }
        }
        const NativeStack* native = nullptr;
        for (const auto& stack : hang_stop->native)
            if (stack.pid == w.pid) native = &stack;
        const auto threads = parse_faulthandler(dump);
        std::string top = python_top_frames(threads);
        if (top.empty() && native && native->error.empty())
            top = native_top_frames(native->text, w.pid);
        if (top.empty())
            top = native && !native->error.empty() ? "no stack: " + native->error : "no stack";
        hang_stop->rank_lines.push_back(fmt::format("rank {} (pid {}): {}", w.rank, w.pid, top));

        const auto dir = workers.log_dir_of(w.local_rank);
        if (!dir) continue;
        const std::string path = *dir + "/stacks.txt";
        std::ofstream file(path, std::ios::trunc);
        file << fmt::format("rank {}, local rank {}, pid {}, node {} ({}), round {}\n", w.rank,
                            w.local_rank, w.pid, node_rank, ctx.host, round);
        if (!dump.empty()) file << "\n== Python threads (faulthandler) ==\n" << dump;
        file << fmt::format("\n== native threads ({}) ==\n",
                            hang_stop->tool.empty() ? std::string("no tool") : hang_stop->tool);
        file << (native ? (native->error.empty() ? native->text : native->error + "\n")
                        : std::string("not captured\n"));
        if (!file) {
            spdlog::warn("cannot write {}: the stacks of rank {} are not kept", path, w.rank);
            continue;
        }
        kept = true;
    }
    if (kept)
        hang_stop->rank_lines.push_back(fmt::format(
            "every thread's stacks: {}/<local rank>/stacks.txt",
            std::filesystem::path(*workers.log_dir_of(hang_stop->workers.front().local_rank))
                .parent_path()
                .string()));
    else if (ctx.log_dir.empty())
        hang_stop->rank_lines.push_back("--log_dir DIR keeps every thread's stacks of every rank");
}

}  // namespace ddprun
