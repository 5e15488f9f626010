// Stacks of a hung worker: what a node captures before it stops its
// workers, and what the failure summary shows of it.
//
// Two kinds. Native stacks of every thread come from an outside tool run as a
// short-lived child, eu-stack (elfutils, tens of ms) or else gdb (seconds).
// Python tracebacks come from the worker itself: with PYTHONFAULTHANDLER=1 in
// its environment, SIGABRT makes CPython print every thread's traceback to
// stderr before it dies; ddprun collects that text and parses it here.
//
// The summary line of a stack ("top frames") lists the innermost frames first,
// joined by " <- ":
//   native: function names without their parameter lists or symbol versions,
//           e.g. "pthread_cond_wait <- c10d::Work::wait <- _PyObject_MakeTpCall"
//   Python: "function (file:line)" with the file's base name,
//           e.g. "all_reduce (distributed_c10d.py:1541) <- train_step (train.py:5)"
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/base/error.hpp"

namespace ddprun {

// ---- native stacks ----

struct NativeStack {
    pid_t pid = 0;
    std::string text;   // the tool's output, when it printed at least one frame
    std::string error;  // else one line saying why there is no stack
};

// The tool capture_native_stacks uses: "eu-stack" or "gdb", whichever is found
// first on PATH in that order, or "" when neither is.
std::string native_stack_tool();

// The one-line reason given for every pid when no tool is found.
inline constexpr std::string_view k_no_stack_tool =
    "no eu-stack or gdb found: native stacks not captured (apt install elfutils)";

// Captures the stacks of all threads of each pid, all pids in parallel, and
// returns when every tool has finished or `deadline` has passed, whichever
// comes first; a tool still running then is killed and reaped, and its pid
// gets an error saying it timed out. One result per pid, in the order given.
// Blocking: call it from a thread of its own, never from the event loop.
//
// `tool` is "eu-stack", "gdb", or a path to either. Each tool is a child of
// this process owned by the calling thread (owned_children, process_tree.hpp):
// a waitpid(-1) loop elsewhere in the process (the agent's reaper) keeps its
// status for this thread and never reports it. Each tool's output is kept up
// to `max_bytes`.
std::vector<NativeStack> capture_native_stacks(const std::vector<pid_t>& pids,
                                               std::chrono::milliseconds deadline,
                                               std::string_view tool = native_stack_tool(),
                                               std::size_t max_bytes = 256 * 1024);

struct NativeFrame {
    std::string address;   // "0x00007f85d8a57545"; empty where gdb printed none
    std::string function;  // as printed; empty when the tool knew no symbol
};

struct NativeThread {
    pid_t tid = 0;                    // 0 when the tool did not say
    std::vector<NativeFrame> frames;  // innermost first
};

// The threads of eu-stack's or gdb's ("thread apply all bt") output, in the
// order printed. Lines it does not know are skipped; never throws.
std::vector<NativeThread> parse_native_stack(std::string_view text);

// The first `count` frames that have a symbol of the thread whose tid is `pid`
// (the main thread), else of the first thread; frames without a symbol are
// shown by address only when no frame has one. A run of reserved names (the C
// library's insides: "__futex_abstimed_wait_common64 <- __GI___futex_..." under
// one pthread_cond_wait) counts as one frame, its outermost, without leading
// underscores. "" when there is no frame.
std::string native_top_frames(std::string_view text, pid_t pid, int count = 3);

// ---- Python tracebacks (faulthandler) ----

struct PythonFrame {
    std::string file;
    int line = 0;  // 0 where faulthandler printed "???"
    std::string function;
};

struct PythonThread {
    std::string id;                   // "0x00007ff243668040"
    bool current = false;             // the thread that handled the fatal signal
    std::vector<PythonFrame> frames;  // most recent call first
};

// The threads of the last faulthandler dump in a worker's stderr, in the
// order printed (CPython lists the newest thread first, the main thread
// last). Other output before or after the dump is ignored, a dump cut short
// keeps what it has; never throws. Empty when there is no dump.
std::vector<PythonThread> parse_faulthandler(std::string_view stderr_text);

// The first `count` frames of the current thread, else (the signal landed on
// a thread Python does not know) of the last thread listed, the main thread.
// "" when there is no frame.
std::string python_top_frames(const std::vector<PythonThread>& threads, int count = 3);

// ---- the worker process ----

// True when the executable is a CPython interpreter: its base name is python,
// python3, python3.11, ... (a "(deleted)" suffix allowed: the package was
// upgraded under a running worker).
bool is_python_executable(std::string_view path);
// The same for /proc/PID/exe; false when it cannot be read.
bool is_python(pid_t pid);

// Sets the process's RLIMIT_CORE to 0 (prlimit), so that the SIGABRT that
// makes Python print its tracebacks writes no core file. The error names the
// call and the pid.
Status disable_core_dumps(pid_t pid);

}  // namespace ddprun
