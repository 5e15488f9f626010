// DuplicateFilter: torchrun 2.x's --duplicate-stdout-filters / --duplicate-stderr-filters
// for one worker stream. torchrun tails a tee'd stream's log file line by line and copies
// every line that contains one of the filters (plain substrings, not regexes) to the
// attempt's filtered_stdout.log / filtered_stderr.log, with the console's prefix before it.
// This does the same on the bytes LogMux carries: fed chunks that split lines anywhere,
// it appends the matching whole lines, prefixed, to a buffer for one write. Pure: no I/O.
//
// A line ends at '\n' and is matched with it, as torchrun's readline() gives it (so a
// filter "done\n" finds lines that end in "done"; one with a '\n' before its end finds
// nothing). torchrun, reading in Python's text mode, also ends a line at a bare '\r' (a
// progress bar's redraw); here such a line is copied whole, as the worker wrote it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

class DuplicateFilter {
  public:
    using Needles = std::vector<std::string>;

    // A line still unfinished after `max_line_bytes` (more than one read carries, so
    // chunks end inside it) is matched on what came of it so far, then copied to its end
    // or skipped: memory stays bounded when a worker writes megabytes without a newline.
    explicit DuplicateFilter(std::shared_ptr<const Needles> needles,
                             std::size_t max_line_bytes = 1024 * 1024);

    // Appends to `out`, for every line that `chunk` completes and that contains a needle,
    // `prefix` and the line with its '\n'.
    void feed(std::string_view chunk, std::string_view prefix, std::string& out);

    // The stream ended: a last line without '\n' that matches goes out with one added, so
    // that the file holds whole lines only.
    void finish(std::string_view prefix, std::string& out);

  private:
    enum class State {
        Collecting,  // m_line holds the start of the current line (maybe none of it yet)
        Copying,     // a long line matched on its start: the rest is copied as it comes
        Skipping,    // a long line did not: the rest is dropped
    };

    bool matches(std::string_view line) const;
    // The first line of `text` (whole lines only) at or after `from` that matches:
    // where one of them holds a needle, or npos.
    std::size_t next_hit(std::string_view text, std::size_t from);
    void copy_lines(std::string_view text, std::string_view prefix, std::string& out);
    // The part of the current line that `piece` holds (ending at its '\n', if any).
    void continue_line(std::string_view piece, std::string_view prefix, std::string& out);

    std::shared_ptr<const Needles> m_needles;
    std::size_t m_max_line_bytes;
    State m_state = State::Collecting;
    std::string m_line;
    std::vector<std::size_t> m_hits;  // per needle, its next hit in the text scanned
};

// The ECMAScript regex that --report-lines' LineMatcher (stderr_tail.hpp) uses to find a
// line containing `needle`, as a --duplicate-stderr-filters string finds it in the file:
// every character literal. LineMatcher sees lines without their terminator, so a trailing
// '\n' becomes "$"; nullopt for a needle with a '\n' before its end (no line holds it).
std::optional<std::string> duplicate_filter_pattern(std::string_view needle);

}  // namespace ddprun
