// Resolves the worker program before anything is started (see program.hpp).
#include "ddprun/workers/program.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "ddprun/base/exit_codes.hpp"

namespace ddprun {
namespace {

Error not_found(const std::string& name, const std::string& why) {
    return {name + ": " + why, exit_code::kNotFound};
}

Error not_executable(const std::string& name, const std::string& why) {
    return {name + ": " + why, exit_code::kNotExecutable};
}

// Checks one candidate path: the path if it can be run, else why not.
std::expected<std::string, Error> check_file(const std::string& shown, const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno == EACCES)
            return std::unexpected(not_executable(shown, "permission denied on the path"));
        return std::unexpected(
            not_found(shown, "no such file (check the path, or put it on PATH)"));
    }
    if (S_ISDIR(st.st_mode))
        return std::unexpected(not_executable(shown, "is a directory, not a program"));
    if (!S_ISREG(st.st_mode))
        return std::unexpected(not_executable(shown, "is not a regular file"));
    if (::access(path.c_str(), X_OK) != 0)
        return std::unexpected(not_executable(
            shown, "is not executable (chmod +x it, or run a script through its interpreter)"));
    return path;
}

}  // namespace

std::expected<std::string, Error> resolve_executable(const std::string& name,
                                                     const std::string& path_var) {
    if (name.empty()) return std::unexpected(not_found("''", "empty program name"));
    if (name.find('/') != std::string::npos) return check_file(name, name);

    std::optional<Error> first_error;
    std::size_t start = 0;
    while (start <= path_var.size()) {
        std::size_t end = path_var.find(':', start);
        if (end == std::string::npos) end = path_var.size();
        // An empty PATH entry means the current directory, as for execvp.
        std::string candidate = end > start ? path_var.substr(start, end - start) : ".";
        candidate.append("/").append(name);
        auto found = check_file(name, candidate);
        if (found) return found;
        // Like execvp: a match that cannot be executed is remembered, but a
        // later executable match wins.
        if (found.error().exit_code == exit_code::kNotExecutable && !first_error)
            first_error = found.error();
        start = end + 1;
    }
    if (first_error) return std::unexpected(*first_error);
    return std::unexpected(not_found(name, "command not found on PATH"));
}

std::expected<std::string, Error> resolve_command(const std::vector<std::string>& argv,
                                                  const LaunchConfig& config,
                                                  const Environment& env) {
    auto path_it = env.find("PATH");
    std::string path_var = path_it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path_it->second;
    auto exe = resolve_executable(argv.at(0), path_var);
    if (!exe) {
        if (config.program_kind != ProgramKind::Executable)
            exe.error().message += " (the Python interpreter; set PYTHON_EXEC to choose one)";
        return exe;
    }
    if (config.program_kind == ProgramKind::PythonFile) {
        struct stat st {};
        if (::stat(config.program.c_str(), &st) != 0)
            return std::unexpected(not_found(config.program, "no such file"));
        if (S_ISDIR(st.st_mode))
            return std::unexpected(not_executable(config.program, "is a directory, not a script"));
        if (::access(config.program.c_str(), R_OK) != 0)
            return std::unexpected(not_executable(config.program, "is not readable"));
    }
    return exe;
}

}  // namespace ddprun
