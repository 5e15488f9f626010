// Each option's value, checked: numbers, ports, hosts, durations, the
// rendezvous conf, stream selections, signal lists. Pure: no I/O.
//
// Why this file exists: a mistake must come back as one line that names the
// flag (or variable), the value and a fix, never as a parser dump. Every
// parser here gets the value as a Setting, which knows what the user typed it
// as ("--nnodes", "-r", "PET_NNODES", "SLURM_NODEID"), and fails with that
// name and an example. Which value an option takes, and from where, is
// cli.cpp's business.

#include "cli_values.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <csignal>
#include <iterator>

#include "ddprun/base/prefix_template.hpp"
#include "ddprun/base/signals.hpp"
#include "ddprun/base/text.hpp"

namespace ddprun::cli {
namespace {

constexpr int k_max_nproc = 1 << 14;   // with k_max_nnodes, world sizes fit in an int
constexpr double k_max_seconds = 1e7;  // longer is a typo; keeps milliseconds in range

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    while (true) {
        auto at = text.find(separator);
        parts.push_back(text.substr(0, at));
        if (at == std::string_view::npos) return parts;
        text.remove_prefix(at + 1);
    }
}

// An optional sign and one or more digits: an integer, if perhaps too large for one.
bool is_digits(std::string_view text) {
    if (text.starts_with('+') || text.starts_with('-')) text.remove_prefix(1);
    return !text.empty() && std::ranges::all_of(text, [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<double> to_number(std::string_view text) {
    text = trim(text);
    if (text.starts_with('+')) text.remove_prefix(1);
    double value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
        !std::isfinite(value))
        return std::nullopt;
    return value;
}

}  // namespace

std::string env_suffix(std::string_view name) {
    std::string upper;
    for (char c : name) upper += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    return upper;
}

std::string lower(std::string_view text) {
    std::string out;
    for (char c : text) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

Parsed<bool> parse_switch(const Setting& s) {
    if (s.bare_flag) return true;
    if (auto value = to_bool(s.value)) return *value;
    return std::unexpected(s.error("expected 1 or 0", "1"));
}

Parsed<int> parse_int(const Setting& s, long long min, long long max, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("missing value", example));
    auto value = to_flag_integer(s.value);
    if (!value && is_digits(trim(s.value)))  // beyond 64 bits
        value = trim(s.value).starts_with('-') ? LLONG_MIN : LLONG_MAX;
    if (!value) return std::unexpected(s.error("not a number", example));
    if (*value < min)
        return std::unexpected(s.error(fmt::format("must be at least {}", min), example));
    if (*value > max)
        return std::unexpected(s.error(fmt::format("must be at most {}", max), example));
    return static_cast<int>(*value);
}

Parsed<NnodesRange> parse_nnodes(const Setting& s) {
    auto colon = s.value.find(':');
    if (colon == std::string::npos) {
        auto n = parse_int(s, 1, k_max_nnodes, "2");
        if (!n) return std::unexpected(n.error());
        return NnodesRange{*n, *n};
    }
    auto min = to_flag_integer(std::string_view(s.value).substr(0, colon));
    auto max = to_flag_integer(std::string_view(s.value).substr(colon + 1));
    if (!min || !max) return std::unexpected(s.error("expected N or MIN:MAX", "2"));
    if (*min < 1) return std::unexpected(s.error("MIN must be at least 1", "2"));
    if (*min > *max)
        return std::unexpected(s.error("MIN is greater than MAX", fmt::format("{}", *min)));
    if (*max > k_max_nnodes)
        return std::unexpected(s.error(fmt::format("MAX must be at most {}", k_max_nnodes), "2"));
    return NnodesRange{static_cast<int>(*min), static_cast<int>(*max)};
}

Parsed<NprocSpec> parse_nproc(const Setting& s) {
    std::string word = lower(trim(s.value));
    if (word == "gpu") return NprocSpec{NprocKind::Gpu, 1};
    if (word == "cpu") return NprocSpec{NprocKind::Cpu, 1};
    if (word == "auto") return NprocSpec{NprocKind::Auto, 1};
    if (!word.empty() && !is_digits(word))
        return std::unexpected(s.error("expected a number, gpu, cpu or auto", "8"));
    auto count = parse_int(s, 1, k_max_nproc, "8");
    if (!count) return std::unexpected(count.error());
    return NprocSpec{NprocKind::Count, *count};
}

Parsed<int> parse_port(const Setting& s) {
    auto value = to_flag_integer(s.value);
    if (value && (*value < 0 || *value > 65535))
        return std::unexpected(
            s.error_hint("must be a port number 0-65535",
                         fmt::format("0 picks a free one; e.g. {}=29500", s.label)));
    return parse_int(s, 0, 65535, "29500");
}

Parsed<double> parse_seconds(const Setting& s, bool zero_ok, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("missing value", example));
    auto value = to_number(s.value);
    if (!value) return std::unexpected(s.error("not a number of seconds", example));
    if (*value < 0 || (*value == 0 && !zero_ok))
        return std::unexpected(
            s.error(zero_ok ? "must not be negative" : "must be more than 0", example));
    if (*value > k_max_seconds) return std::unexpected(s.error("too large", example));
    return *value;
}

Parsed<double> parse_fraction(const Setting& s) {
    auto value = to_number(s.value);
    if (!value) return std::unexpected(s.error("not a number", "0.5"));
    if (*value < 0 || *value >= 1)
        return std::unexpected(s.error("must be at least 0 (off) and less than 1", "0.5"));
    return *value;
}

Parsed<std::string> parse_nonempty(const Setting& s, std::string_view example) {
    if (trim(s.value).empty()) return std::unexpected(s.error("must not be empty", example));
    return s.value;
}

Parsed<std::string> parse_host(const Setting& s, std::string_view example, bool empty_ok) {
    if (s.value.empty()) {
        if (empty_ok) return s.value;
        return std::unexpected(s.error("must not be empty", example));
    }
    std::string host(trim(s.value));
    if (host.empty()) return std::unexpected(s.error("must not be blank", example));
    if (std::ranges::any_of(host, [](unsigned char c) { return std::isspace(c) || c < 0x20; }))
        return std::unexpected(s.error("a host name or address has no spaces", example));
    return host;
}

Parsed<std::string> parse_backend(const Setting& s) {
    if (s.value == "static" || s.value == "c10d" || s.value == "etcd") return s.value;
    if (s.value == "etcd-v2")
        return std::unexpected(s.error(
            "ddprun speaks etcd's v3 API (etcd 3.4 and later), which etcd 3.6 keeps and v2 does "
            "not: use --rdzv_backend=etcd",
            "etcd"));
    return std::unexpected(s.error("unknown backend (use static, c10d or etcd)", "c10d"));
}

Parsed<std::string> parse_endpoint(const Setting& s) {
    std::string_view value = trim(s.value);
    if (value.empty()) return std::string{};
    // Several endpoints, comma-separated: the members of one etcd cluster.
    if (value.find(',') != std::string_view::npos) {
        for (std::string_view item : split(value, ',')) {
            Setting one = s;
            one.value = std::string(trim(item));
            if (one.value.empty())
                return std::unexpected(s.error("an empty endpoint in the list", "h1:2379,h2:2379"));
            if (auto checked = parse_endpoint(one); !checked) return checked;
        }
        return std::string(value);
    }
    std::string_view host = value;
    std::optional<std::string_view> port;
    if (value.starts_with('[')) {  // [::1]:29400
        auto close = value.find(']');
        if (close == std::string_view::npos)
            return std::unexpected(s.error("unclosed [ in IPv6 address", "[::1]:29400"));
        host = value.substr(1, close - 1);
        std::string_view rest = value.substr(close + 1);
        if (!rest.empty() && !rest.starts_with(':'))
            return std::unexpected(s.error("expected :PORT after ]", "[::1]:29400"));
        if (!rest.empty()) port = rest.substr(1);
    } else if (std::count(value.begin(), value.end(), ':') == 1) {
        auto colon = value.find(':');
        host = value.substr(0, colon);
        port = value.substr(colon + 1);
    }  // more colons: a bare IPv6 address without a port
    if (host.empty()) return std::unexpected(s.error("missing host", "node0:29400"));
    if (port) {
        auto number = to_flag_integer(*port);
        if (!number || *number < 0 || *number > 65535)
            return std::unexpected(
                s.error(fmt::format("port {} is not 0-65535", *port), "node0:29400"));
    }
    return std::string(value);
}

namespace {

constexpr std::string_view k_etcd_access_example =
    "e.g. --rdzv_conf protocol=https,ca_cert=ca.pem,ssl_cert=client.pem,ssl_cert_key=client.key "
    "or user=NAME,password_file=PATH";

// The field of the --rdzv_conf key that names a file or the etcd user; null for other keys.
std::string* etcd_access_field(EtcdAccess& access, std::string_view key) {
    if (key == "ca_cert") return &access.ca_cert;
    if (key == "ssl_cert") return &access.ssl_cert;
    if (key == "ssl_cert_key") return &access.ssl_cert_key;
    if (key == "user") return &access.user;
    if (key == "password_file") return &access.password_file;
    return nullptr;
}

// What is missing from the TLS and authentication keys, if anything.
std::optional<std::string> etcd_access_problem(const EtcdAccess& access) {
    if (!access.https &&
        !(access.ca_cert.empty() && access.ssl_cert.empty() && access.ssl_cert_key.empty()))
        return "ca_cert, ssl_cert and ssl_cert_key need protocol=https";
    if (!access.ssl_cert.empty() && access.ssl_cert_key.empty())
        return "ssl_cert needs ssl_cert_key, the client certificate's private key";
    if (access.ssl_cert.empty() && !access.ssl_cert_key.empty())
        return "ssl_cert_key needs ssl_cert, the client certificate it belongs to";
    if (!access.user.empty() && access.password_file.empty())
        return "user needs password_file, a file that holds the user's password";
    if (access.user.empty() && !access.password_file.empty())
        return "password_file needs user, the etcd user the password is for";
    return std::nullopt;
}

}  // namespace

Parsed<RendezvousSettings> parse_rdzv_conf(const Setting& s) {
    RendezvousSettings conf;
    using Timeout = std::pair<std::string_view, std::chrono::milliseconds*>;
    const Timeout timeouts[] = {
        {"join_timeout", &conf.join_timeout},
        {"heartbeat_timeout", &conf.heartbeat_timeout},
        {"exit_barrier_timeout", &conf.exit_barrier_timeout},
        {"read_timeout", &conf.read_timeout},
        {"last_call_timeout", &conf.last_call_timeout},
        {"close_timeout", &conf.close_timeout},
    };
    for (std::string_view pair : split(s.value, ',')) {
        if (trim(pair).empty()) continue;  // torchrun skips empty pairs ("a=1,")
        auto equals = pair.find('=');
        if (equals == std::string_view::npos)
            return std::unexpected(
                s.error(fmt::format("'{}' is not KEY=VALUE", trim(pair)), "join_timeout=600"));
        std::string key(trim(pair.substr(0, equals)));
        std::string value(trim(pair.substr(equals + 1)));
        if (key.empty() || value.empty())
            return std::unexpected(
                s.error(fmt::format("'{}' is not KEY=VALUE", trim(pair)), "join_timeout=600"));
        auto timeout = std::ranges::find(timeouts, key, &Timeout::first);
        if (timeout != std::end(timeouts)) {
            auto seconds = to_number(value);
            if (!seconds || *seconds <= 0 || *seconds > k_max_seconds)
                return std::unexpected(
                    s.error(fmt::format("{} must be a positive number of seconds", key),
                            fmt::format("{}=600", key)));
            *timeout->second = std::chrono::milliseconds(std::llround(*seconds * 1000));
        } else if (key == "is_host") {
            conf.is_host = to_bool(value);
            if (!conf.is_host)
                return std::unexpected(
                    s.error("is_host must be 1|true|yes|on or 0|false|no|off", "is_host=1"));
        } else if (key == "password" || key == "secret") {
            // Not s.error(): that would print the value back.
            const bool password = key == "password";
            return std::unexpected(usage_error(fmt::format(
                "{} {}=...: a {} is never taken on the command line (ps and shell history show "
                "it); {}",
                s.label, key, password ? "password" : "job secret",
                password ? "write it to a file readable only by you and pass --rdzv_conf "
                           "user=NAME,password_file=PATH"
                         : "write at least 32 random bytes to a file readable only by you and "
                           "pass --rdzv_conf secret_file=PATH (or set DDPRUN_RDZV_SECRET_FILE)")));
        } else if (key == "secret_file") {
            conf.secret_file = value;
        } else if (std::string* field = etcd_access_field(conf.etcd, key)) {
            *field = value;
        } else if (key == "protocol") {
            std::string protocol = lower(value);
            if (protocol != "http" && protocol != "https")
                return std::unexpected(
                    s.error(fmt::format("protocol must be http or https, not '{}'", value),
                            "protocol=https,ca_cert=/etc/etcd/ca.pem"));
            conf.etcd.https = protocol == "https";
        } else {
            conf.other[key] = value;
        }
    }
    if (auto problem = etcd_access_problem(conf.etcd))
        return std::unexpected(s.error_hint(*problem, k_etcd_access_example));
    return conf;
}

// torchrun's Std syntax: "3" for every local rank, or "0:3,1:2" per local rank.
Parsed<StreamSelection> parse_streams(const Setting& s) {
    auto bad = [&s] {
        return std::unexpected(s.error_hint(
            "expected 0-3 or LOCAL_RANK:0-3 pairs",
            fmt::format("0 none, 1 stdout, 2 stderr, 3 both; e.g. {0}=3 or {0}=0:3,1:2", s.label)));
    };
    StreamSelection selection;
    std::string_view value = trim(s.value);
    if (value.find(':') == std::string_view::npos) {
        auto mask = to_flag_integer(value);
        if (!mask || *mask < 0 || *mask > 3) return bad();
        selection.all = static_cast<unsigned>(*mask);
        return selection;
    }
    for (std::string_view pair : split(value, ',')) {
        auto colon = pair.find(':');
        if (colon == std::string_view::npos) return bad();
        auto rank = to_flag_integer(pair.substr(0, colon));
        auto mask = to_flag_integer(pair.substr(colon + 1));
        if (!rank || !mask || *rank < 0 || *rank > INT_MAX || *mask < 0 || *mask > 3) return bad();
        if (!selection.per_rank.emplace(static_cast<int>(*rank), static_cast<unsigned>(*mask))
                 .second)
            return std::unexpected(
                s.error(fmt::format("local rank {} is listed twice", *rank), "0:3,1:2"));
    }
    return selection;
}

Parsed<std::optional<std::set<int>>> parse_rank_filter(const Setting& s) {
    if (trim(s.value).empty()) return std::optional<std::set<int>>{};
    std::set<int> ranks;
    for (std::string_view item : split(s.value, ',')) {
        auto rank = to_flag_integer(item);
        if (!rank || *rank < 0 || *rank > INT_MAX)
            return std::unexpected(s.error("expected local ranks separated by commas", "0,2"));
        ranks.insert(static_cast<int>(*rank));
    }
    return ranks;
}

Parsed<std::vector<int>> parse_signals(const Setting& s) {
    auto signals = parse_signal_list(s.value);
    if (!signals) return std::unexpected(usage_error(s.where() + ": " + signals.error().message));
    return *signals;
}

Parsed<std::string> parse_start_method(const Setting& s) {
    if (s.value == "spawn" || s.value == "fork" || s.value == "forkserver") return s.value;
    return std::unexpected(
        s.error("unknown start method (use spawn, fork or forkserver)", "spawn"));
}

// torchrun's --numa-binding modes; core_complex too, as a torch AffinityMode
// member is spelled, since it is an easy slip for core-complex.
Parsed<NumaBinding> parse_numa_binding(const Setting& s) {
    std::string word = lower(trim(s.value));
    if (word == "node") return NumaBinding::Node;
    if (word == "socket") return NumaBinding::Socket;
    if (word == "exclusive") return NumaBinding::Exclusive;
    if (word == "core-complex" || word == "core_complex") return NumaBinding::CoreComplex;
    if (word == "none") return NumaBinding::None;
    return std::unexpected(
        s.error("unknown mode (use node, socket, exclusive or core-complex)", "node"));
}

Parsed<std::string> parse_log_prefix(const Setting& s) {
    if (auto valid = validate_prefix_template(s.value); !valid)
        return std::unexpected(s.error(valid.error().message, "'[{rank}]: '"));
    return s.value;
}

// LOGLEVEL as Python's logging spells it; WARNING and above leave only errors.
std::optional<int> verbosity_for_level(std::string_view level) {
    std::string word = lower(trim(level));
    if (word == "trace") return 2;
    if (word == "debug") return 1;
    if (word == "info") return 0;
    if (word == "warning" || word == "warn" || word == "error" || word == "critical" ||
        word == "fatal")
        return -1;
    return std::nullopt;
}

// nohup (SIGHUP ignored) must keep a job alive when its terminal closes, but a blocked
// signal is queued whatever its disposition: ddprun would read it from its signalfd and
// stop the job. So a default signal ignored at the start is left out, and stays ignored;
// one the user names in --signals_to_handle is theirs.
void leave_ignored_signals(LaunchConfig& config, bool (*ignored)(int)) {
    for (std::vector<int>* list : {&config.stop_signals, &config.forward_signals})
        std::erase_if(*list, [&](int signal) {
            if (!ignored(signal)) return false;
            config.ignored_signals.push_back(signal);
            return true;
        });
}

}  // namespace ddprun::cli

