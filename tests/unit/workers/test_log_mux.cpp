// LogMux is what users read, so these tests drive it the way a run does: real
// pipes written by the test (or by threads, for concurrency), the mux on an
// io_context run here, and the console as temp files read back afterwards.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "ddprun/workers/log_mux.hpp"
#include "worker_fixture.hpp"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using namespace std::string_literals;

// Bounds every wait in these tests; only reached when something hangs.
constexpr auto k_hang_guard = 10s;

using testing::read_file;

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        ASSERT_GT(n, 0) << "write: " << std::strerror(errno);
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

struct Pipe {
    int read_end = -1;
    int write_end = -1;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
        read_end = fds[0];
        write_end = fds[1];
    }
    ~Pipe() { close_write(); }  // the mux owns read_end
    void write(std::string_view data) const { write_all(write_end, data); }
    void close_write() {
        if (write_end >= 0) ::close(write_end);
        write_end = -1;
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
};

struct Worker {
    Pipe out, err;
    void close() {
        out.close_write();
        err.close_write();
    }
};

StreamSource rank(int r) {
    StreamSource source;
    source.rank = r;
    source.local_rank = r;
    return source;
}

class LogMuxTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (std::filesystem::temp_directory_path() / "logmux.XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        m_dir = tmpl;
        m_out_fd = open_console(console_out_path());
        m_err_fd = open_console(console_err_path());
        m_options.stdout_fd = m_out_fd;
        m_options.stderr_fd = m_err_fd;
        m_options.partial_flush = 1h;  // tests that want the timer set it
    }

    void TearDown() override {
        m_mux.reset();  // before the console fds close: the mux drains on destruction
        ::close(m_out_fd);
        ::close(m_err_fd);
        std::filesystem::remove_all(m_dir);
    }

    static int open_console(const std::filesystem::path& path) {
        return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
    }

    std::filesystem::path console_out_path() const { return m_dir / "console.out"; }
    std::filesystem::path console_err_path() const { return m_dir / "console.err"; }
    std::string console_out() const { return read_file(console_out_path()); }
    std::string console_err() const { return read_file(console_err_path()); }
    std::filesystem::path path(const std::string& name) const { return m_dir / name; }

    LogMux& start() {
        m_mux = std::make_unique<LogMux>(m_io, m_options);
        return *m_mux;
    }

    // "" when added, else the error's message.
    std::string add(int id, Worker& worker, const StreamSink& out = {},
                    const StreamSink& err = {}) {
        auto added =
            m_mux->add_worker(id, rank(id), worker.out.read_end, worker.err.read_end, out, err);
        return added ? std::string() : added.error().message;
    }

    // Runs the loop until `done` holds; false if the hang guard ran out.
    bool run_until(const std::function<bool()>& done) {
        auto deadline = std::chrono::steady_clock::now() + k_hang_guard;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            if (m_io.stopped()) m_io.restart();
            m_io.run_one_for(10ms);
        }
        return true;
    }

    bool run_until_closed() {
        return run_until([&] { return m_mux->all_closed(); });
    }

    boost::asio::io_context m_io;
    LogMux::Options m_options;
    std::unique_ptr<LogMux> m_mux;

  private:
    std::filesystem::path m_dir;
    int m_out_fd = -1;
    int m_err_fd = -1;
};

// ---------------------------------------------------------------- console

TEST_F(LogMuxTest, PrefixesEveryLineOnItsOwnConsole) {
    start();
    Worker w;
    ASSERT_EQ(add(3, w), "");
    w.out.write("alpha\nbeta\n");
    w.err.write("oops\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[3]: alpha\n[3]: beta\n");
    EXPECT_EQ(console_err(), "[3]: oops\n");
}

