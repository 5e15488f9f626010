// The lifeline: what a --hosts launcher says to one of its agents (started
// with --lifeline) over the agent's standard input, the ssh channel. Pure:
// the agent reads the bytes (agent_lifeline.cpp), this file gives them a
// meaning, so the protocol is tested without processes.
//
// Protocol, launcher to agent, lines of text ending in '\n':
//   signal N      N in 1..64: the agent acts as if a user had sent it signal N
//                 (how the launcher relays a Ctrl-C or SIGTERM to every host)
//   end of file   the launcher, or its ssh connection, is gone: the agent kills
//                 its workers at once and makes every other node do the same
// Any other line is warned about and ignored; a line longer than
// k_lifeline_max_line is one bad line, never buffered whole.
// The first line is the job's secret, "secret HEX", when the agent's command
// line has DDPRUN_RDZV_SECRET_ON_STDIN=1: the agent reads it before anything
// else (job_secret.hpp), so this reader never sees it; one that does (no
// marker) warns without showing it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

inline constexpr std::size_t k_lifeline_max_line = 4096;

struct LifelineMessage {
    enum class Kind { Signal, Bad } kind = Kind::Bad;
    int signal = 0;     // Kind::Signal: 1..64
    std::string shown;  // Kind::Bad: the line as a warning shows it (quoted, shortened)
};

// One line, without its '\n' (a trailing '\r' is allowed).
LifelineMessage parse_lifeline_line(std::string_view line);

// Cuts the bytes read from the link into lines and parses each one.
class LifelineReader {
  public:
    // The messages of the lines `bytes` completes, in order.
    std::vector<LifelineMessage> feed(std::string_view bytes);

  private:
    std::string m_line;         // the line so far, at most k_lifeline_max_line bytes
    bool m_too_long = false;    // the line so far was longer: dropped up to its '\n'
    std::size_t m_dropped = 0;  // how long it was
};

}  // namespace ddprun
