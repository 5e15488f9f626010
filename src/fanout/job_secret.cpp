// Where an agent's job secret comes from (see job_secret.hpp).
#include "ddprun/fanout/job_secret.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "ddprun/base/duration_text.hpp"
#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/fanout/lifeline.hpp"
#include "ddprun/store/signed_store.hpp"

namespace ddprun {
namespace {

// A secret file is small; a larger one is a mistake (a wrong path), not a secret.
constexpr std::size_t k_max_secret_bytes = 64 * 1024;

std::expected<std::string, Error> read_secret_file(const std::string& path,
                                                   const std::string& shown) {
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file)
        return std::unexpected(usage_error(fmt::format(
            "{}: cannot read it ({}); it holds the job's secret, at least {} random bytes", shown,
            std::strerror(errno), k_min_secret_bytes)));
    struct stat info {};
    if (::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode))
        return std::unexpected(usage_error(
            fmt::format("{}: not a regular file; write the job's secret to a file (e.g. head -c 32 "
                        "/dev/urandom > PATH; chmod 600 PATH)",
                        shown)));
    if ((info.st_mode & 077) != 0)
        return std::unexpected(usage_error(fmt::format(
            "{}: its group or others may access it (mode {:04o}): a job secret must be private, "
            "as ssh refuses a loose key; chmod 600 {}",
            shown, info.st_mode & 07777, path)));
    auto read = read_to_eof(file.get(), k_max_secret_bytes);
    if (!read && read.error() == EFBIG)
        return std::unexpected(usage_error(
            fmt::format("{}: larger than {} bytes, which no secret is: is it the right file?",
                        shown, k_max_secret_bytes)));
    if (!read)
        return std::unexpected(usage_error(
            fmt::format("{}: cannot read it ({})", shown, std::strerror(read.error()))));
    std::string secret = std::move(*read);
    if (secret.size() < k_min_secret_bytes)
        return std::unexpected(usage_error(fmt::format(
            "{}: {} bytes, fewer than the {} a secret needs (head -c 32 /dev/urandom > PATH)",
            shown, secret.size(), k_min_secret_bytes)));
    return secret;
}

std::string value_of(const Environment& env, std::string_view name) {
    auto it = env.find(std::string(name));
    return it == env.end() ? std::string() : it->second;
}

// The first line of standard input, one byte at a time, within `bound_ms`.
std::expected<std::string, Error> read_stdin_line(int bound_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bound_ms);
    std::string line;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0)
            return std::unexpected(rendezvous_error(fmt::format(
                "{}=1: the --hosts launcher sent no secret within {}", k_secret_on_stdin_variable,
                duration_text(std::chrono::milliseconds(bound_ms)))));
        pollfd in{STDIN_FILENO, POLLIN, 0};
        int ready = ::poll(&in, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;
        char c = 0;
        ssize_t n = ::read(STDIN_FILENO, &c, 1);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0)
            return std::unexpected(rendezvous_error(
                fmt::format("{}=1: standard input ended before the --hosts launcher's secret",
                            k_secret_on_stdin_variable)));
        if (c == '\n') return line;
        line.push_back(c);
        if (line.size() > k_lifeline_max_line)
            return std::unexpected(rendezvous_error(
                fmt::format("{}=1: the first line of standard input is not a secret",
                            k_secret_on_stdin_variable)));
    }
}

}  // namespace

std::expected<std::string, Error> read_user_secret(const RendezvousSettings& settings,
                                                   const Environment& env) {
    if (!settings.secret_file.empty())
        return read_secret_file(settings.secret_file,
                                "--rdzv_conf secret_file=" + settings.secret_file);
    if (std::string path = value_of(env, k_secret_file_variable); !path.empty())
        return read_secret_file(path, fmt::format("{}={}", k_secret_file_variable, path));
    std::string secret = value_of(env, k_secret_variable);
    if (!secret.empty() && secret.size() < k_min_secret_bytes)
        return std::unexpected(usage_error(fmt::format(
            "{}: {} bytes, fewer than the {} a secret needs (e.g. export {}=$(head -c 32 "
            "/dev/urandom | base64))",
            k_secret_variable, secret.size(), k_min_secret_bytes, k_secret_variable)));
    return secret;
}

std::expected<std::string, Error> read_agent_secret(const LaunchConfig& config,
                                                    const Environment& env, int bound_ms) {
    if (!config.lifeline || value_of(env, k_secret_on_stdin_variable) != "1")
        return read_user_secret(config.rendezvous, env);
    auto line = read_stdin_line(bound_ms);
    if (!line) return line;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    std::optional<std::string> secret;
    if (line->starts_with(k_secret_line)) secret = from_hex(line->substr(k_secret_line.size()));
    if (!secret || secret->size() < k_min_secret_bytes)
        return std::unexpected(rendezvous_error(fmt::format(
            "{}=1: the first line of standard input is not a secret", k_secret_on_stdin_variable)));
    return *secret;
}

void forget_secret_variables(Environment& env) {
    for (std::string_view name : {k_secret_variable, k_secret_on_stdin_variable}) {
        env.erase(std::string(name));
        ::unsetenv(std::string(name).c_str());
    }
}

// getrandom(2) without flags: the kernel's CSPRNG (what OpenSSL seeds from),
// blocking only until it is first seeded at boot; 32 bytes come in one call.
std::string make_secret() {
    std::string secret(k_min_secret_bytes, '\0');
    std::size_t filled = 0;
    while (filled < secret.size()) {
        ssize_t n = ::getrandom(secret.data() + filled, secret.size() - filled, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            throw std::runtime_error(
                fmt::format("getrandom failed to make the job's secret: {}", std::strerror(errno)));
        filled += static_cast<std::size_t>(n);
    }
    return secret;
}

}  // namespace ddprun
