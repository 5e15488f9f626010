// The pure part of `ddprun --hosts` (fan_out.hpp): each host's command line,
// the environment the agents get, and what the hosts' answers mean.
#include "ddprun/fanout/fan_out.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/base/text.hpp"
#include "ddprun/fanout/job_secret.hpp"

namespace ddprun {
namespace {

// The last line of `text` with something on it ("" if none).
std::string last_line(std::string_view text) {
    std::string_view rest = text;
    while (!rest.empty()) {
        std::size_t end = rest.find_last_not_of("\r\n \t");
        if (end == std::string_view::npos) return "";
        rest = rest.substr(0, end + 1);
        std::size_t start = rest.find_last_of('\n');
        std::string_view line = rest.substr(start == std::string_view::npos ? 0 : start + 1);
        if (!trim(line).empty()) return std::string(trim(line));
        rest = rest.substr(0, start == std::string_view::npos ? 0 : start);
    }
    return "";
}

// The first line of `text` that starts with `marker`, without it.
std::optional<std::string> line_after(std::string_view text, std::string_view marker) {
    for (std::size_t at = 0; at < text.size();) {
        std::size_t end = text.find('\n', at);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(at, end - at);
        if (line.starts_with(marker)) return std::string(trim(line.substr(marker.size())));
        at = end + 1;
    }
    return std::nullopt;
}

}  // namespace

bool is_variable_name(std::string_view name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
}

std::expected<std::vector<std::string>, std::string> split_words(std::string_view text) {
    std::vector<std::string> words;
    std::string word;
    bool in_word = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word) words.push_back(std::move(word));
            word.clear();
            in_word = false;
        } else if (c == '\'') {
            std::size_t close = text.find('\'', i + 1);
            if (close == std::string_view::npos)
                return std::unexpected(
                    fmt::format("the single quote at character {} is never closed", i + 1));
            word += text.substr(i + 1, close - i - 1);
            in_word = true;
            i = close;
        } else if (c == '"') {
            std::size_t j = i + 1;
            for (; j < text.size() && text[j] != '"'; ++j) {
                // Inside double quotes a backslash escapes only these, as in sh.
                if (text[j] == '\\' && j + 1 < text.size() &&
                    std::string_view("\"\\$`").find(text[j + 1]) != std::string_view::npos)
                    ++j;
                word += text[j];
            }
            if (j == text.size())
                return std::unexpected(
                    fmt::format("the double quote at character {} is never closed", i + 1));
            in_word = true;
            i = j;
        } else if (c == '\\') {
            if (i + 1 == text.size()) return std::unexpected("it ends with a lone backslash");
            word += text[++i];
            in_word = true;
        } else {
            word += c;
            in_word = true;
        }
    }
    if (in_word) words.push_back(std::move(word));
    if (words.empty()) return std::unexpected("it is empty");
    return words;
}

std::string shell_quote(std::string_view text) {
    auto safe = [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("-_./=:,@%+").find(c) != std::string_view::npos;
    };
    if (!text.empty() && std::all_of(text.begin(), text.end(), safe)) return std::string(text);
    std::string quoted = "'";
    for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
}

std::string remote_command(const FanOutPlan& plan, std::size_t index, RemoteMode mode) {
    const PlannedHost& host = plan.hosts.at(index);
    Variables env = plan.env;
    if (!host.devices.empty()) {
        std::string devices;
        for (int device : host.devices)
            devices += (devices.empty() ? "" : ",") + std::to_string(device);
        std::erase_if(env, [](const auto& v) { return v.first == "CUDA_VISIBLE_DEVICES"; });
        env.emplace_back("CUDA_VISIBLE_DEVICES", devices);
    }
    if (mode == RemoteMode::Run && plan.secret_on_stdin)
        env.emplace_back(k_secret_on_stdin_variable, "1");
    std::string command = fmt::format("cd -- {} && exec ", shell_quote(plan.cwd));
    if (!env.empty()) {
        command += "env";
        for (const auto& [name, value] : env) command += " " + shell_quote(name + "=" + value);
        command += " ";
    }
    command += shell_quote(plan.remote_ddprun);
    command += mode == RemoteMode::Run ? " --lifeline" : " --preflight";
    const std::string words[] = {
        fmt::format("--nnodes={}", plan.hosts.size()),
        fmt::format("--node_rank={}", index),
        "--nproc_per_node=" + plan.nproc.at(index),
        // Node 0's address as the others reach it is the master's: MASTER_ADDR.
        "--local_addr=" + (index == 0 ? plan.master_addr : host.name),
        "--master_addr=" + plan.master_addr,
        "--rdzv_endpoint=" + plan.endpoint,
        "--rdzv_id=" + plan.run_id,
    };
    for (const std::string& word : words) command += " " + shell_quote(word);
    if (plan.verbosity < 0) command += " -q";
    for (int v = 0; v < plan.verbosity; ++v) command += " -v";
    for (const std::string& flag : plan.flags) command += " " + shell_quote(flag);
    for (const std::string& word : plan.program) command += " " + shell_quote(word);
    return command;
}

