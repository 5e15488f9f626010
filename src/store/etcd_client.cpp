// Calls to etcd's v3 JSON gateway (see etcd_client.hpp); the HTTP(S) itself
// is the OpenSSL plugin's EtcdTransport (openssl_plugin.hpp).
#include "ddprun/store/etcd_client.hpp"

#include <algorithm>
#include <array>
#include <thread>

#include <fmt/format.h>

#include "ddprun/base/text.hpp"
#include "ddprun/store/openssl_plugin.hpp"
#include "etcd_answers.hpp"

namespace ddprun {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view k_base64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::int64_t etcd_int64(const json& object, const char* name) {
    if (!object.is_object() || !object.contains(name)) return 0;
    const json& value = object[name];
    if (value.is_number_integer()) return value.get<std::int64_t>();
    if (value.is_string()) return to_integer(value.get<std::string>()).value_or(0);
    return 0;
}

std::int64_t revision_of(const json& kv) {
    return etcd_int64(kv, "mod_revision");
}

std::int64_t header_revision(const json& answer) {
    return answer.contains("header") ? etcd_int64(answer["header"], "revision") : 0;
}

// RFC 4648 base64 with padding, as the gateway writes protobuf bytes fields.
std::string etcd_base64(const std::string& raw) {
    std::string out;
    out.reserve(4 * ((raw.size() + 2) / 3));
    for (std::size_t at = 0; at < raw.size(); at += 3) {
        const std::size_t left = raw.size() - at;
        auto byte = [&raw](std::size_t i) -> std::uint32_t {
            return static_cast<unsigned char>(raw[i]);
        };
        std::uint32_t group = byte(at) << 16;
        if (left > 1) group |= byte(at + 1) << 8;
        if (left > 2) group |= byte(at + 2);
        out += k_base64[(group >> 18) & 63];
        out += k_base64[(group >> 12) & 63];
        out += left > 1 ? k_base64[(group >> 6) & 63] : '=';
        out += left > 2 ? k_base64[group & 63] : '=';
    }
    return out;
}

// Strict: whole groups of four, padding only at the end; anything else is
// not what etcd sends.
std::string etcd_unbase64(const std::string& text) {
    static const std::array<int, 256> value = [] {
        std::array<int, 256> table{};
        table.fill(-1);
        for (std::size_t i = 0; i < k_base64.size(); ++i)
            table[static_cast<unsigned char>(k_base64[i])] = static_cast<int>(i);
        return table;
    }();
    auto not_base64 = [] {
        return StoreError(StoreError::Kind::Other, "etcd sent a value that is not base64");
    };
    if (text.size() % 4 != 0) throw not_base64();
    std::string out;
    out.reserve(3 * (text.size() / 4));
    for (std::size_t at = 0; at < text.size(); at += 4) {
        const bool last = at + 4 == text.size();
        const std::size_t padding =
            last ? (text[at + 3] == '=' ? (text[at + 2] == '=' ? 2 : 1) : 0) : 0;
        std::uint32_t group = 0;
        for (std::size_t i = 0; i < 4; ++i) {
            const int digit = i < 4 - padding ? value[static_cast<unsigned char>(text[at + i])] : 0;
            if (digit < 0) throw not_base64();
            group = group << 6 | static_cast<std::uint32_t>(digit);
        }
        out += static_cast<char>((group >> 16) & 0xff);
        if (padding < 2) out += static_cast<char>((group >> 8) & 0xff);
        if (padding < 1) out += static_cast<char>(group & 0xff);
    }
    return out;
}

std::optional<std::string> check_tls_files(const EtcdTls& tls) {
    return openssl_plugin().check_tls_files(tls);
}

EtcdClient::EtcdClient(EtcdOptions options) : m_options(std::move(options)) {
    if (m_options.endpoints.empty())
        throw StoreError(StoreError::Kind::Other, "no etcd endpoint given (--rdzv_endpoint)");
    m_transport = openssl_plugin().etcd_transport(m_options);
}

EtcdClient::~EtcdClient() = default;

void EtcdClient::cancel() {
    m_transport->cancel();
}

std::string EtcdClient::current_endpoint() const {
    return m_transport->current_endpoint();
}

template <class Attempt>
auto EtcdClient::riding_outage(Clock::time_point deadline, Attempt attempt) {
    constexpr auto k_pause = std::chrono::milliseconds(100);
    const auto give_up = std::min(deadline, Clock::now() + m_options.outage_grace);
    for (;;) {
        try {
            auto answer = attempt();
            if (m_options.reached) m_options.reached->store(true);
            return answer;
        } catch (const StoreError& error) {
            const bool outage = error.kind() == StoreError::Kind::Connection && m_options.reached &&
                                m_options.reached->load();
            if (!outage || Clock::now() + k_pause >= give_up) throw;
        }
        std::this_thread::sleep_for(k_pause);
    }
}

json EtcdClient::call(const std::string& path, const json& body) {
    const auto deadline = Clock::now() + m_options.timeout;
    const std::string text = body.dump();
    std::string sent = token(deadline);
    auto post = [&] { return m_transport->post(path, text, sent, deadline); };
    auto answer = riding_outage(deadline, post);
    if (m_options.credentials && answer.status != 200 &&
        token_refused(answer.status, answer.body)) {
        // A new token, once: a second refusal is etcd's answer.
        sent = token(deadline, sent);
        answer = riding_outage(deadline, post);
    }
    auto parsed = json::parse(answer.body, nullptr, false);
    if (answer.status != 200 || !parsed.is_object())
        throw StoreError(StoreError::Kind::Other,
                         refusal(answer.endpoint, answer.status, answer.body,
                                 m_options.credentials ? m_options.credentials->user : ""));
    return parsed;
}

json EtcdClient::watch_for_put(const std::string& key, const std::string& range_end,
                               std::int64_t start_revision, Clock::time_point deadline) {
    for (std::int64_t from = start_revision; Clock::now() < deadline;) {
        auto batch = watch_events(key, range_end, from, deadline);
        for (const json& event : batch.events)
            if (!event.contains("type") || event["type"] == "PUT")
                return event.contains("kv") ? event["kv"] : json::object();
        if (batch.events.empty()) break;  // the deadline passed
        from = std::max(from, batch.revision + 1);
    }
    throw StoreError(StoreError::Kind::Timeout, fmt::format("timed out waiting for '{}'", key));
}

EtcdClient::Events EtcdClient::watch_events(const std::string& key, const std::string& range_end,
                                            std::int64_t start_revision,
                                            Clock::time_point deadline) {
    json create = {{"key", etcd_base64(key)}, {"start_revision", start_revision}};
    if (!range_end.empty()) create["range_end"] = etcd_base64(range_end);
    const std::string request_body = json{{"create_request", create}}.dump();
    std::string sent = token(deadline);
    // A watch is an answer that never ends, one JSON message per line; the
    // first that carries events ends it.
    for (bool renewed = false;;) {
        Events batch;
        std::string cancelled;  // why etcd cancelled the watch, if it did
        auto end = riding_outage(deadline, [&] {
            return m_transport->stream(
                "/v3/watch", request_body, sent, deadline, [&](const std::string& line) {
                    auto message = json::parse(line, nullptr, false);
                    if (!message.is_object() || !message.contains("result")) return false;
                    const json& result = message["result"];
                    if (result.value("canceled", false)) {
                        // etcd refused the watch (a token it forgot, no permission).
                        cancelled = result.value("cancel_reason", std::string("no reason given"));
                        return true;
                    }
                    if (!result.contains("events") || !result["events"].is_array() ||
                        result["events"].empty())
                        return false;
                    batch.events = result["events"].get<std::vector<json>>();
                    for (const json& event : batch.events)
                        if (event.contains("kv"))
                            batch.revision = std::max(batch.revision, revision_of(event["kv"]));
                    return true;
                });
        });
        if (end.kind == EtcdTransport::StreamEnd::Kind::Refused)
            throw StoreError(StoreError::Kind::Other, refusal(end.endpoint, end.status, end.body));
        if (!cancelled.empty()) {
            if (m_options.credentials && !renewed && token_refused(0, cancelled)) {
                renewed = true;
                sent = token(deadline, sent);
                continue;
            }
            const std::string user = m_options.credentials ? m_options.credentials->user : "";
            throw StoreError(StoreError::Kind::Other,
                             refusal(end.endpoint, 200, json{{"message", cancelled}}.dump(), user));
        }
        return batch;  // no events when the deadline passed
    }
}

}  // namespace ddprun
