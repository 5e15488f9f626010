// The bodies of the fuzz targets: one check per parser that reads outside
// input (the command line and PET_* environment, torch's error file, the
// records agents exchange through the store, Slurm host lists, torch's
// FileTimer requests, the host list of a fanned-out job). Shared by the
// libFuzzer entry point (fuzz_target.cpp, clang only) and the replay of saved
// inputs (test_fuzz_regressions.cpp, every build), so an input that once broke
// a parser stays a test without clang.
//
// A check runs one input through one parser and verifies what the parser
// promises for any input: it returns (never throws, never crashes), an error
// is one non-empty line, and a record that parses survives a round trip
// through its own serialisation. It returns "" or what was broken; the
// sanitizers of the fuzz build catch the rest (overflows, UB, leaks).
#pragma once

#include <algorithm>
#include <cmath>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddprun/base/exit_codes.hpp"
#include "ddprun/cli/cli.hpp"
#include "ddprun/fanout/fan_out.hpp"
#include "ddprun/fanout/host_plan.hpp"
#include "ddprun/hang/file_timer_table.hpp"
#include "ddprun/rendezvous/rendezvous.hpp"
#include "ddprun/report/error_file.hpp"
#include "ddprun/scheduler/hostlist.hpp"
#include "ddprun/store/signed_store.hpp"
// The elastic protocol's own records (the event queue, the answers) are not
// public: the fuzz targets see src/ for them.
#include "ddprun/hang/hang_monitor.hpp"
#include "ddprun/records/wire.hpp"

