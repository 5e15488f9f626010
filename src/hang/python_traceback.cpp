// Reads the tracebacks CPython's faulthandler prints on a fatal signal (see
// stacks.hpp). The format is CPython's Python/traceback.c (3.11):
//
//   Fatal Python error: Aborted
//   <blank>
//   Thread 0x00007ff2433ad6c0 (most recent call first):
//     File "/tmp/t.py", line 6 in helper_loop
//   <blank>
//   Current thread 0x00007ff243668040 (most recent call first):
//     File "/tmp/t.py", line 12 in wait_here
//   <blank>
//   Extension modules: torch._C, ... (total: 27)
//
// with "???" for an unknown file name or line, "  <no Python frame>",
// "  Garbage-collecting", "  ..." after 100 frames, "..." after 100 threads,
// and "Stack (most recent call first):" when only one thread is dumped.
// Python 3.14 puts the thread's name (as the OS has it, at most 15 bytes) in
// brackets after its id, `Thread 0x00007f4e... [Thread-1 (helpe] (most
// recent call first):`, and adds the current thread's C stack after the
// Python ones ("Current thread's C stack trace ...", "  Binary file ..."). File
// names are printed unescaped (a '"' in one is not quoted), so a frame line is
// split at its last `", line `.
#include <cctype>
#include <optional>
#include <string>

#include "ddprun/base/text.hpp"
#include "ddprun/hang/stacks.hpp"

namespace ddprun {
namespace {

constexpr std::string_view k_first_call = " (most recent call first):";

// A thread header, or nullopt. The last line of a dump cut short may hold only
// the start of one.
std::optional<PythonThread> parse_thread_header(std::string_view line, bool cut) {
    PythonThread thread;
    if (line == "Stack (most recent call first):") {
        thread.current = true;
        return thread;
    }
    if (line.starts_with("Current thread 0x")) {
        thread.current = true;
        line.remove_prefix(std::string_view("Current thread ").size());
    } else if (line.starts_with("Thread 0x")) {
        line.remove_prefix(std::string_view("Thread ").size());
    } else {
        return std::nullopt;
    }
    std::size_t hex_end = 2;
    while (hex_end < line.size() && std::isxdigit(static_cast<unsigned char>(line[hex_end])))
        ++hex_end;
    thread.id = std::string(line.substr(0, hex_end));
    std::string_view rest = line.substr(hex_end);
    if (rest.starts_with(" [")) {
        // The name may hold anything, brackets too: the header ends "] (most ...".
        std::size_t close = rest.rfind(']');
        if (close == std::string_view::npos) return cut ? std::optional(thread) : std::nullopt;
        rest.remove_prefix(close + 1);
    }
    if (rest == k_first_call || (cut && k_first_call.starts_with(rest))) return thread;
    return std::nullopt;
}

// `  File "/tmp/t.py", line 12 in wait_here`, or nullopt.
std::optional<PythonFrame> parse_frame(std::string_view line) {
    constexpr std::string_view k_file = "  File ";
    constexpr std::string_view k_line = ", line ";
    if (!line.starts_with(k_file)) return std::nullopt;
    line.remove_prefix(k_file.size());
    PythonFrame frame;
    if (line.starts_with('"')) {
        std::size_t end = line.rfind("\", line ");
        if (end == std::string_view::npos || end == 0) return std::nullopt;
        frame.file = std::string(line.substr(1, end - 1));
        line.remove_prefix(end + 1 + k_line.size());
    } else if (line.starts_with("???, line ")) {
        frame.file = "???";
        line.remove_prefix(3 + k_line.size());
    } else {
        return std::nullopt;
    }
    std::size_t in = line.find(" in ");
    if (in == std::string_view::npos) return std::nullopt;
    std::string_view number = line.substr(0, in);
    if (number != "???") {
        auto value = to_integer(number);
        if (!value || *value < 0 || *value > 1'000'000'000) return std::nullopt;
        frame.line = static_cast<int>(*value);
    }
    frame.function = std::string(line.substr(in + 4));
    return frame;
}

// Lines inside a thread's block that are not frames.
bool is_thread_note(std::string_view line) {
    return line == "  <no Python frame>" || line == "  Garbage-collecting" || line == "  ...";
}

std::string_view base_name(std::string_view path) {
    std::size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<PythonThread> parse_faulthandler(std::string_view stderr_text) {
    std::vector<PythonThread> last_dump;
    bool in_dump = false;    // thread blocks of one dump are being read
    bool in_thread = false;  // the last line read belongs to last_dump.back()
    while (!stderr_text.empty()) {
        std::size_t newline = stderr_text.find('\n');
        bool cut = newline == std::string_view::npos;
        std::string_view line = stderr_text.substr(0, newline);
        stderr_text.remove_prefix(cut ? stderr_text.size() : newline + 1);
        if (line.ends_with('\r')) line.remove_suffix(1);

        if (auto thread = parse_thread_header(line, cut)) {
            // A header after other output starts a new dump: a worker that dumped
            // before (faulthandler.dump_traceback_later) is described by its last.
            if (!in_dump) last_dump.clear();
            last_dump.push_back(std::move(*thread));
            in_dump = in_thread = true;
            continue;
        }
        if (in_thread) {
            if (auto frame = parse_frame(line)) {
                last_dump.back().frames.push_back(std::move(*frame));
                continue;
            }
            if (is_thread_note(line)) continue;
        }
        in_thread = false;
        // Threads are separated by one blank line; "..." stands for threads past 100.
        if (in_dump && (line.empty() || line == "...")) continue;
        in_dump = false;
    }
    return last_dump;
}

std::string python_top_frames(const std::vector<PythonThread>& threads, int count) {
    if (threads.empty()) return {};
    const PythonThread* chosen = &threads.back();
    for (const auto& thread : threads)
        if (thread.current) chosen = &thread;
    std::string out;
    int shown = 0;
    for (const auto& frame : chosen->frames) {
        if (shown == count) break;
        if (shown++ > 0) out += " <- ";
        out += frame.function;
        out += " (";
        out += base_name(frame.file);
        if (frame.line > 0) out += ":" + std::to_string(frame.line);
        out += ")";
    }
    return out;
}

}  // namespace ddprun
