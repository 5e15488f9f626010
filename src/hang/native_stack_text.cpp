// Reads the native stacks eu-stack and gdb print (see stacks.hpp). Both are
// line-oriented, one block per thread:
//
//   eu-stack -p PID                     gdb -batch -ex "thread apply all bt"
//   PID 3675 - process                  Thread 1 (Thread 0x7f85 (LWP 3675) "sleeper"):
//   TID 3675:                           #0  0x00007f85d8a57545 in __GI___clock_nanosleep
//   #0  0x00007f85d8a57545 clock_nanosl…    (clock_id=0, ...) at ../sysdeps/...c:48
//   #1  0x00000000005d64b4              #1  0x00000000005d64b4 in ?? ()
//                                       #2  main () at sleeper.c:5
//                                       #3  0x... in poll () from /lib/.../libc.so.6
//
// eu-stack prints a frame without a symbol as its bare address; gdb prints
// "??", its argument values after the name (" (" ...), and sometimes no
// address. A C++ name carries its parameter list in both ("wait(int*) ()" in
// gdb), and parentheses nest inside it, so names are split with a small scanner
// rather than at the first '('.
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/base/text.hpp"
#include "ddprun/hang/stacks.hpp"

namespace ddprun {
namespace {

bool is_identifier_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The first '(' at nesting depth 0 of a demangled name: its parameter list, or
// with `spaced` the first one preceded by a blank (gdb's argument values).
// "(anonymous namespace)" and an operator's symbol ("operator()", "operator<")
// are not lists. npos when there is none.
std::size_t find_open_paren(std::string_view name, bool spaced) {
    constexpr std::string_view k_anonymous = "(anonymous namespace)";
    constexpr std::string_view k_operator = "operator";
    int angle = 0;
    int paren = 0;
    for (std::size_t i = 0; i < name.size(); ++i) {
        std::string_view rest = name.substr(i);
        if (rest.starts_with(k_anonymous)) {
            i += k_anonymous.size() - 1;
            continue;
        }
        if (rest.starts_with(k_operator) && (i == 0 || !is_identifier_char(name[i - 1]))) {
            i += k_operator.size();
            if (name.substr(i).starts_with("()") || name.substr(i).starts_with("[]")) {
                i += 2;
            } else {
                while (i < name.size() &&
                       std::string_view("<>=!+-*/%&|^~,").find(name[i]) != std::string_view::npos)
                    ++i;
            }
            --i;
            continue;
        }
        char c = name[i];
        if (c == '<') {
            ++angle;
        } else if (c == '>') {
            if (angle > 0) --angle;
        } else if (c == ')') {
            if (paren > 0) --paren;
        } else if (c == '(') {
            if (paren == 0 && angle == 0 && (!spaced || (i > 0 && name[i - 1] == ' '))) return i;
            ++paren;
        }
    }
    return std::string_view::npos;
}

// "TID 3675:" (eu-stack) or gdb's "Thread 1 (Thread 0x7f (LWP 3675) "name"):",
// "Thread 1 (LWP 3675):", "Thread 1 (process 3675):"; tid 0 when gdb names none.
std::optional<pid_t> parse_thread_header(std::string_view line) {
    auto number_after = [&](std::string_view marker) -> std::optional<pid_t> {
        std::size_t at = line.find(marker);
        if (at == std::string_view::npos) return std::nullopt;
        std::string_view digits = line.substr(at + marker.size());
        std::size_t end = 0;
        while (end < digits.size() && std::isdigit(static_cast<unsigned char>(digits[end]))) ++end;
        auto value = to_integer(digits.substr(0, end));
        if (!value || *value <= 0 || *value > 0x3fffffff) return std::nullopt;
        return static_cast<pid_t>(*value);
    };
    if (line.starts_with("TID ") && line.ends_with(':')) return number_after("TID ");
    if (!line.starts_with("Thread ") || !line.ends_with(':')) return std::nullopt;
    if (auto tid = number_after("(LWP ")) return tid;
    if (auto tid = number_after("(process ")) return tid;
    return pid_t{0};
}

// "#3  0x000055db19e0717a wait_forever" or a gdb frame line, or nullopt.
std::optional<NativeFrame> parse_frame(std::string_view line) {
    if (!line.starts_with('#')) return std::nullopt;
    std::size_t i = 1;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
    if (i == 1 || i == line.size() || line[i] != ' ') return std::nullopt;
    std::string_view rest = trim(line.substr(i));
    NativeFrame frame;
    bool gdb = true;  // gdb's argument values follow the name
    if (rest.starts_with("0x")) {
        std::size_t end = 2;
        while (end < rest.size() && std::isxdigit(static_cast<unsigned char>(rest[end]))) ++end;
        frame.address = std::string(rest.substr(0, end));
        rest = trim(rest.substr(end));
        if (rest.starts_with("in ")) {
            rest.remove_prefix(3);
        } else {
            gdb = false;
            if (rest.starts_with("- 1")) rest = trim(rest.substr(3));  // eu-stack -a
        }
    }
    if (gdb && !rest.starts_with('<')) {  // "<signal handler called>" is whole
        std::size_t args = find_open_paren(rest, true);
        if (args != std::string_view::npos) rest = trim(rest.substr(0, args));
    }
    if (rest != "??") frame.function = std::string(rest);
    return frame;
}

// What the summary shows of a function: no parameter list, no symbol version
// ("pthread_cond_wait@@GLIBC_2.3.2"), no glibc-internal alias prefix
// ("__GI___clock_nanosleep").
std::string short_name(std::string_view function) {
    std::string_view name = function;
    if (!name.starts_with('<')) {
        name = name.substr(0, find_open_paren(name, false));
        name = name.substr(0, name.find('@'));
        if (name.starts_with("__GI___"))
            name.remove_prefix(7);
        else if (name.starts_with("__GI_"))
            name.remove_prefix(5);
    }
    name = trim(name);
    return std::string(name.empty() ? function : name);
}

}  // namespace

std::vector<NativeThread> parse_native_stack(std::string_view text) {
    std::vector<NativeThread> threads;
    while (!text.empty()) {
        std::size_t newline = text.find('\n');
        std::string_view line = trim_right(text.substr(0, newline));
        text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
        if (auto tid = parse_thread_header(line)) {
            threads.push_back(NativeThread{*tid, {}});
        } else if (auto frame = parse_frame(line)) {
            if (threads.empty()) threads.emplace_back();  // frames without a thread header
            threads.back().frames.push_back(std::move(*frame));
        }
    }
    return threads;
}

std::string native_top_frames(std::string_view text, pid_t pid, int count) {
    auto threads = parse_native_stack(text);
    if (threads.empty()) return {};
    const NativeThread* chosen = &threads.front();
    for (const auto& thread : threads)
        if (thread.tid == pid) chosen = &thread;
    const auto& frames = chosen->frames;
    bool any_symbol = false;
    for (const auto& frame : frames) any_symbol = any_symbol || !frame.function.empty();
    std::vector<std::string> names;
    for (std::size_t i = 0; i < frames.size() && std::cmp_less(names.size(), count); ++i) {
        if (!any_symbol) {
            names.push_back(frames[i].address);
            continue;
        }
        if (frames[i].function.empty()) continue;
        // Reserved names ("__futex_abstimed_wait_common64", "__GI___poll") are the C
        // library's insides; with its debug info gdb shows five of them under one
        // pthread_cond_wait. A run of them is shown as its outermost, the call made.
        auto reserved = [](const NativeFrame& frame) { return frame.function.starts_with("__"); };
        if (reserved(frames[i])) {
            std::size_t last = i;
            for (std::size_t j = i + 1; j < frames.size() && reserved(frames[j]); ++j) last = j;
            std::string name = short_name(frames[last].function);
            std::size_t underscores = name.find_first_not_of('_');
            if (underscores != std::string::npos) name.erase(0, underscores);
            names.push_back(std::move(name));
            i = last;
            continue;
        }
        names.push_back(short_name(frames[i].function));
    }
    std::string out;
    for (const auto& name : names) {
        if (!out.empty()) out += " <- ";
        out += name;
    }
    return out;
}

}  // namespace ddprun
