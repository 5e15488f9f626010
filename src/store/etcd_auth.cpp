// EtcdClient's authentication (--rdzv_conf user, password_file): the token
// etcd hands out for the user, asked for once per agent and asked for again
// when etcd has forgotten it (see etcd_client.hpp).
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddprun/store/etcd_client.hpp"
#include "ddprun/store/openssl_plugin.hpp"
#include "etcd_answers.hpp"

namespace ddprun {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string EtcdClient::token(Clock::time_point deadline,
                              const std::optional<std::string>& refused) {
    if (!m_options.credentials) return {};
    const EtcdCredentials& credentials = *m_options.credentials;
    EtcdToken& shared = *credentials.token;
    // Held while authenticating: the agent's other clients need the same token.
    std::lock_guard lock(shared.mutex);
    if (shared.known && (!refused || shared.value != *refused)) return shared.value;
    if (refused)
        spdlog::debug("etcd refused the token of user '{}': authenticating again",
                      credentials.user);
    auto answer = m_transport->post(
        "/v3/auth/authenticate",
        json{{"name", credentials.user}, {"password", credentials.password}}.dump(), {}, deadline);
    auto said = json::parse(answer.body, nullptr, false);
    if (answer.status == 200 && said.is_object() && said.contains("token") &&
        said["token"].is_string()) {
        shared.value = said["token"].get<std::string>();
        shared.known = true;
        return shared.value;
    }
    if (contains(answer.body, "authentication is not enabled")) {
        // Nothing to authenticate with: requests go without a token until etcd asks for one.
        spdlog::debug("etcd at {} has authentication off: user '{}' is not needed", answer.endpoint,
                      credentials.user);
        shared.value.clear();
        shared.known = true;
        return {};
    }
    if (contains(answer.body, "authentication failed"))
        throw StoreError(StoreError::Kind::Other,
                         fmt::format("etcd refused user '{}': authentication failed (check "
                                     "--rdzv_conf user and password_file)",
                                     credentials.user));
    throw StoreError(StoreError::Kind::Other,
                     refusal(answer.endpoint, answer.status, answer.body, credentials.user));
}

}  // namespace ddprun
