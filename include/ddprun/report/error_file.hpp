// The error file torch's @record writes at TORCHELASTIC_ERROR_FILE when a
// worker dies of an exception: the message the failure summary shows. Read
// as untrusted input (the worker wrote it, maybe half-way).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ddprun {

// The parts of torch's error file (written by @record at
// TORCHELASTIC_ERROR_FILE) that the report shows. Tolerates every shape torch
// has written: {"message": "..."}, {"message": {"message": "...",
// "extraInfo": {"timestamp": "..."}}}; anything else yields nullopt, never an
// exception.
struct ErrorFileInfo {
    std::string message;
    std::string timestamp;  // as written, may be empty
};
std::optional<ErrorFileInfo> parse_error_file(std::string_view json);
// Reads and parses; nullopt when the file is missing, unreadable, too large
// (over 1 MiB) or malformed.
std::optional<ErrorFileInfo> read_error_file(const std::string& path);

}  // namespace ddprun
