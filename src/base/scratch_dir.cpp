// Scratch directories (see scratch_dir.hpp).
#include "ddprun/base/scratch_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "ddprun/base/fd.hpp"

namespace fs = std::filesystem;

namespace ddprun {
namespace {

constexpr std::string_view k_stem = "ddprun-";
constexpr std::string_view k_lock = ".lock";
constexpr std::string_view k_new_lock = ".lock.new";
constexpr std::string_view k_gone = ".gone";

// "ddprun-" and mkdtemp's six characters: never ddprun_logs_ (kept for the user).
bool is_scratch_name(const std::string& name) {
    return name.size() == k_stem.size() + 6 && name.starts_with(k_stem);
}

// A scratch directory on its way out (remove_scratch_dir): dead by construction.
bool is_gone_name(const std::string& name) {
    return name.ends_with(k_gone) && is_scratch_name(name.substr(0, name.size() - k_gone.size()));
}

// Owned by this user, a directory, not a link to one.
bool is_own_directory(const fs::path& path) {
    struct stat info {};
    return ::lstat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) && info.st_uid == ::geteuid();
}

}  // namespace

std::string scratch_base(const Environment& env) {
    auto it = env.find("TMPDIR");
    return it != env.end() && !it->second.empty() ? it->second : "/tmp";
}

std::expected<std::string, Error> make_scratch_dir(const std::string& base) {
    std::string tmpl = fmt::format("{}/{}XXXXXX", base, k_stem);
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    auto failed = [&base](const char* call) {
        Error error = system_error(call);
        error.message += fmt::format(" in {} (set TMPDIR to a writable directory)", base);
        return std::unexpected(error);
    };
    if (!::mkdtemp(buf.data())) return failed("mkdtemp");
    std::string dir = buf.data();
    std::string new_lock = fmt::format("{}/{}", dir, k_new_lock);
    UniqueFd lock(::open(new_lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!lock) return failed("open");
    if (::flock(lock.get(), LOCK_EX) != 0) return failed("flock");
    if (::rename(new_lock.c_str(), fmt::format("{}/{}", dir, k_lock).c_str()) != 0)
        return failed("rename");
    (void)lock.release();  // held until the process ends: the kernel then drops the lock
    return dir;
}

void remove_scratch_dir(const std::string& dir) {
    if (dir.empty()) return;  // none was made (or it is gone already)
    const std::string gone = dir + std::string(k_gone);
    std::error_code ec;
    if (::rename(dir.c_str(), gone.c_str()) != 0 && errno != ENOENT) fs::remove_all(dir, ec);
    fs::remove_all(gone, ec);
}

int reclaim_scratch_dirs(const std::string& base) {
    int removed = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(base, ec)) {
        const std::string name = entry.path().filename().string();
        const bool gone = is_gone_name(name);
        if ((!gone && !is_scratch_name(name)) || !is_own_directory(entry.path())) continue;
        std::error_code removing;
        if (gone) {
            fs::remove_all(entry.path(), removing);  // its remover was killed midway
        } else {
            std::string lock_path = (entry.path() / k_lock).string();
            UniqueFd lock(::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
            if (!lock) continue;
            if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its owner is alive
            remove_scratch_dir(entry.path().string());
        }
        if (!fs::exists(entry.path(), removing)) ++removed;
    }
    return removed;
}

}  // namespace ddprun
