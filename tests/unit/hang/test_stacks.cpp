// The stack parsers (stacks.hpp) on real recorded outputs of eu-stack, gdb and
// CPython's faulthandler (tests/data/stacks/README.md says how each was made),
// on the same cut at every byte, and on garbage: they must never throw or crash.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "ddprun/hang/stacks.hpp"
#include "support/build_paths.hpp"

namespace ddprun {
namespace {

std::string recorded(const std::string& name) {
    std::ifstream in(std::string(ddprun_test::build_paths::stacks_data_dir) + "/" + name,
                     std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().empty()) ADD_FAILURE() << "missing test data " << name;
    return text.str();
}

TEST(NativeStackText, EuStackOfSleepingCProgram) {
    std::string text = recorded("eu-stack_c_sleep.txt");
    auto threads = parse_native_stack(text);
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(threads[0].tid, 3675);
    ASSERT_EQ(threads[0].frames.size(), 8u);
    EXPECT_EQ(threads[0].frames[0].address, "0x00007f85d8a57545");
    EXPECT_EQ(threads[0].frames[0].function, "clock_nanosleep@GLIBC_2.2.5");
    EXPECT_EQ(threads[0].frames[3].function, "wait_forever");
    EXPECT_EQ(threads[1].tid, 3676);
    EXPECT_EQ(threads[1].frames.size(), 4u);
    EXPECT_EQ(native_top_frames(text, 3675), "clock_nanosleep <- nanosleep <- sleep");
    EXPECT_EQ(native_top_frames(text, 3675, 5),
              "clock_nanosleep <- nanosleep <- sleep <- wait_forever <- main");
    EXPECT_EQ(native_top_frames(text, 3676, 2), "pause <- spin");
    // A pid not in the text: the first thread printed.
    EXPECT_EQ(native_top_frames(text, 42, 1), "clock_nanosleep");
}

TEST(NativeStackText, GdbOfSleepingCProgram) {
    std::string text = recorded("gdb_c_sleep.txt");
    auto threads = parse_native_stack(text);
    // The line gdb prints on attach, before any thread header, is not a frame.
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(threads[0].tid, 3676);
    EXPECT_EQ(threads[1].tid, 3675);
    ASSERT_EQ(threads[1].frames.size(), 5u);
    EXPECT_EQ(threads[1].frames[0].function, "__GI___clock_nanosleep");
    EXPECT_EQ(threads[1].frames[4].function, "main");
    // Its glibc debug info names the insides ("__GI___nanosleep"): a run of them
    // is shown as the outermost, the call the program made.
    EXPECT_EQ(native_top_frames(text, 3675), "sleep <- wait_forever <- main");
    EXPECT_EQ(native_top_frames(text, 3676), "libc_pause <- spin <- start_thread");
}

TEST(NativeStackText, TorchProcessSkipsFramesWithoutSymbol) {
    for (const char* file : {"eu-stack_torch_sleep.txt", "gdb_torch_sleep.txt"}) {
        SCOPED_TRACE(file);
        std::string text = recorded(file);
        auto threads = parse_native_stack(text);
        ASSERT_EQ(threads.size(), 2u);
        EXPECT_EQ(native_top_frames(text, 3918),
                  "clock_nanosleep <- PyObject_Vectorcall <- _PyEval_EvalFrameDefault");
    }
}

TEST(NativeStackText, GlooAllReduce) {
    std::string eu = recorded("eu-stack_gloo_all_reduce.txt");
    EXPECT_EQ(native_top_frames(eu, 10232),
              "futex_abstimed_wait_common <- pthread_cond_wait <- c10d::Work::wait");
    std::string gdb = recorded("gdb_gloo_all_reduce.txt");
    auto threads = parse_native_stack(gdb);
    ASSERT_EQ(threads.size(), 6u);
    EXPECT_EQ(threads[0].tid, 10297);
    // A C++ minimal symbol keeps its parameter list in gdb's text; the summary drops it.
    EXPECT_EQ(threads[0].frames[6].function,
              "gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, "
              "std::ratio<1l, 1000l> >)");
    EXPECT_EQ(native_top_frames(gdb, 10297),
              "pthread_cond_clockwait64 <- gloo::transport::tcp::UnboundBuffer::waitRecv <- "
              "c10d::ProcessGroupGloo::AsyncWork::execute");
    EXPECT_EQ(native_top_frames(gdb, 10232),
              "pthread_cond_wait <- c10d::Work::wait <- _PyObject_MakeTpCall");
}

TEST(NativeStackText, FrameLineForms) {
    auto function_of = [](std::string line) {
        auto threads = parse_native_stack(line);
        if (threads.size() != 1 || threads[0].frames.size() != 1) return std::string("<none>");
        return threads[0].frames[0].function;
    };
    EXPECT_EQ(function_of("#0  0x00007f in poll () from /lib/x86_64-linux-gnu/libc.so.6"), "poll");
    EXPECT_EQ(function_of("#1  0x00007f in ?? () from /lib/libgloo.so.0"), "");
    EXPECT_EQ(function_of("#2  <signal handler called>"), "<signal handler called>");
    EXPECT_EQ(function_of("#3  main () at sleeper.c:5"), "main");
    EXPECT_EQ(function_of("#4  0x1 in (anonymous namespace)::run (n=1) at a.cpp:3"),
              "(anonymous namespace)::run");
    EXPECT_EQ(function_of("#5  0x1 in std::function<void (int)>::operator() (this=0x2) at f:1"),
              "std::function<void (int)>::operator()");
    EXPECT_EQ(function_of("#6  0x1 in operator<< (os=...) at f:1"), "operator<<");
    EXPECT_EQ(function_of("#7  0x00007f - 1 __libc_start_main"), "__libc_start_main");
    EXPECT_EQ(function_of("#8  0x00000000005d64b4"), "");
    EXPECT_EQ(function_of("#9  0x1 f(void (*)(int)) ()"), "f(void (*)(int)) ()");

    auto top = [](std::string_view function) {
        return native_top_frames("TID 7:\n#0  0x1 " + std::string(function) + "\n", 7);
    };
    EXPECT_EQ(top("pthread_cond_wait@@GLIBC_2.3.2"), "pthread_cond_wait");
    EXPECT_EQ(top("(anonymous namespace)::f(int)"), "(anonymous namespace)::f");
    EXPECT_EQ(top("std::function<void (int)>::operator()(int) const"),
              "std::function<void (int)>::operator()");
    EXPECT_EQ(top("bool operator<<int>(int const&, int const&)"), "bool operator<<int>");
    EXPECT_EQ(top("(((("), "((((");
}

TEST(NativeStackText, NoSymbolAnywhereShowsAddresses) {
    std::string text = "TID 9:\n#0  0x0000000000401000\n#1  0x0000000000402000\n";
    EXPECT_EQ(native_top_frames(text, 9), "0x0000000000401000 <- 0x0000000000402000");
    EXPECT_EQ(native_top_frames("", 9), "");
    EXPECT_EQ(native_top_frames("TID 9:\n", 9), "");
}

TEST(FaulthandlerText, TwoThreadsAfterOtherOutput) {
    auto threads = parse_faulthandler(recorded("faulthandler_two_threads.txt"));
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(threads[0].id, "0x00007ff2433ad6c0");
    EXPECT_FALSE(threads[0].current);
    ASSERT_EQ(threads[0].frames.size(), 4u);
    EXPECT_EQ(threads[0].frames[0].file, "/tmp/stk/two_threads.py");
    EXPECT_EQ(threads[0].frames[0].line, 6);
    EXPECT_EQ(threads[0].frames[0].function, "helper_loop");
    EXPECT_EQ(threads[1].id, "0x00007ff243668040");
    EXPECT_TRUE(threads[1].current);
    EXPECT_EQ(threads[1].frames.size(), 3u);
    EXPECT_EQ(python_top_frames(threads),
              "wait_here (two_threads.py:12) <- train (two_threads.py:10) <- <module> "
              "(two_threads.py:14)");
    EXPECT_EQ(python_top_frames(threads, 1), "wait_here (two_threads.py:12)");
}

// Python 3.14: the thread's name after its id, and the C stack after the dump.
TEST(FaulthandlerText, Python314NamesThreadsAndAddsTheCStack) {
    auto threads = parse_faulthandler(recorded("faulthandler_python314.txt"));
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(threads[0].id, "0x00007f4ed3ab06c0");
    EXPECT_FALSE(threads[0].current);
    EXPECT_EQ(threads[0].frames.size(), 4u);
    EXPECT_EQ(threads[1].id, "0x00007f4ed3dad200");
    EXPECT_TRUE(threads[1].current);
    EXPECT_EQ(threads[1].frames.size(), 2u);
    EXPECT_EQ(python_top_frames(threads), "hang_here (<string>:6) <- <module> (<string>:9)");

    auto odd = parse_faulthandler(
        "Thread 0x1 [a] b] (most recent call first):\n  File \"a.py\", line 1 in f\n");
    ASSERT_EQ(odd.size(), 1u);
    EXPECT_EQ(python_top_frames(odd), "f (a.py:1)");
    EXPECT_EQ(parse_faulthandler("Thread 0x1 [main (most recent call first):\n").size(), 0u);
    EXPECT_EQ(parse_faulthandler("Thread 0x1 [Thre").size(), 1u);
}

TEST(FaulthandlerText, TorchDumpEndsAtExtensionModules) {
    auto threads = parse_faulthandler(recorded("faulthandler_torch_sleep.txt"));
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(threads[1].frames.size(), 2u);
    EXPECT_EQ(python_top_frames(threads), "main (torch_fh.py:9) <- <module> (torch_fh.py:10)");
}

TEST(FaulthandlerText, GlooAllReduce) {
    auto threads = parse_faulthandler(recorded("faulthandler_gloo_all_reduce.txt"));
    ASSERT_EQ(threads.size(), 1u);
    EXPECT_EQ(python_top_frames(threads),
              "all_reduce (distributed_c10d.py:1541) <- train_step (gloo_hang.py:5) <- main "
              "(gloo_hang.py:12)");
}

TEST(FaulthandlerText, FormsCPythonPrints) {
    // An ordinary traceback (", in") before the dump is not a dump.
    std::string text =
        "Traceback (most recent call last):\n"
        "  File \"a.py\", line 3, in f\n"
        "Thread 0x1 started\n"
        "Fatal Python error: Aborted\n\n"
        "Thread 0x00007f01 (most recent call first):\n"
        "  <no Python frame>\n\n"
        "Thread 0x00007f02 (most recent call first):\n"
        "  File ???, line ??? in ???\n"
        "  File \"/x/we\"ird.py\", line 7 in odd\n"
        "  ...\n\n"
        "...\n";
    auto threads = parse_faulthandler(text);
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_TRUE(threads[0].frames.empty());
    ASSERT_EQ(threads[1].frames.size(), 2u);
    EXPECT_EQ(threads[1].frames[0].file, "???");
    EXPECT_EQ(threads[1].frames[0].line, 0);
    EXPECT_EQ(threads[1].frames[1].file, "/x/we\"ird.py");
    EXPECT_EQ(threads[1].frames[1].line, 7);
    // No current thread (the signal landed on a thread Python does not know):
    // the last one listed, the main thread.
    EXPECT_EQ(python_top_frames(threads),
              "??? (??"
              "?) <- odd (we\"ird.py:7)");

    auto single = parse_faulthandler(
        "Stack (most recent call first):\r\n  File \"t.py\", line 2 in <lambda>\r\n");
    ASSERT_EQ(single.size(), 1u);
    EXPECT_TRUE(single[0].current);
    EXPECT_EQ(python_top_frames(single), "<lambda> (t.py:2)");
}

TEST(FaulthandlerText, LastDumpWins) {
    std::string first = "Thread 0x1 (most recent call first):\n  File \"a.py\", line 1 in old\n";
    std::string second =
        "Current thread 0x2 (most recent call first):\n  File \"b.py\", line 2 in new\n";
    auto threads = parse_faulthandler(first + "\nstep 2\n" + second);
    ASSERT_EQ(threads.size(), 1u);
    EXPECT_EQ(python_top_frames(threads), "new (b.py:2)");
    EXPECT_TRUE(parse_faulthandler("no dump here\n").empty());
    EXPECT_EQ(python_top_frames({}), "");
}

TEST(FaulthandlerText, CutDumpKeepsWhatItHas) {
    std::string text = recorded("faulthandler_two_threads.txt");
    // Cut inside the main thread's second frame line: the first frame is kept.
    std::size_t cut = text.find("line 10 in train");
    ASSERT_NE(cut, std::string::npos);
    auto threads = parse_faulthandler(std::string_view(text).substr(0, cut));
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_EQ(python_top_frames(threads), "wait_here (two_threads.py:12)");
    // Cut inside a thread header.
    std::size_t header = text.find("Current thread 0x") + 20;
    threads = parse_faulthandler(std::string_view(text).substr(0, header));
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_TRUE(threads[1].current);
    EXPECT_EQ(python_top_frames(threads), "");
}

TEST(StackParsers, EveryCutOfEveryRecordingParses) {
    for (const char* file : {"eu-stack_c_sleep.txt", "gdb_c_sleep.txt", "eu-stack_torch_sleep.txt",
                             "gdb_torch_sleep.txt", "eu-stack_gloo_all_reduce.txt",
                             "gdb_gloo_all_reduce.txt", "faulthandler_two_threads.txt",
                             "faulthandler_torch_sleep.txt", "faulthandler_gloo_all_reduce.txt"}) {
        SCOPED_TRACE(file);
        std::string text = recorded(file);
        for (std::size_t n = 0; n <= text.size(); ++n) {
            std::string_view prefix = std::string_view(text).substr(0, n);
            std::string_view suffix = std::string_view(text).substr(n);
            for (std::string_view part : {prefix, suffix}) {
                (void)native_top_frames(part, 3675);
                (void)python_top_frames(parse_faulthandler(part));
            }
        }
    }
}

TEST(StackParsers, GarbageNeverThrows) {
    std::mt19937 random(12);
    const std::string alphabet = "#0x1 TIDThread(LWP process):\n\r\"File, line ??? in<>@()_-.\xff";
    for (int round = 0; round < 2000; ++round) {
        std::string text(random() % 400, ' ');
        for (char& c : text)
            c = random() % 4 == 0 ? static_cast<char>(random())
                                  : alphabet[random() % alphabet.size()];
        EXPECT_NO_THROW({
            (void)native_top_frames(text, static_cast<pid_t>(random() % 4));
            (void)python_top_frames(parse_faulthandler(text), 5);
        });
    }
    std::string long_line(1 << 20, '(');
    EXPECT_NO_THROW((void)native_top_frames("#0  0x1 in " + long_line, 1));
    EXPECT_NO_THROW((void)parse_faulthandler("Thread 0x" + std::string(1 << 20, 'f')));
}

}  // namespace
}  // namespace ddprun