TEST_F(LogMuxTest, EmptyTemplateMeansNoPrefix) {
    m_options.prefix_template = "";
    start();
    Worker w;
    add(0, w);
    w.out.write("plain\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "plain\n");
}

std::string make_line(int writer, int n) {
    return "writer " + std::to_string(writer) + " line " + std::to_string(n) + " " +
           std::string(static_cast<std::size_t>(n % 97), 'x') + "\n";
}

TEST_F(LogMuxTest, LinesFromConcurrentWritersNeverInterleaveMidLine) {
    start();
    constexpr int k_writers = 3;
    constexpr int k_lines = 4000;
    std::vector<std::unique_ptr<Worker>> workers;
    for (int i = 0; i < k_writers; ++i) {
        workers.push_back(std::make_unique<Worker>());
        add(i, *workers.back());
    }
    // Each line goes out in up to three write()s, cut at varying points, so
    // reads regularly end mid-line.
    std::vector<std::thread> threads;
    for (int i = 0; i < k_writers; ++i) {
        threads.emplace_back([i, &w = *workers[static_cast<std::size_t>(i)]] {
            for (int n = 0; n < k_lines; ++n) {
                std::string line = make_line(i, n);
                std::size_t a = static_cast<std::size_t>(n * 7) % line.size();
                std::size_t b = std::min(line.size(), a + static_cast<std::size_t>(n % 13));
                w.out.write(line.substr(0, a));
                w.out.write(line.substr(a, b - a));
                w.out.write(line.substr(b));
            }
            w.out.close_write();
        });
    }
    for (auto& w : workers) w->err.close_write();
    bool closed = run_until_closed();
    for (auto& t : threads) t.join();
    ASSERT_TRUE(closed);

    std::istringstream console(console_out());
    std::vector<int> next(k_writers, 0);
    std::string line;
    while (std::getline(console, line)) {
        int writer = -1;
        ASSERT_EQ(std::sscanf(line.c_str(), "[%*d]: writer %d", &writer), 1) << line;
        ASSERT_TRUE(writer >= 0 && writer < k_writers) << line;
        int& n = next[static_cast<std::size_t>(writer)];
        ASSERT_EQ(line + "\n", "[" + std::to_string(writer) + "]: " + make_line(writer, n))
            << "interleaved, damaged or out of order";
        ++n;
    }
    for (int count : next) EXPECT_EQ(count, k_lines);
}

TEST_F(LogMuxTest, PartialLineShowsAfterFlushIntervalAndContinuesWithoutPrefix) {
    m_options.partial_flush = 20ms;
    start();
    Worker w;
    add(0, w);
    w.out.write("Loading");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: Loading"; })) << console_out();
    w.out.write("... done\nnext\n");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: Loading... done\n[0]: next\n"; }))
        << console_out();
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[0]: Loading... done\n[0]: next\n");
}

TEST_F(LogMuxTest, LineTricklingInShowsUpPieceByPiece) {
    m_options.partial_flush = 10ms;
    start();
    Worker w;
    add(0, w);
    std::string expected = "[0]: ";
    for (int i = 0; i < 3; ++i) {
        w.out.write(".");
        expected += ".";
        ASSERT_TRUE(run_until([&] { return console_out() == expected; })) << console_out();
    }
    w.out.write("done\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[0]: ...done\n");
}

TEST_F(LogMuxTest, AnotherStreamEndsAPartialLineBeforeWriting) {
    m_options.partial_flush = 20ms;
    start();
    Worker w0;
    Worker w1;
    add(0, w0);
    add(1, w1);
    w0.out.write("abc");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: abc"; })) << console_out();
    w1.out.write("x\n");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: abc\n[1]: x\n"; })) << console_out();
    w0.out.write("def\n");
    w0.close();
    w1.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[0]: abc\n[1]: x\n[0]: def\n");
}

TEST_F(LogMuxTest, StdoutAndStderrOnOneFileShareTheLine) {
    // A terminal or 2>&1: two fds, one file. The mux must see they are one.
    int dup_fd = ::dup(m_options.stdout_fd);
    ASSERT_GE(dup_fd, 0);
    m_options.stderr_fd = dup_fd;
    m_options.partial_flush = 20ms;
    start();
    Worker w;
    add(0, w);
    w.out.write("step 1");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: step 1"; })) << console_out();
    w.err.write("warning\n");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: step 1\n[0]: warning\n"; }))
        << console_out();
    w.close();
    ASSERT_TRUE(run_until_closed());
    m_mux.reset();
    ::close(dup_fd);
}

TEST_F(LogMuxTest, LastLineWithoutNewlineIsNotLost) {
    // Whether or not the flush timer fired before EOF, the bytes are all there
    // and the console ends on a fresh line.
    for (auto flush : {std::chrono::milliseconds(1h), std::chrono::milliseconds(0)}) {
        m_options.partial_flush = flush;
        start();
        Worker w;
        ASSERT_EQ(add(0, w, {true, path("out.log").string()}), "");
        w.out.write("first\ncrashed mid");
        if (flush == 0ms) {
            ASSERT_TRUE(run_until([&] { return console_out().ends_with("mid"); }));
        }
        w.close();
        ASSERT_TRUE(run_until_closed());
        EXPECT_EQ(console_out(), "[0]: first\n[0]: crashed mid\n") << flush.count();
        EXPECT_EQ(read_file(path("out.log")), "first\ncrashed mid");
        m_mux.reset();
        ASSERT_EQ(::ftruncate(m_options.stdout_fd, 0), 0);
    }
}

TEST_F(LogMuxTest, HugeLineWithoutNewlineArrivesIntact) {
    // 1 MB stays pending whole; 3 MiB crosses the early-flush bound.
    for (std::size_t size : {std::size_t{1000000}, std::size_t{3 * 1024 * 1024 + 5}}) {
        start();
        Worker w;
        add(0, w, {true, path("big.log").string()});
        std::string data(size, '\0');
        for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<char>('a' + i % 26);
        std::thread writer([&] {
            w.out.write(data);
            w.close();
        });
        bool closed = run_until_closed();
        writer.join();
        ASSERT_TRUE(closed);
        EXPECT_TRUE(console_out() == "[0]: " + data + "\n") << "size " << size;
        EXPECT_TRUE(read_file(path("big.log")) == data) << "size " << size;
        EXPECT_EQ(m_mux->bytes_carried(), size);
        m_mux.reset();
        ASSERT_EQ(::ftruncate(m_options.stdout_fd, 0), 0);
    }
}

// A worker that prints in bulk: lines of every length (some longer than a
// read, some ended by '\r'), through pipes the mux grows, written in writes
// that never match the reads. The console shows every line once, whole and
// prefixed, exactly as the line splitter defines it.
std::string bulk_output(std::size_t size, unsigned seed) {
    std::mt19937 rng(seed);
    std::string data;
    while (data.size() < size) {
        std::size_t length = rng() % 10 == 0 ? rng() % 200000 : rng() % 300;
        for (std::size_t i = 0; i < length; ++i) data += static_cast<char>('a' + (i + length) % 26);
        data += rng() % 8 == 0 ? '\r' : '\n';
    }
    return data;
}

std::string prefixed(const std::string& data, const std::string& prefix) {
    std::string out;
    bool line_start = true;
    for (char c : data) {
        if (line_start) out += prefix;
        out += c;
        line_start = c == '\n' || c == '\r';
    }
    return out;
}

int pipe_size(int fd) {
    return ::fcntl(fd, F_GETPIPE_SZ);
}

bool can_grow_pipes_to_a_megabyte() {
    std::string max = read_file("/proc/sys/fs/pipe-max-size");
    return !max.empty() && std::stol(max) >= 1024 * 1024;
}

TEST_F(LogMuxTest, WorkerThatFillsItsPipeGetsABiggerOneAndEveryLineArrives) {
    if (!can_grow_pipes_to_a_megabyte()) GTEST_SKIP() << "pipe-max-size below 1 MiB";
    start();
    Worker w;
    add(0, w, {true, path("bulk.log").string()});
    int first_size = pipe_size(w.out.write_end);
    ASSERT_GT(first_size, 0);
    std::string data = bulk_output(6 * 1024 * 1024, 1);
    // The pipe is full when the mux first reads it, whatever the scheduling.
    std::string_view rest(data);
    w.out.write(rest.substr(0, static_cast<std::size_t>(first_size)));
    rest.remove_prefix(static_cast<std::size_t>(first_size));
    std::thread writer([&] {
        std::mt19937 rng(2);
        while (!rest.empty()) {
            std::size_t n = std::min<std::size_t>(1 + rng() % 300000, rest.size());
            w.out.write(rest.substr(0, n));
            rest.remove_prefix(n);
        }
    });
    bool carried = run_until([&] { return m_mux->bytes_carried() == data.size(); });
    writer.join();
    ASSERT_TRUE(carried);
    EXPECT_EQ(pipe_size(w.out.write_end), 1024 * 1024);
    EXPECT_EQ(pipe_size(w.err.write_end), first_size) << "a pipe that never filled stays as it was";
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_TRUE(console_out() == prefixed(data, "[0]: ")) << "console differs";
    EXPECT_TRUE(read_file(path("bulk.log")) == data) << "log file differs";
}

// Grown pipes count against the user's pipe pages, which the workers' own
// pipes need too: past 16 grown pipes (16 MiB) no more grow.
TEST_F(LogMuxTest, PipesGrowOnlyWithinTheirBudget) {
    if (!can_grow_pipes_to_a_megabyte()) GTEST_SKIP() << "pipe-max-size below 1 MiB";
    start();
    constexpr int k_workers = 20;
    std::vector<std::unique_ptr<Worker>> workers;
    std::size_t total = 0;
    std::size_t console_size = 0;
    for (int i = 0; i < k_workers; ++i) {
        workers.push_back(std::make_unique<Worker>());
        Worker& w = *workers.back();
        add(i, w);
        int size = pipe_size(w.out.write_end);
        ASSERT_GT(size, 0);
        std::string fill =
            prefixed(std::string(static_cast<std::size_t>(size) / 8, '\n'), "1234567");
        w.out.write(fill);  // exactly full
        total += fill.size();
        console_size += fill.size() + fill.size() / 8 * ("[" + std::to_string(i) + "]: ").size();
    }
    ASSERT_TRUE(run_until([&] { return m_mux->bytes_carried() == total; }));
    int grown = 0;
    for (auto& w : workers) grown += pipe_size(w->out.write_end) == 1024 * 1024 ? 1 : 0;
    EXPECT_EQ(grown, 16);
    for (auto& w : workers) w->close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out().size(), console_size);

    // Closed pipes give their share back: the next round's pipes grow again.
    Worker next;
    add(0, next);
    std::string fill(static_cast<std::size_t>(pipe_size(next.out.write_end)), '\n');
    next.out.write(fill);
    ASSERT_TRUE(run_until([&] { return m_mux->bytes_carried() == total + fill.size(); }));
    EXPECT_EQ(pipe_size(next.out.write_end), 1024 * 1024);
}

