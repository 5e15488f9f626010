// What the WorkerGroup and Agent tests share: a LaunchContext that runs
// tests/fake_worker (its arguments choose what each worker does), a private
// temporary directory, and the console as two files read back afterwards.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ddprun/base/signals.hpp"
#include "ddprun/plan/launch_context.hpp"
#include "ddprun/workers/worker_group.hpp"
#include "support/build_paths.hpp"

namespace ddprun::testing {

class TempDir {
  public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "ddprun-test-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        m_path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(m_path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return m_path; }

  private:
    std::filesystem::path m_path;
};

inline std::string read_file(const std::filesystem::path& path) {
    std::string data;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return data;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) data.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return data;
}

// The workers' console: what WorkerGroup::Options{stdout_fd, stderr_fd} write to.
class Console {
  public:
    explicit Console(const std::filesystem::path& dir)
        : m_out(dir / "console.out"), m_err(dir / "console.err") {
        m_out_fd = ::open(m_out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        m_err_fd = ::open(m_err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    }
    ~Console() {
        ::close(m_out_fd);
        ::close(m_err_fd);
    }
    Console(const Console&) = delete;
    Console& operator=(const Console&) = delete;
    WorkerGroup::Options options() const {
        WorkerGroup::Options o;
        o.stdout_fd = m_out_fd;
        o.stderr_fd = m_err_fd;
        return o;
    }
    std::string out() const { return read_file(m_out); }
    std::string err() const { return read_file(m_err); }

  private:
    std::filesystem::path m_out, m_err;
    int m_out_fd = -1, m_err_fd = -1;
};

// A node running `nproc` fake_workers with `args`, error files under `scratch`.
inline LaunchContext fake_worker_context(const std::filesystem::path& scratch, int nproc,
                                         std::vector<std::string> args) {
    LaunchContext ctx;
    ctx.config.nproc_per_node = {NprocKind::Count, nproc};
    ctx.config.program = ddprun_test::build_paths::fake_worker;
    ctx.config.args = std::move(args);
    ctx.config.stop_signals = {SIGTERM, SIGINT};
    ctx.config.forward_signals = {SIGUSR1, SIGUSR2};
    ctx.config.shutdown_timeout = std::chrono::seconds(30);
    ctx.nproc = nproc;
    ctx.executable = ddprun_test::build_paths::fake_worker;
    ctx.scratch_dir = scratch.string();
    ctx.host = "testhost";
    ctx.env = {{"PATH", "/usr/bin:/bin"}};
    return ctx;
}

}  // namespace ddprun::testing
