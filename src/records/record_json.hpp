// Reading the records' untrusted JSON (records.cpp, record_messages.cpp): the
// size and depth limits checked before parsing, and FieldReader, which reads an
// object's fields by name and type and keeps the first problem as a one-line
// message instead of throwing. Internal to libddprun.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ddprun/records/records.hpp"

namespace ddprun::wire {

// A membership of thousands of nodes is a few MiB; past this it is not ours.
inline constexpr std::size_t k_max_record_bytes = 64 * 1024 * 1024;
// Our records are three levels deep; the limit keeps hostile text from
// costing stack in the recursive parser.
inline constexpr int k_max_json_depth = 16;
inline constexpr std::size_t k_max_tail_lines = 20;
inline constexpr std::size_t k_max_tail_line_bytes = 500;
inline constexpr std::size_t k_max_message_bytes = 4000;
// The largest count, rank or number a record may hold.
inline constexpr int k_max_int = 1 << 30;

// `text` cut to `limit` bytes, the cut marked with "...".
std::string truncated(std::string_view text, std::size_t limit);

// `text` as a JSON object, or why not (empty, too large, too deep, not JSON,
// not an object). Never throws.
std::expected<nlohmann::json, std::string> parse_object(std::string_view text);

// The string field `name` of `object`, "" when missing or not a string.
std::string string_field(const nlohmann::json& object, const char* name);

// Text for a one-line message: control characters (a newline from a stray
// writer) become spaces.
inline void to_one_line(std::string& text) {
    std::replace_if(
        text.begin(), text.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }, ' ');
}

// Reads fields of one object, remembering the first problem.
class FieldReader {
  public:
    using json = nlohmann::json;

    explicit FieldReader(const json& object) : m_object(object) {}

    // For fields an older record may lack, read only when present.
    bool has(const char* name) const { return m_object.contains(name); }

    template <class Int>
    void integer(const char* name, Int& out, Int min, Int max) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_number_integer()) return fail(name, "is not an integer");
        std::int64_t value = 0;
        if (field->is_number_unsigned()) {
            auto u = field->get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) return fail(name, "is out of range");
            value = static_cast<std::int64_t>(u);
        } else {
            value = field->get<std::int64_t>();
        }
        if (value < static_cast<std::int64_t>(min) || value > static_cast<std::int64_t>(max))
            return fail(name, fmt::format("is {}, out of range", value));
        out = static_cast<Int>(value);
    }

    // A finite number in [min, max] (an integer is one too).
    void number(const char* name, double& out, double min, double max) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_number()) return fail(name, "is not a number");
        const double value = field->get<double>();
        if (!(value >= min && value <= max))
            return fail(name, fmt::format("is {}, out of range", field->dump()));
        out = value;
    }

    void boolean(const char* name, bool& out) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_boolean()) return fail(name, "is not true or false");
        out = field->get<bool>();
    }

    void text(const char* name, std::string& out, std::size_t limit = k_max_message_bytes) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_string()) return fail(name, "is not a string");
        out = truncated(field->get_ref<const std::string&>(), limit);
    }

    // A message ddprun prints as its one-line error: control characters (a
    // newline from a stray writer) become spaces, and it must say something.
    void line(const char* name, std::string& out) {
        text(name, out);
        if (!ok()) return;
        to_one_line(out);
        if (out.find_first_not_of(' ') == std::string::npos) fail(name, "is empty");
    }

    void lines(const char* name, std::vector<std::string>& out) {
        const json* field = find(name);
        if (field == nullptr) return;
        if (!field->is_array()) return fail(name, "is not a list");
        out.clear();
        std::size_t first = field->size() > k_max_tail_lines ? field->size() - k_max_tail_lines : 0;
        for (std::size_t i = first; i < field->size(); ++i) {
            const json& line = (*field)[i];
            if (!line.is_string()) return fail(name, "holds something other than strings");
            out.push_back(truncated(line.get_ref<const std::string&>(), k_max_tail_line_bytes));
        }
    }

    // A list of exactly `count` integers in [min, max].
    template <class Int>
    void integers(const char* name, std::vector<Int>& out, std::size_t count, Int min, Int max) {
        const json* field = list(name, count);
        if (field == nullptr) return;
        out.clear();
        out.reserve(count);
        for (const json& item : *field) {
            if (!item.is_number_integer()) return fail(name, "holds something other than integers");
            bool too_large = item.is_number_unsigned() &&
                             item.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX);
            auto value = too_large ? INT64_MAX : item.get<std::int64_t>();
            if (too_large || value < static_cast<std::int64_t>(min) ||
                value > static_cast<std::int64_t>(max))
                return fail(name, fmt::format("holds {}, out of range", item.dump()));
            out.push_back(static_cast<Int>(value));
        }
    }

    // A list of exactly `count` strings.
    void texts(const char* name, std::vector<std::string>& out, std::size_t count) {
        const json* field = list(name, count);
        if (field == nullptr) return;
        out.clear();
        out.reserve(count);
        for (const json& item : *field) {
            if (!item.is_string()) return fail(name, "holds something other than strings");
            out.push_back(truncated(item.get_ref<const std::string&>(), k_max_message_bytes));
        }
    }

    const json* find(const char* name) {
        if (!m_error.empty()) return nullptr;
        auto it = m_object.find(name);
        if (it == m_object.end()) {
            fail(name, "is missing");
            return nullptr;
        }
        return &*it;
    }

    bool ok() const { return m_error.empty(); }
    const std::string& error() const { return m_error; }

  private:
    const json* list(const char* name, std::size_t count) {
        const json* field = find(name);
        if (field == nullptr) return nullptr;
        if (!field->is_array()) {
            fail(name, "is not a list");
            return nullptr;
        }
        if (field->size() != count) {
            fail(name, fmt::format("lists {} nodes, not {}", field->size(), count));
            return nullptr;
        }
        return field;
    }

    void fail(const char* name, const std::string& why) {
        if (m_error.empty()) m_error = fmt::format("field '{}' {}", name, why);
    }

    const json& m_object;
    std::string m_error;
};

// A node's record as JSON, for the records that carry one (records.cpp).
nlohmann::json node_json(const NodeInfo& info);
std::expected<NodeInfo, std::string> node_from(const nlohmann::json& object);
// The job's fingerprint, in the records that carry one (the claims, the membership).
void add_fingerprint(nlohmann::json& object, const Fingerprint& fingerprint);
void read_fingerprint(FieldReader& read, Fingerprint& fingerprint);
// Why a record read under `key` is not run `run_id`'s, if it is not.
std::optional<std::string> other_run(const nlohmann::json& object, const std::string& key,
                                     const std::string& run_id);

}  // namespace ddprun::wire
