// Restarts that make no progress (--max-no-progress-restarts, see agent_impl.hpp):
// a failed round made progress when any rank beat on DDPRUN_PROGRESS_FD during
// it, or the --progress-file changed on any node. Each node decides its own at
// the stop and tells the others; before the restart every node reads every
// node's, so all of them restart, or all stop with kNoProgress.
#include <sys/stat.h>

#include "agent_impl.hpp"
#include "ddprun/base/logging.hpp"

namespace ddprun {

FileStamp stamp_of(const std::string& path) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return {};
    return FileStamp{
        true, static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino),
        static_cast<std::int64_t>(info.st_size),
        static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

void Agent::Impl::watch_progress() {
    made_progress.reset();
    progress_stamp.reset();
    if (ctx.config.max_no_progress_restarts == 0) return;
    if (!ctx.config.progress_file.empty()) progress_stamp = stamp_of(ctx.config.progress_file);
}

void Agent::Impl::note_progress() {
    if (ctx.config.max_no_progress_restarts == 0 || made_progress) return;
    made_progress = workers.beaten() ||
                    (progress_stamp && stamp_of(ctx.config.progress_file) != *progress_stamp);
    cluster->publish_made_progress(*made_progress);
}

bool Agent::Impl::stops_for_no_progress() {
    const int limit = ctx.config.max_no_progress_restarts;
    if (limit == 0) return false;
    note_progress();  // a round that ended without its stop being seen here (a join's abort)
    const bool progressed = cluster->made_progress_anywhere(*made_progress);
    restarts_without_progress = progressed ? 0 : restarts_without_progress + 1;
    events.write("progress", [&] {
        return progress_event(round, progressed, restarts_without_progress, limit);
    });
    if (restarts_without_progress <= limit) return false;
    const std::string what =
        ctx.config.progress_file.empty()
            ? std::string("no rank wrote to DDPRUN_PROGRESS_FD")
            : fmt::format("no rank wrote to DDPRUN_PROGRESS_FD and {} did not change",
                          ctx.config.progress_file);
    spdlog::error(
        "no progress in {} failed round(s) in a row ({}): stopping instead of restarting "
        "(--max-no-progress-restarts={}, exit code {}: a requeue would fail the same way)",
        restarts_without_progress, what, limit, exit_code::kNoProgress);
    return true;
}

}  // namespace ddprun