std::vector<std::string> host_argv(const FanOutPlan& plan, std::size_t index, RemoteMode mode) {
    const std::string& host = plan.hosts.at(index).name;
    std::vector<std::string> argv;
    bool templated = std::any_of(plan.launcher.begin(), plan.launcher.end(), [](const auto& w) {
        return w.find("{host}") != std::string::npos;
    });
    for (std::string word : plan.launcher) {
        for (std::size_t at; (at = word.find("{host}")) != std::string::npos;)
            word.replace(at, 6, host);
        argv.push_back(std::move(word));
    }
    if (!templated) {
        // After the user's words: ssh takes the first value of an option, so theirs win.
        argv.insert(argv.end(), {"-o", "BatchMode=yes", "-o",
                                 fmt::format("ConnectTimeout={}", k_ssh_connect_timeout_s), host});
    }
    argv.push_back(remote_command(plan, index, mode));
    return argv;
}

Variables forwarded_variables(const Environment& env) {
    static constexpr std::string_view prefixes[] = {"NCCL_", "PYTHON", "CUDA_", "TORCH",
                                                    "OMP_",  "UCX_",   "FI_",   "MASTER_"};
    Variables forwarded;
    for (const auto& variable : env) {
        const std::string& name = variable.first;
        if (name == "CUDA_VISIBLE_DEVICES" || !is_variable_name(name)) continue;
        if (std::any_of(std::begin(prefixes), std::end(prefixes),
                        [&name](std::string_view p) { return name.starts_with(p); }))
            forwarded.push_back(variable);
    }
    std::sort(forwarded.begin(), forwarded.end());
    return forwarded;
}

std::expected<Variables, std::string> parse_env_file(std::string_view text, std::string_view path) {
    Variables variables;
    int number = 0;
    for (std::size_t at = 0; at < text.size();) {
        std::size_t end = text.find('\n', at);
        if (end == std::string_view::npos) end = text.size();
        std::string line(trim(text.substr(at, end - at)));
        at = end + 1;
        ++number;
        if (line.empty() || line.starts_with('#')) continue;
        std::size_t equals = line.find('=');
        std::string name(trim(std::string_view(line).substr(0, equals)));
        if (equals == std::string::npos || !is_variable_name(name))
            return std::unexpected(fmt::format(
                "{} line {}: '{}': {} (write NAME=VALUE, one a line)", path, number, line,
                equals == std::string::npos ? "no '='" : "not a variable name before '='"));
        variables.emplace_back(name, line.substr(equals + 1));
    }
    return variables;
}

std::expected<Variables, std::string> remote_environment(
    const Environment& env, const std::vector<Variables>& files,
    const std::vector<std::string>& env_flags) {
    Variables all;
    std::map<std::string, std::size_t> index;
    auto set = [&](const std::string& name, const std::string& value) {
        auto [it, added] = index.emplace(name, all.size());
        if (added)
            all.emplace_back(name, value);
        else
            all[it->second].second = value;
    };
    for (const auto& [name, value] : forwarded_variables(env)) set(name, value);
    for (const Variables& file : files)
        for (const auto& [name, value] : file) set(name, value);
    for (const std::string& flag : env_flags) {
        std::size_t equals = flag.find('=');
        std::string name = flag.substr(0, equals);
        if (equals != std::string::npos) {
            set(name, flag.substr(equals + 1));
            continue;
        }
        auto it = env.find(name);
        if (it == env.end())
            return std::unexpected(fmt::format(
                "--env {}: {} is not set here (give its value: --env {}=VALUE)", name, name, name));
        set(name, it->second);
    }
    return all;
}

std::optional<PreflightProblem> check_preflight(int status, std::string_view out,
                                                std::string_view err, std::string_view version,
                                                const FanOutPlan& plan) {
    const std::string fix = "install it there, or give --remote-ddprun PATH";
    if (auto answer = line_after(out, k_preflight_answer)) {
        std::string theirs = answer->substr(0, answer->find(' '));
        if (theirs != version)
            return PreflightProblem{
                exit_code::kRendezvous,
                fmt::format("{} is ddprun {}, this one is {} ({} of the same version)",
                            plan.remote_ddprun, theirs, version, "install one")};
        if (status == 0) return std::nullopt;
    }
    if (auto error = line_after(err, "ddprun: error: "); error && !error->empty())
        return PreflightProblem{status == 255 || status == 0 ? exit_code::kUsage : status, *error};
    std::string said = last_line(err);
    if (said.empty()) said = last_line(out);
    if (status == 255)
        return PreflightProblem{exit_code::kRendezvous, said.empty() ? "ssh failed (exit 255)"
                                                        : said.starts_with("ssh") ? said
                                                                                  : "ssh: " + said};
    if (status == exit_code::kNotFound || status == exit_code::kNotExecutable)
        return PreflightProblem{
            exit_code::kRendezvous,
            fmt::format("cannot run {} there ({}): {}", plan.remote_ddprun,
                        said.empty() ? fmt::format("exit {}", status) : said, fix)};
    if (status == 0)
        return PreflightProblem{
            exit_code::kRendezvous,
            fmt::format("{} answered, but not as ddprun does (is it ddprun? {})",
                        plan.remote_ddprun, fix)};
    return PreflightProblem{exit_code::kRendezvous,
                            said.empty() ? fmt::format("exited {}", status)
                                         : fmt::format("exited {}: {}", status, said)};
}

int fan_out_exit_code(const std::vector<int>& statuses) {
    std::map<int, int> count;
    for (int status : statuses)
        if (status != 255) ++count[status];
    int best = exit_code::kRendezvous;
    int best_count = 0;
    for (int status : statuses) {
        if (status == 255) continue;
        if (count[status] > best_count) {
            best = status;
            best_count = count[status];
        }
    }
    return best;
}

}  // namespace ddprun