namespace ddprun {

std::expected<std::vector<int>, Error> parse_signal_list(const std::string& value) {
    using namespace cli;
    std::vector<int> signals;
    if (trim(value).empty())
        return std::unexpected(usage_error("no signals listed (e.g. SIGTERM,SIGINT)"));
    for (std::string_view item : split(value, ',')) {
        item = trim(item);
        std::optional<int> number;
        if (auto integer = to_flag_integer(item)) {
            if (*integer >= 1 && *integer <= SIGRTMAX) number = static_cast<int>(*integer);
        } else {
            number = signal_number(item);
        }
        if (!number)
            return std::unexpected(usage_error(
                fmt::format("unknown signal '{}' (use names like SIGTERM or TERM, or numbers 1-{})",
                            item, SIGRTMAX)));
        if (*number == SIGKILL || *number == SIGSTOP)
            return std::unexpected(usage_error(
                fmt::format("{} cannot be handled (use e.g. SIGTERM)", signal_name(*number))));
        if (*number == SIGCHLD)
            return std::unexpected(usage_error(
                "SIGCHLD is how ddprun learns that workers exit; it cannot stop the job"));
        if (std::find(signals.begin(), signals.end(), *number) == signals.end())
            signals.push_back(*number);
    }
    return signals;
}

}  // namespace ddprun
