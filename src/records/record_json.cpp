// Reading the records' untrusted JSON (see record_json.hpp).
#include "record_json.hpp"

#include "ddprun/base/text.hpp"
#include "ddprun/records/wire.hpp"

namespace ddprun::wire {

std::string truncated(std::string_view text, std::size_t limit) {
    if (text.size() <= limit) return std::string(text);
    return std::string(text.substr(0, limit)) + "...";
}

std::expected<nlohmann::json, std::string> parse_object(std::string_view text) {
    if (text.empty()) return std::unexpected(std::string("empty record"));
    if (text.size() > k_max_record_bytes)
        return std::unexpected(fmt::format("record of {} bytes is too large", text.size()));
    if (!json_nesting_within(text, k_max_json_depth))
        return std::unexpected(std::string("nested too deeply"));
    nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    if (value.is_discarded()) return std::unexpected("not JSON: " + quote_value(text));
    if (!value.is_object()) return std::unexpected("not a JSON object: " + quote_value(text));
    return value;
}

// json::value() throws when the field has another type; this does not.
std::string string_field(const nlohmann::json& object, const char* name) {
    auto it = object.find(name);
    if (it == object.end() || !it->is_string()) return {};
    return it->get<std::string>();
}

}  // namespace ddprun::wire