// ---------------------------------------------------------------- files

TEST_F(LogMuxTest, LogFilesGetExactlyTheBytesWritten) {
    start();
    Worker w;
    std::string out_bytes = "progress 1\rprogress 2\r\nnul\0here\ntail"s;
    std::string err_bytes = "Traceback:\n  boom\r\n";
    ASSERT_EQ(add(0, w, {true, path("0.out").string()}, {true, path("0.err").string()}), "");
    w.out.write(out_bytes);
    w.err.write(err_bytes);
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(read_file(path("0.out")), out_bytes);
    EXPECT_EQ(read_file(path("0.err")), err_bytes);
    EXPECT_EQ(m_mux->bytes_carried(), out_bytes.size() + err_bytes.size());
    // The console splits at '\r' too (a progress bar redraws one prefixed
    // line), so a "\r\n" shows as an empty prefixed segment.
    EXPECT_EQ(console_out(),
              "[0]: progress 1\r[0]: progress 2\r[0]: \n[0]: nul\0here\n[0]: tail\n"s);
}

TEST_F(LogMuxTest, HiddenStreamStillReachesFileAndTail) {
    start();
    Worker w;
    ASSERT_EQ(add(0, w, {false, path("0.out").string()}, {false, path("0.err").string()}), "");
    w.out.write("quiet\n");
    w.err.write("err 1\nerr 2\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "");
    EXPECT_EQ(console_err(), "");
    EXPECT_EQ(read_file(path("0.out")), "quiet\n");
    EXPECT_EQ(read_file(path("0.err")), "err 1\nerr 2\n");
    EXPECT_EQ(m_mux->stderr_tail(0), (std::vector<std::string>{"err 1", "err 2"}));
}

TEST_F(LogMuxTest, FileWriteErrorIsReportedOnceAndConsoleContinues) {
    if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
    start();
    Worker w;
    // /dev/full fails every write with ENOSPC: a disk that filled up.
    ASSERT_EQ(add(0, w, {true, "/dev/full"}, {true, path("0.err").string()}), "");
    w.out.write("one\n");
    ASSERT_TRUE(run_until([&] { return !m_mux->file_error().empty(); }));
    w.out.write("two\n");
    w.err.write("still logged\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(m_mux->file_error(), "writing /dev/full: No space left on device");
    EXPECT_EQ(console_out(), "[0]: one\n[0]: two\n");
    EXPECT_EQ(read_file(path("0.err")), "still logged\n");
}

TEST_F(LogMuxTest, UnopenableLogFileIsReportedAndOutputStillCarried) {
    start();
    Worker w;
    std::string bad = path("missing-dir/0.out").string();
    std::string error = add(0, w, {true, bad});
    EXPECT_NE(error.find(bad), std::string::npos) << error;
    EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
    w.out.write("kept\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[0]: kept\n");
}

TEST_F(LogMuxTest, APipeThatCannotBeWatchedIsAnErrorNamingTheCall) {
    start();
    Worker w;
    int closed = ::dup(w.out.read_end);
    ASSERT_GE(closed, 0);
    ::close(closed);  // a descriptor number that is not open
    auto added = m_mux->add_worker(0, rank(0), closed, w.err.read_end, {}, {});
    ASSERT_FALSE(added);
    EXPECT_NE(added.error().message.find("fcntl"), std::string::npos) << added.error().message;
    EXPECT_NE(added.error().message.find("worker 0's stdout"), std::string::npos)
        << added.error().message;
    // The other stream is carried as usual.
    w.err.write("still carried\n");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_err(), "[0]: still carried\n");
    ::close(w.out.read_end);  // never handed to the mux
}

// ---------------------------------------------------------------- tail

TEST_F(LogMuxTest, StderrTailKeepsTheLastLines) {
    struct Case {
        std::string written;
        std::vector<std::string> tail;
    };
    std::string many;
    for (int i = 0; i < 100000; ++i) many += "line " + std::to_string(i) + "\n";
    const std::vector<Case> cases = {
        {"", {}},
        {"only\n", {"only"}},
        {"1\n2\n3\n4\n5\n", {"3", "4", "5"}},
        {"1\n2\n3\n4\npartial", {"3", "4", "partial"}},
        {"\n\n\n", {"", "", ""}},
        {"crlf 1\r\ncrlf 2\r\n", {"crlf 1", "crlf 2"}},
        // A progress bar leaves what the terminal showed last.
        {"start\nbar 10%\rbar 50%\rbar 100%\ndone\n", {"start", "bar 100%", "done"}},
        {"x\nbar 10%\rbar 20%", {"x", "bar 20%"}},
        {many, {"line 99997", "line 99998", "line 99999"}},  // spans many reads
    };
    m_options.tail_lines = 3;
    for (const auto& c : cases) {
        start();
        Worker w;
        add(0, w, {false, ""}, {false, ""});
        std::thread writer([&] {
            w.err.write(c.written);
            w.close();
        });
        bool closed = run_until_closed();
        writer.join();
        ASSERT_TRUE(closed);
        EXPECT_EQ(m_mux->stderr_tail(0), c.tail) << "written: " << c.written.substr(0, 60);
    }
}

TEST_F(LogMuxTest, StderrTailJoinsLinesAcrossReads) {
    // Each chunk is carried before the next is written, so each is one read.
    struct Case {
        std::vector<std::string> chunks;
        std::vector<std::string> tail;
    };
    const std::vector<Case> cases = {
        {{"x", "y", "z\n"}, {"xyz"}},
        {{"a\nb\nc\nd", "e\nf"}, {"c", "de", "f"}},
        {{"1\n2\n3\n4\n5\n6\n7", "8\n"}, {"5", "6", "78"}},
        {{"skipped partial", "\n1\n2\n3\n4\n"}, {"2", "3", "4"}},
        {{"p 10%\r", "p 20%\r", "\n"}, {"p 20%"}},
        {{"abc\r", "\nnext"}, {"abc", "next"}},
        {{"abc\r", "def\n"}, {"def"}},
    };
    m_options.tail_lines = 3;
    for (const auto& c : cases) {
        start();
        Worker w;
        add(0, w, {false, ""}, {false, ""});
        std::size_t sent = 0;
        for (const auto& chunk : c.chunks) {
            w.err.write(chunk);
            sent += chunk.size();
            ASSERT_TRUE(run_until([&] { return m_mux->bytes_carried() == sent; }));
        }
        w.close();
        ASSERT_TRUE(run_until_closed());
        EXPECT_EQ(m_mux->stderr_tail(0), c.tail) << ::testing::PrintToString(c.chunks);
    }
}

TEST_F(LogMuxTest, StderrTailCanBeDisabledAndUnknownIdsHaveNone) {
    m_options.tail_lines = 0;
    start();
    Worker w;
    add(0, w);
    w.err.write("a\nb");
    w.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_TRUE(m_mux->stderr_tail(0).empty());
    EXPECT_TRUE(m_mux->stderr_tail(7).empty());
}

// ---------------------------------------------------------------- lifecycle

TEST_F(LogMuxTest, DrainReadsEverythingLeftWithoutRunningTheLoop) {
    start();
    Worker dead;
    Worker lingering;  // e.g. a grandchild still holds the pipe
    add(0, dead);
    add(1, lingering);
    dead.out.write("a\nb");
    dead.err.write("err");
    dead.close();
    lingering.out.write("c\n");
    EXPECT_FALSE(m_mux->all_closed());
    m_mux->drain_and_close_all();  // must not block on the open pipe
    EXPECT_TRUE(m_mux->all_closed());
    EXPECT_EQ(console_out(), "[0]: a\n[0]: b\n[1]: c\n");
    EXPECT_EQ(console_err(), "[0]: err\n");
    EXPECT_EQ(m_mux->stderr_tail(0), (std::vector<std::string>{"err"}));
    // Handlers queued before the drain find their streams closed.
    m_io.restart();
    m_io.run_for(50ms);
    EXPECT_EQ(console_out(), "[0]: a\n[0]: b\n[1]: c\n");
}

TEST_F(LogMuxTest, ReadAvailableTakesAnExitedWorkersLastWordsNow) {
    start();
    Worker crashed;
    Worker grandchild_holds_pipe;
    add(0, crashed);
    add(1, grandchild_holds_pipe);
    crashed.err.write("Traceback:\nValueError: boom");
    crashed.close();
    grandchild_holds_pipe.err.write("still here\n");
    m_mux->read_available(0);  // without running the loop
    m_mux->read_available(1);  // must not block on the open pipe
    m_mux->read_available(7);  // unknown: ignored
    EXPECT_EQ(m_mux->stderr_tail(0), (std::vector<std::string>{"Traceback:", "ValueError: boom"}));
    EXPECT_EQ(m_mux->stderr_tail(1), (std::vector<std::string>{"still here"}));
    EXPECT_FALSE(m_mux->all_closed());  // worker 1's pipes are still open
    grandchild_holds_pipe.close();
    ASSERT_TRUE(run_until_closed());
    // Nothing carried twice, nothing lost.
    EXPECT_EQ(console_err(), "[0]: Traceback:\n[0]: ValueError: boom\n[1]: still here\n");
}

TEST_F(LogMuxTest, DestroyingTheMuxWithHandlersQueuedIsSafe) {
    m_options.partial_flush = 1ms;
    start();
    Worker w;
    add(0, w);
    w.out.write("pending");
    m_io.run_for(20ms);  // a wait and a flush timer are now outstanding
    w.out.write(" more\n");
    m_mux.reset();  // drains what is left
    m_io.restart();
    m_io.run_for(50ms);  // the orphaned handlers run against closed streams
    EXPECT_EQ(console_out(), "[0]: pending more\n");
}

TEST_F(LogMuxTest, ReaddingAnIdStartsAFreshRound) {
    start();
    Worker first;
    add(0, first);
    first.err.write("round 0 error\n");
    first.close();
    ASSERT_TRUE(run_until_closed());
    m_mux->drain_and_close_all();

    Worker second;
    add(0, second);
    EXPECT_FALSE(m_mux->all_closed());
    EXPECT_TRUE(m_mux->stderr_tail(0).empty());
    second.out.write("round 1\n");
    second.close();
    ASSERT_TRUE(run_until_closed());
    EXPECT_EQ(console_out(), "[0]: round 1\n");
    EXPECT_EQ(console_err(), "[0]: round 0 error\n");
}

// ---------------------------------------------------------------- throughput

// Not a unit test: a measurement to run by hand (--gtest_also_run_disabled_tests).
// Pushes 200 MB of 100-byte lines through a plain read/write copy loop (what
// cat does) and through LogMux with prefixing, both into /dev/null. Best of
// three, as wall time and as the reading thread's CPU time (steadier on a busy
// machine).
double thread_cpu_seconds() {
    rusage usage{};
    ::getrusage(RUSAGE_THREAD, &usage);
    auto seconds = [](timeval tv) {
        return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

TEST(LogMuxThroughput, DISABLED_ComparedWithCopyLoop) {
    constexpr std::size_t k_total = 200 * 1000 * 1000;
    constexpr std::size_t k_line = 100;
    int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);

    for (std::size_t write_size : {std::size_t{64000}, std::size_t{4000}, k_line}) {
        std::string block;
        while (block.size() < write_size) block += std::string(k_line - 1, 'x') + "\n";
        auto produce = [&](int fd) {
            for (std::size_t sent = 0; sent < k_total; sent += block.size()) write_all(fd, block);
            ::close(fd);
        };
        auto copy_loop = [&] {
            Pipe p;
            std::thread writer(produce, p.write_end);
            p.write_end = -1;
            std::vector<char> buf(128 * 1024);
            ssize_t n;
            while ((n = ::read(p.read_end, buf.data(), buf.size())) > 0) {
                write_all(null_fd, std::string_view(buf.data(), static_cast<std::size_t>(n)));
            }
            ::close(p.read_end);
            writer.join();
        };
        auto through_mux = [&] {
            boost::asio::io_context io;
            LogMux::Options options;
            options.stdout_fd = null_fd;
            options.stderr_fd = null_fd;
            LogMux mux(io, options);
            Worker w;
            ASSERT_TRUE(mux.add_worker(0, rank(0), w.out.read_end, w.err.read_end, {}, {}));
            w.err.close_write();
            std::thread writer(produce, w.out.write_end);
            w.out.write_end = -1;
            while (!mux.all_closed()) io.run_one();
            writer.join();
        };
        struct Best {
            double wall = 1e9, cpu = 1e9;
        };
        auto measure = [](Best& best, const std::function<void()>& run) {
            double cpu0 = thread_cpu_seconds();
            auto t0 = std::chrono::steady_clock::now();
            run();
            std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
            best.wall = std::min(best.wall, wall.count());
            best.cpu = std::min(best.cpu, thread_cpu_seconds() - cpu0);
        };
        Best copy, mux;
        for (int round = 0; round < 3; ++round) {
            measure(copy, copy_loop);
            measure(mux, through_mux);
        }
        auto mbps = [](double seconds) { return static_cast<double>(k_total) / 1e6 / seconds; };
        std::printf(
            "writes of %5zu bytes: wall: copy loop %5.0f MB/s, LogMux %5.0f MB/s (%3.0f%%); "
            "reader CPU: copy loop %.3f s, LogMux %.3f s\n",
            write_size, mbps(copy.wall), mbps(mux.wall), 100.0 * copy.wall / mux.wall, copy.cpu,
            mux.cpu);
    }
    ::close(null_fd);
}

// ---------------------------------------------------------------- --collapse-lines

class CollapseTest : public LogMuxTest {
  protected:
    void SetUp() override {
        LogMuxTest::SetUp();
        m_options.collapse_window = 1h;  // held until the drain: no timing in these tests
        start();
        for (int i = 0; i < 4; ++i) {
            m_workers.push_back(std::make_unique<Worker>());
            StreamSink out;
            out.console = true;
            out.file_path = path(fmt::format("{}.log", i)).string();
            ASSERT_EQ(add(i, *m_workers.back(), out), "");
        }
    }
    // Writes to worker `i`'s stdout and waits until the mux has carried it, so the
    // order in which the workers' lines arrive is the test's.
    void write(int i, std::string_view text) {
        const std::size_t before = m_mux->bytes_carried();
        m_workers[static_cast<std::size_t>(i)]->out.write(text);
        ASSERT_TRUE(run_until([&] { return m_mux->bytes_carried() == before + text.size(); }));
    }
    std::string drained() {
        for (auto& w : m_workers) w->close();
        EXPECT_TRUE(run_until_closed());
        m_mux->drain_and_close_all();
        return console_out();
    }
    std::vector<std::unique_ptr<Worker>> m_workers;
};

TEST_F(CollapseTest, LinesSeveralRanksPrintAlikeGoOutOnceWithTheirRanks) {
    for (int i : {0, 1, 3}) write(i, "Epoch 3 done\n");
    write(2, "Epoch 3 done\nodd one\n");
    EXPECT_EQ(drained(), "[0-3]: Epoch 3 done\n[2]: odd one\n");
}

TEST_F(CollapseTest, EveryRanksOrderIsKept) {
    // Rank 2 prints its odd line between the two epochs: its Epoch 4 cannot join the
    // others' (printed before its odd line), so it follows on its own.
    for (int i : {0, 1, 3}) write(i, "Epoch 3\nEpoch 4\n");
    write(2, "Epoch 3\nodd\nEpoch 4\n");
    EXPECT_EQ(drained(), "[0-3]: Epoch 3\n[0-1,3]: Epoch 4\n[2]: odd\n[2]: Epoch 4\n");
}

TEST_F(CollapseTest, ARankReadFirstLeadsTheGroupsItsLinesStart) {
    // The same lines read in the other order: rank 2's Epoch 4 comes first, after its
    // odd line, and the others' Epoch 4 joins it there (each rank's order still kept).
    write(2, "Epoch 3\nodd\nEpoch 4\n");
    for (int i : {0, 1, 3}) write(i, "Epoch 3\nEpoch 4\n");
    EXPECT_EQ(drained(), "[0-3]: Epoch 3\n[2]: odd\n[0-3]: Epoch 4\n");
}

TEST_F(CollapseTest, LinesThatDifferInAnyByteAreNotMerged) {
    write(0, "loss 0.25\n");
    write(1, "loss 0.25 \n");
    write(2, "loss 0.26\n");
    write(3, "loss 0.25\n");
    EXPECT_EQ(drained(), "[0,3]: loss 0.25\n[1]: loss 0.25 \n[2]: loss 0.26\n");
}

TEST_F(CollapseTest, PartialLinesAndCarriageReturnsAreNeverHeld) {
    write(0, "held\n");
    write(1, "held\n");
    // A progress bar: '\r' segments go out at once, after what was held.
    write(2, "50%\r100%\n");
    EXPECT_EQ(console_out(), "[0-1]: held\n[2]: 50%\r[2]: 100%\n");
    write(3, "half a line");
    m_mux->drain_and_close_all();  // the partial is shown as far as it goes
    EXPECT_EQ(console_out(), "[0-1]: held\n[2]: 50%\r[2]: 100%\n[3]: half a line\n");
}

TEST_F(CollapseTest, TheLogFilesKeepEveryRanksOwnLines) {
    for (int i = 0; i < 4; ++i) write(i, "same\n");
    EXPECT_EQ(drained(), "[0-3]: same\n");
    for (int i = 0; i < 4; ++i) EXPECT_EQ(read_file(path(fmt::format("{}.log", i))), "same\n");
}

TEST_F(CollapseTest, TheWindowShowsHeldLinesWithoutMoreOutput) {
    m_mux.reset();
    m_workers.clear();
    m_options.collapse_window = 50ms;
    start();
    Worker w;
    StreamSink out;
    out.console = true;
    ASSERT_EQ(add(0, w, out), "");
    w.out.write("alone\n");
    ASSERT_TRUE(run_until([&] { return console_out() == "[0]: alone\n"; }));
    w.close();
}

}  // namespace
}  // namespace ddprun
