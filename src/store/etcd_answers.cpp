// etcd's refusals, in one line each (see etcd_answers.hpp).
#include "etcd_answers.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ddprun {

using nlohmann::json;

bool contains(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

std::string refusal(const std::string& endpoint, unsigned status, const std::string& body,
                    const std::string& user) {
    if (contains(body, "CommonName of client"))
        // etcd 3.4 and 3.5 with authentication on refuse, on the gateway, a client
        // certificate whose CN would have named the user over gRPC.
        return fmt::format(
            "etcd at {} refuses a client certificate with a CommonName on its JSON gateway "
            "while authentication is on (use a client certificate without CN, or user and "
            "password_file without --rdzv_conf ssl_cert)",
            endpoint);
    auto answer = json::parse(body, nullptr, false);
    if (answer.is_object()) {
        for (const char* field : {"message", "error"}) {
            if (!answer.contains(field) || !answer[field].is_string()) continue;
            const std::string said = answer[field].get<std::string>();
            if (contains(said, "user name is empty"))
                return fmt::format(
                    "etcd at {} requires authentication ({}): add --rdzv_conf "
                    "user=NAME,password_file=PATH",
                    endpoint, said);
            if (contains(said, "permission denied") && !user.empty())
                return fmt::format(
                    "etcd at {} refused user '{}' ({}): grant the user's role readwrite on "
                    "the keys under --rdzv_conf prefix (default /ddprun/)",
                    endpoint, user, said);
            return fmt::format("etcd at {} refused the request: {}", endpoint, said);
        }
    }
    std::string text = body.substr(0, 80);
    std::replace_if(
        text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }, ' ');
    return fmt::format("{} is not etcd's v3 API (HTTP {}: '{}'); check --rdzv_endpoint", endpoint,
                       status, text);
}

bool token_refused(unsigned status, const std::string& said) {
    return status == 401 || contains(said, "invalid auth token") ||
           contains(said, "user name is empty");
}

}  // namespace ddprun
