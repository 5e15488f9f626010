// Error: an expected failure as a value. Every layer that can fail for a
// reason the user should read (a bad flag, a missing program, a rendezvous
// that went wrong, a syscall that failed) returns one: one line naming the
// thing, the value and what to do, and the exit code ddprun ends with if the
// failure ends the job. Exceptions are kept for the unexpected.
#pragma once

#include <exception>
#include <expected>
#include <string>

#include "ddprun/base/exit_codes.hpp"

namespace ddprun {

struct Error {
    std::string message;
    int exit_code;
};

// The result of an operation that yields nothing but may fail.
using Status = std::expected<void, Error>;

inline Error usage_error(std::string message) {
    return {std::move(message), exit_code::kUsage};
}

inline Error rendezvous_error(std::string message) {
    return {std::move(message), exit_code::kRendezvous};
}

// "<call>: <strerror(errno)>", for a failed syscall; reads errno.
Error system_error(const std::string& call);

// What an exception that escaped a thread means (main's std::terminate handler
// says it in one line and exits with its code, instead of an abort): a
// connection error is the rendezvous store lost (75), as when torch 1.13's
// TCPStore client lets a reset escape its own callback thread after the
// store's host died; anything else is ddprun's own failure (70).
Error uncaught_error(std::exception_ptr error);

}  // namespace ddprun
