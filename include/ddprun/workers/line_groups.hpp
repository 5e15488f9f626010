// LineGroups: the lines --collapse-lines holds, and the groups they are shown
// in. A line that several streams print alike is shown once, with their ranks;
// every stream's lines keep their order. A group is held for the window from its
// own first line, so lines that arrive within the window of each other meet
// whenever the group before them went out. Pure: the caller (LogMux) owns the
// clock, the timer and the console.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/line_splitter.hpp"

namespace ddprun {

class LineGroups {
  public:
    using Clock = std::chrono::steady_clock;

    // Holds `line` (without its '\n') that a stream printed, arriving at `now`
    // (never before the line held last). `bit` is the stream's among a group's
    // members (a worker's streams share one; 0: never grouped); `prefix` is shown
    // while its group has no other member.
    void hold(std::uint64_t bit, std::shared_ptr<const std::string> prefix, std::string_view line,
              Clock::time_point now);

    bool empty() const { return m_held.empty(); }
    // The bytes held, every line's.
    std::size_t bytes() const { return m_bytes; }
    // When the oldest line held arrived; empty() must be false.
    Clock::time_point oldest() const { return m_held.front().since; }

    // The group prefix of several members ("[0-3,5]: ").
    using GroupPrefix = std::function<const std::string&(std::uint64_t members)>;

    // Groups what is held: a line joins the earliest group of the same text that
    // its stream is not in and that comes after its previous line's group.
    // Appends the groups whose first line arrived at or before `until`
    // (Clock::time_point::max(): all), in order, one "prefix line\n" each, to
    // `out`; the lines of the others stay held. Returns how many went out.
    std::size_t take(Clock::time_point until, const GroupPrefix& group_prefix, OutputBuffer& out);

  private:
    struct Held {
        std::uint64_t bit;
        std::shared_ptr<const std::string> prefix;
        std::string line;
        Clock::time_point since;
    };
    struct Group {
        const Held* first;
        std::uint64_t members;
        std::size_t same_text;  // the previous group of the same text
    };

    std::vector<Held> m_held;  // in arrival order
    std::size_t m_bytes = 0;
    // take()'s, kept for their capacity.
    std::vector<Group> m_groups;
    std::vector<std::size_t> m_group_of;  // of each held line
};

}  // namespace ddprun
