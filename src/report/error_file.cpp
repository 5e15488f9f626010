// Reads the error file torch's @record leaves at TORCHELASTIC_ERROR_FILE (see
// error_file.hpp). The file is the worker's: it may be missing, half written,
// malformed, huge, nested without end or a FIFO, and none of that may crash or
// hang the agent, which reads it while the job is ending.
#include "ddprun/report/error_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddprun/base/fd.hpp"
#include "ddprun/base/fd_io.hpp"
#include "ddprun/base/text.hpp"

namespace ddprun {

namespace {

using nlohmann::json;

// torch writes a message and a traceback, a few KiB; anything far bigger is
// not an error file we should spend memory on.
constexpr std::size_t k_max_error_file_bytes = 1024 * 1024;
// torch's shape is three levels deep. The limit keeps a hostile file from
// costing stack or time anywhere JSON is walked recursively.
constexpr int k_max_json_depth = 64;
// The message goes into the failure summary: its first lines say what
// happened, the traceback is in the stderr tail.
constexpr std::size_t k_max_message_lines = 4;
constexpr std::size_t k_max_message_bytes = 500;
constexpr std::string_view k_truncated = " [...]";

bool is_blank(std::string_view text) {
    return trim(text).empty();
}

// Cuts at most `limit` bytes without splitting a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view text, std::size_t limit) {
    if (text.size() <= limit) return text;
    std::size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return text.substr(0, cut);
}

// The first non-blank lines of a message, capped, with the cut marked.
std::string shorten_message(std::string_view raw) {
    std::string out;
    std::size_t lines = 0;
    bool cut = false;
    std::size_t pos = 0;
    while (pos <= raw.size()) {
        const std::size_t start = pos;
        const std::size_t end = std::min(raw.find('\n', start), raw.size());
        pos = end + 1;
        const auto line = trim_right(raw.substr(start, end - start));
        if (line.empty() && out.empty()) continue;  // leading blank lines
        if (lines == k_max_message_lines) {
            cut = !is_blank(raw.substr(start));
            break;
        }
        if (!out.empty()) out += '\n';
        out += line;
        ++lines;
    }
    out.resize(trim_right(out).size());
    if (out.size() > k_max_message_bytes) {
        out.resize(trim_right(utf8_prefix(out, k_max_message_bytes)).size());
        cut = true;
    }
    if (cut) out += k_truncated;
    return out;
}

// The error is the last line of a Python traceback; used when a writer left
// the message out but kept the traceback.
std::string last_nonblank_line(std::string_view text) {
    text = trim_right(text);
    const auto start = text.rfind('\n');
    return std::string(start == std::string_view::npos ? text : text.substr(start + 1));
}

// torch writes the timestamp as a string ("1700000000"); older writers used a
// number. Anything else is dropped: the message is what matters.
std::string timestamp_text(const json& object) {
    if (!object.is_object()) return {};
    const auto it = object.find("timestamp");
    if (it == object.end()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer() || it->is_number_unsigned()) return it->dump();
    return {};
}

std::optional<ErrorFileInfo> parse_json(std::string_view text) {
    if (text.size() > k_max_error_file_bytes || !json_nesting_within(text, k_max_json_depth))
        return std::nullopt;
    const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return std::nullopt;
    const auto message_it = doc.find("message");
    if (message_it == doc.end()) return std::nullopt;

    std::string message;
    std::string timestamp;
    if (message_it->is_string()) {
        // {"message": "...", "timestamp": ...}: older torch and other writers.
        message = message_it->get<std::string>();
        timestamp = timestamp_text(doc);
    } else if (message_it->is_object()) {
        // {"message": {"message": "...", "extraInfo": {"py_callstack": ..., "timestamp": ...}}}
        const json& inner = *message_it;
        const auto extra_it = inner.find("extraInfo");
        const json* extra = extra_it != inner.end() && extra_it->is_object() ? &*extra_it : nullptr;
        const auto text_it = inner.find("message");
        if (text_it != inner.end() && text_it->is_string()) {
            message = text_it->get<std::string>();
        } else if (extra != nullptr && extra->contains("py_callstack") &&
                   (*extra)["py_callstack"].is_string()) {
            message = last_nonblank_line((*extra)["py_callstack"].get_ref<const std::string&>());
        }
        timestamp = extra != nullptr ? timestamp_text(*extra) : timestamp_text(inner);
    } else {
        return std::nullopt;
    }

    message = shorten_message(message);
    if (message.empty()) return std::nullopt;
    return ErrorFileInfo{std::move(message), std::move(timestamp)};
}

}  // namespace

std::optional<ErrorFileInfo> parse_error_file(std::string_view json_text) {
    try {
        return parse_json(json_text);
    } catch (...) {
        // Only allocation can throw here; an unreadable error file must never
        // take the launcher down with it.
        return std::nullopt;
    }
}

std::optional<ErrorFileInfo> read_error_file(const std::string& path) {
    // O_NONBLOCK: a FIFO planted at the path must not hang the agent.
    UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (!file) return std::nullopt;
    const int fd = file.get();

    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) return std::nullopt;
    if (static_cast<std::size_t>(info.st_size) > k_max_error_file_bytes) return std::nullopt;

    // A worker may still be writing it: growing past the limit is refused too.
    auto text = read_to_eof(fd, k_max_error_file_bytes);
    if (!text) return std::nullopt;
    return parse_error_file(*text);
}

}  // namespace ddprun