namespace ddprun_fuzz {

inline std::string check_one_line(std::string_view what, const std::string& message) {
    if (message.empty()) return std::string(what) + ": empty error message";
    if (message.find('\n') != std::string::npos) {
        return std::string(what) + ": error message of more than one line: " + message;
    }
    return {};
}

// The input is the command line, one argument per line; a line "$NAME=VALUE"
// is an environment variable instead (PET_NNODES=..., SLURM_JOB_NODELIST=...).
inline std::string check_command_line(std::string_view data) {
    std::vector<std::string> args;
    ddprun::Environment env;
    while (!data.empty()) {
        auto end = data.find('\n');
        std::string_view line = data.substr(0, end);
        data.remove_prefix(end == std::string_view::npos ? data.size() : end + 1);
        if (line.starts_with('$')) {
            auto eq = line.find('=');
            if (eq == std::string_view::npos) continue;
            env[std::string(line.substr(1, eq - 1))] = std::string(line.substr(eq + 1));
        } else {
            args.emplace_back(line);
        }
    }
    try {
        auto parsed = ddprun::parse_command_line(args, env);
        if (!parsed) return check_one_line("parse_command_line", parsed.error().message);
        if (parsed->action == ddprun::CommandLine::Action::Run) {
            const ddprun::LaunchConfig& config = parsed->config;
            if (config.nnodes < 1) return "parse_command_line accepted nnodes < 1";
            if (config.node_rank && (*config.node_rank < 0 || *config.node_rank >= config.nnodes))
                return "parse_command_line accepted a node_rank outside 0..nnodes-1";
        }
    } catch (const std::exception& error) {
        return std::string("parse_command_line threw: ") + error.what();
    }
    return {};
}

inline std::string check_error_file(std::string_view data) {
    try {
        (void)ddprun::parse_error_file(data);
    } catch (const std::exception& error) {
        return std::string("parse_error_file threw: ") + error.what();
    }
    return {};
}

// A record that parses must serialise to text that parses to the same record.
template <class Record, class Parse>
std::string check_round_trip(std::string_view what, std::string_view data, Parse parse) {
    try {
        auto parsed = parse(data);
        if (!parsed) return check_one_line(what, parsed.error());
        std::string once = ddprun::to_json(*parsed);
        auto again = parse(once);
        if (!again) return std::string(what) + " rejects its own output: " + once;
        std::string twice = ddprun::to_json(*again);
        if (once != twice) {
            return std::string(what) + " round trip changed the record: " + once + " -> " + twice;
        }
    } catch (const std::exception& error) {
        return std::string(what) + " threw: " + error.what();
    }
    return {};
}

inline std::string check_node_info(std::string_view data) {
    return check_round_trip<ddprun::NodeInfo>("parse_node_info", data, ddprun::parse_node_info);
}

inline std::string check_failure_record(std::string_view data) {
    return check_round_trip<ddprun::FailureRecord>("parse_failure_record", data,
                                                   ddprun::parse_failure_record);
}

// The membership every agent reads (or the abort in its place), as node 1 of 3
// reads it: an error is one line naming the key; a membership fits that node.
inline std::string check_round_result(std::string_view data) {
    ddprun::NodeInfo me;
    me.node_rank = 1;
    me.fingerprint.nnodes = 3;
    me.agent_id = "a1";
    const std::string key = "ddprun/job/r0/result";
    try {
        auto parsed = ddprun::parse_round_result(data, key, "job", 0, me);
        if (!parsed) {
            std::string broken = check_one_line("parse_round_result", parsed.error().message);
            if (!broken.empty()) return broken;
            if (parsed.error().exit_code < 0 || parsed.error().exit_code > 255)
                return "parse_round_result gave an exit code outside 0..255";
            return {};
        }
        if (parsed->nproc_per_node.size() != 3)
            return "parse_round_result accepted a membership that does not list 3 nodes";
        for (int nproc : parsed->nproc_per_node)
            if (nproc < 1) return "parse_round_result accepted a node with no workers";
        if (parsed->master_port < 0 || parsed->master_port > 65535)
            return "parse_round_result accepted a port outside 0..65535";
    } catch (const std::exception& error) {
        return std::string("parse_round_result threw: ") + error.what();
    }
    return {};
}

// An elastic job's records, all read from the store: an event the leader takes
// from the queue, an answer an agent waits for, and a round's membership as an
// agent of a 1:3 job reads it. Errors are one line; what parses fits its bounds
// and an answer survives a round trip.
inline std::string check_elastic(std::string_view data) {
    try {
        if (auto event = ddprun::wire::parse_event(data); !event) {
            if (auto broken = check_one_line("parse_event", event.error()); !broken.empty())
                return broken;
        } else if (event->agent < 0 || event->answer < 0) {
            return "parse_event accepted a negative agent or answer number";
        }
        if (auto answer = ddprun::wire::parse_answer(data); !answer) {
            if (auto broken = check_one_line("parse_answer", answer.error()); !broken.empty())
                return broken;
        } else {
            auto again = ddprun::wire::parse_answer(ddprun::wire::answer_json(*answer));
            if (!again || again->kind != answer->kind || again->round != answer->round ||
                again->exit_code != answer->exit_code || again->message != answer->message)
                return "parse_answer round trip changed the answer";
        }
        ddprun::NodeInfo me;
        me.fingerprint.nnodes = 3;
        me.fingerprint.min_nnodes = 1;
        me.agent_id = "a1";
        auto parsed = ddprun::parse_round_result(data, "ddprun/job/r2/result", "job", 2, me);
        if (!parsed) return check_one_line("parse_round_result", parsed.error().message);
        const auto listed = parsed->nproc_per_node.size();
        if (listed < 1 || listed > 3)
            return "an elastic membership outside 1..3 nodes was accepted";
        if (parsed->node_rank < 0 || static_cast<std::size_t>(parsed->node_rank) >= listed)
            return "an elastic membership placed this agent outside it";
    } catch (const std::exception& error) {
        return std::string("an elastic record threw: ") + error.what();
    }
    return {};
}

inline std::string check_hostlist(std::string_view data) {
    try {
        auto hosts = ddprun::expand_hostlist(data);
        if (!hosts) return check_one_line("expand_hostlist", hosts.error());
        if (hosts->size() > ddprun::k_max_hostlist_hosts) {
            return "expand_hostlist returned more than k_max_hostlist_hosts hosts";
        }
    } catch (const std::exception& error) {
        return std::string("expand_hostlist threw: ") + error.what();
    }
    return {};
}

// What a worker (or anyone who can open the FIFO) writes to the FileTimer
// server: lines of requests. An error is one line; an accepted request has a
// positive pid, a signal in -64..64 and a finite time; the table the requests
// go through never holds more timers than its bound, and an expiry names a pid
// the table held.
inline std::string check_file_timer(std::string_view data) {
    constexpr std::size_t k_max_timers = 16;
    try {
        ddprun::FileTimerTable table;
        while (!data.empty()) {
            auto end = data.find('\n');
            std::string_view line = data.substr(0, end);
            data.remove_prefix(end == std::string_view::npos ? data.size() : end + 1);
            auto request = ddprun::parse_file_timer_request(line);
            if (!request) {
                if (auto broken = check_one_line("parse_file_timer_request", request.error());
                    !broken.empty())
                    return broken;
                continue;
            }
            if (request->pid <= 0) return "parse_file_timer_request accepted a pid <= 0";
            if (request->signal < -64 || request->signal > 64)
                return "parse_file_timer_request accepted a signal outside -64..64";
            if (!std::isfinite(request->expiration_time))
                return "parse_file_timer_request accepted a time that is not finite";
            table.apply(*request, 1e9, k_max_timers);
            if (table.size() > k_max_timers) return "FileTimerTable grew past its bound";
        }
        const auto held = table.pids();
        for (const auto& expiry : table.take_expired(2e11)) {
            if (std::find(held.begin(), held.end(), expiry.pid) == held.end())
                return "FileTimerTable expired a pid it did not hold";
            if (expiry.signal < 0) return "FileTimerTable chose a negative signal";
        }
        if (table.size() != 0) return "FileTimerTable kept a timer past every expiration";
    } catch (const std::exception& error) {
        return std::string("parse_file_timer_request threw: ") + error.what();
    }
    return {};
}

// A node's ranks' progress at a hang, as another node reads it from the store: an
// error is one line; what parses is within its bounds, and describing it (the
// hang line every node prints) is one line too.
inline std::string check_progress(std::string_view data) {
    try {
        auto ranks = ddprun::wire::parse_progress(data, "ddprun/job/r0/progress/1", "job");
        if (!ranks) return check_one_line("parse_progress", ranks.error());
        if (ranks->size() > ddprun::wire::k_max_node_outcomes)
            return "parse_progress accepted more ranks than its bound";
        for (const auto& r : *ranks) {
            if (r.rank < 0 || r.node_rank < 0 || r.silent_ms < -1 || r.running_ms < 0)
                return "parse_progress accepted a value out of range";
            if (r.label.find('\n') != std::string::npos)
                return "parse_progress kept a newline in a label";
        }
        const std::string line = ddprun::describe_progress(*ranks);
        if (auto broken = check_one_line("describe_progress", line); !broken.empty()) return broken;
        if (auto first = ddprun::first_to_stop(*ranks))
            if (auto broken =
                    check_one_line("describe_first_stop", ddprun::describe_first_stop(*first, {}));
                !broken.empty())
                return broken;
    } catch (const std::exception& error) {
        return std::string("parse_progress threw: ") + error.what();
    }
    return {};
}

// What a plan of hosts promises, whoever made it: valid, unique names, slots
// within 1..k_max_host_slots, and devices (if narrowed) unique, not negative
// and below the host's slots.
inline std::string check_planned(std::string_view what,
                                 const std::vector<ddprun::PlannedHost>& hosts) {
    std::set<std::string_view> seen;
    for (const auto& host : hosts) {
        if (!ddprun::check_host_name(host.name).empty())
            return std::string(what) + " accepted an invalid host name";
        if (!seen.insert(host.name).second) return std::string(what) + " listed a host twice";
        if (host.slots && (*host.slots < 1 || *host.slots > ddprun::k_max_host_slots))
            return std::string(what) + " accepted slots outside 1..k_max_host_slots";
        std::set<int> devices;
        for (int device : host.devices) {
            if (device < 0 || (host.slots && device >= *host.slots))
                return std::string(what) + " chose a device outside the host's slots";
            if (!devices.insert(device).second) return std::string(what) + " chose a device twice";
        }
    }
    return {};
}

// Selecting from a valid plan: an error is one line; what is kept is a valid,
// non-empty plan in the same order, each host one of the input's.
inline std::string check_selection(const std::vector<ddprun::PlannedHost>& hosts,
                                   std::string_view include, std::string_view exclude) {
    auto selected = ddprun::select_hosts(hosts, include, exclude);
    if (!selected) return check_one_line("select_hosts", selected.error());
    if (selected->empty()) return "select_hosts kept no host and said nothing";
    if (auto broken = check_planned("select_hosts", *selected); !broken.empty()) return broken;
    std::size_t next = 0;
    for (const auto& host : *selected) {
        while (next < hosts.size() && hosts[next].name != host.name) ++next;
        if (next == hosts.size()) return "select_hosts kept a host not in its input, or reordered";
        if (hosts[next].slots != host.slots) return "select_hosts changed a host's slots";
    }
    return {};
}

// The input is a hostfile as a whole, and also, line by line: a --hosts value,
// an --include and an --exclude, applied to both host lists that parse.
inline std::string check_hosts(std::string_view data) {
    std::string_view lines[3];
    std::string_view rest = data;
    for (auto& line : lines) {
        auto end = rest.find('\n');
        line = rest.substr(0, end);
        rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    }
    try {
        std::vector<std::vector<ddprun::PlannedHost>> plans;
        auto from_file = ddprun::parse_hostfile(data);
        if (!from_file) {
            if (auto broken = check_one_line("parse_hostfile", from_file.error()); !broken.empty())
                return broken;
        } else if (auto broken = check_planned("parse_hostfile", *from_file); !broken.empty()) {
            return broken;
        } else {
            plans.push_back(std::move(*from_file));
        }
        auto from_flag = ddprun::parse_hosts_flag(lines[0]);
        if (!from_flag) {
            if (auto broken = check_one_line("parse_hosts_flag", from_flag.error());
                !broken.empty())
                return broken;
        } else if (auto broken = check_planned("parse_hosts_flag", *from_flag); !broken.empty()) {
            return broken;
        } else {
            plans.push_back(std::move(*from_flag));
        }
        for (const auto& plan : plans) {
            for (auto [include, exclude] :
                 {std::pair{lines[1], std::string_view()}, std::pair{std::string_view(), lines[2]},
                  std::pair{lines[1], lines[2]}}) {
                if (auto broken = check_selection(plan, include, exclude); !broken.empty())
                    return broken;
            }
        }
    } catch (const std::exception& error) {
        return std::string("a host list parser threw: ") + error.what();
    }
    return {};
}

// What the --hosts launcher reads from others: --ssh-command (the first line),
// a .ddprunenv (the whole input) and a host's preflight answer (its output and
// error output, the input's two halves, under every kind of exit status). An
// error or a reason is one line; a word quoted for the remote shell splits
// back into itself; the answer's exit code is one ddprun documents.
inline std::string check_fan_out(std::string_view data) {
    try {
        std::string_view first = data.substr(0, data.find('\n'));
        auto words = ddprun::split_words(first);
        if (!words) {
            if (auto broken = check_one_line("split_words", words.error()); !broken.empty())
                return broken;
        } else {
            for (const std::string& word : *words) {
                auto again = ddprun::split_words(ddprun::shell_quote(word));
                if (!again || *again != std::vector<std::string>{word})
                    return "split_words(shell_quote(word)) is not the word";
            }
        }
        auto variables = ddprun::parse_env_file(data, ".ddprunenv");
        if (!variables) {
            if (auto broken = check_one_line("parse_env_file", variables.error()); !broken.empty())
                return broken;
        }
        ddprun::FanOutPlan plan;
        plan.remote_ddprun = "/usr/bin/ddprun";
        std::string_view out = data.substr(0, data.size() / 2);
        std::string_view err = data.substr(data.size() / 2);
        for (int status : {0, 2, 75, 126, 127, 137, 255}) {
            auto problem = ddprun::check_preflight(status, out, err, "0.1.0", plan);
            if (!problem) {
                if (status != 0) return "check_preflight accepted a host that exited non-zero";
                continue;
            }
            if (auto broken = check_one_line("check_preflight", problem->reason); !broken.empty())
                return broken;
            if (problem->code != status && problem->code != ddprun::exit_code::kRendezvous &&
                problem->code != ddprun::exit_code::kUsage)
                return "check_preflight chose an exit code nobody documents";
        }
    } catch (const std::exception& error) {
        return std::string("a --hosts parser threw: ") + error.what();
    }
    return {};
}

// The input is a stored record read under a job secret (signed_store.hpp): the
// check never throws, refuses in one line naming the key, and what it accepts
// signs back to a record it accepts with the same value. Without a secret,
// only a record that looks signed is refused.
inline std::string check_signed_record(std::string_view data) {
    const std::string secret(32, 's');
    const std::string key = "ddprun/job/r0/stop";
    try {
        auto opened = ddprun::open_record(secret, key, data);
        if (!opened) {
            if (std::string broken = check_one_line("open_record", opened.error()); !broken.empty())
                return broken;
            if (opened.error().find(key) == std::string::npos)
                return "open_record's refusal does not name the key";
        } else if (ddprun::open_record(secret, key, ddprun::sign_record(secret, key, *opened)) !=
                   opened) {
            return "a record open_record accepted does not survive signing its value again";
        }
        auto unsigned_read = ddprun::open_record("", key, data);
        if (unsigned_read.has_value() == data.starts_with(ddprun::k_signed_prefix))
            return "without a secret, open_record must refuse exactly the signed-looking records";
    } catch (const std::exception& error) {
        return std::string("open_record threw: ") + error.what();
    }
    return {};
}

struct Target {
    std::string_view name;  // also the directory of its corpus and regressions
    std::string (*check)(std::string_view);
};

inline constexpr Target k_targets[] = {
    {"cli", check_command_line},    {"error_file", check_error_file},
    {"node_info", check_node_info}, {"failure_record", check_failure_record},
    {"hostlist", check_hostlist},   {"round_result", check_round_result},
    {"elastic", check_elastic},     {"file_timer", check_file_timer},
    {"progress", check_progress},   {"hosts", check_hosts},
    {"fan_out", check_fan_out},     {"signed_record", check_signed_record},
};

}  // namespace ddprun_fuzz
