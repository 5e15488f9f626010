// The job secret (signed_store.hpp) and where it comes from, in this order:
//   - an agent of a --hosts launcher started with DDPRUN_RDZV_SECRET_ON_STDIN=1
//     reads it from the first line of its standard input ("secret HEX"), the
//     lifeline, before anything else (lifeline.hpp);
//   - --rdzv_conf secret_file=PATH, else DDPRUN_RDZV_SECRET_FILE=PATH: the file's
//     bytes, at least 32, refused when its group or others may access it (as ssh
//     refuses a loose key);
//   - DDPRUN_RDZV_SECRET: the value's bytes, at least 32.
// Never a flag value (ps and shell history would show it), never printed, and
// never passed on to workers: DDPRUN_RDZV_SECRET and the marker leave the
// environment once read.
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "ddprun/base/environment.hpp"
#include "ddprun/base/error.hpp"
#include "ddprun/config/config.hpp"

namespace ddprun {

inline constexpr std::string_view k_secret_variable = "DDPRUN_RDZV_SECRET";
inline constexpr std::string_view k_secret_file_variable = "DDPRUN_RDZV_SECRET_FILE";
inline constexpr std::string_view k_secret_on_stdin_variable = "DDPRUN_RDZV_SECRET_ON_STDIN";
// The first line of a lifeline that carries the secret: "secret HEX".
inline constexpr std::string_view k_secret_line = "secret ";

// The user's secret (file or variable; not the lifeline's): empty if none was
// given. Errors: a usage error (2) naming the source, never the secret.
std::expected<std::string, Error> read_user_secret(const RendezvousSettings& settings,
                                                   const Environment& env);

// An agent's secret: the lifeline's first line where `env` has the marker and
// this is a --lifeline agent, else read_user_secret(). Reads standard input one
// byte at a time (nothing past the line is taken from the lifeline's reader),
// for at most `bound`.
std::expected<std::string, Error> read_agent_secret(const LaunchConfig& config,
                                                    const Environment& env, int bound_ms = 30000);

// Removes the secret and the marker from `env` and from this process's environment.
void forget_secret_variables(Environment& env);

// 32 random bytes (getrandom(2)): a --hosts job's own secret.
std::string make_secret();

}  // namespace ddprun
