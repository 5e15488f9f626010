// write_all and the reads (fd_io.hpp) on real pipes: short writes, a full
// non-blocking pipe either waited on or given up, a gone reader, a drained
// non-blocking pipe, end of file, a bound on what is read whole.
#include "ddprun/base/fd_io.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "ddprun/base/fd.hpp"

namespace ddprun {
namespace {

struct Pipe {
    UniqueFd read_end, write_end;
};

Pipe make_pipe(int flags = 0) {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC | flags), 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// More than a pipe holds (64 KiB by default), so that writes are short and the pipe fills.
const std::string k_big(1 << 20, 'x');

TEST(FdIo, WritesAllAndReadsToEndOfFile) {
    Pipe pipe = make_pipe();
    std::thread writer([&] {
        EXPECT_EQ(write_all(pipe.write_end.get(), k_big), 0);
        pipe.write_end.reset();
    });
    auto text = read_to_eof(pipe.read_end.get(), k_big.size());
    writer.join();
    ASSERT_TRUE(text.has_value()) << text.error();
    EXPECT_EQ(*text, k_big);
}

TEST(FdIo, AFullNonBlockingPipeIsWaitedOnOrGivenUp) {
    Pipe pipe = make_pipe(O_NONBLOCK);
    EXPECT_EQ(write_all(pipe.write_end.get(), k_big, WhenFull::GiveUp), EAGAIN);

    Pipe waited = make_pipe(O_NONBLOCK);
    std::string read;
    std::thread reader([&] {
        ::fcntl(waited.read_end.get(), F_SETFL, 0);  // the reader blocks, the writer does not
        auto text = read_to_eof(waited.read_end.get(), k_big.size());
        if (text) read = *text;
    });
    EXPECT_EQ(write_all(waited.write_end.get(), k_big, WhenFull::Wait), 0);
    waited.write_end.reset();
    reader.join();
    EXPECT_EQ(read, k_big);
}

TEST(FdIo, AGoneReaderIsAnError) {
    Pipe pipe = make_pipe();
    pipe.read_end.reset();
    // SIGPIPE held on this thread, and taken back, so that EPIPE is what is seen.
    sigset_t pipe_signal, old;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old), 0);
    EXPECT_EQ(write_all(pipe.write_end.get(), "a line\n"), EPIPE);
    timespec now{0, 0};
    ::sigtimedwait(&pipe_signal, nullptr, &now);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST(FdIo, ReadChunksSaysWhyItStopped) {
    Pipe pipe = make_pipe(O_NONBLOCK);
    std::vector<std::string> chunks;
    auto take = [&](std::string_view chunk) {
        chunks.emplace_back(chunk);
        return true;
    };
    EXPECT_EQ(read_chunks(pipe.read_end.get(), take), ReadEnd::Drained);
    EXPECT_TRUE(chunks.empty());
    ASSERT_EQ(write_all(pipe.write_end.get(), "first"), 0);
    EXPECT_EQ(read_chunks(pipe.read_end.get(), take), ReadEnd::Drained);
    ASSERT_EQ(write_all(pipe.write_end.get(), "second"), 0);
    EXPECT_EQ(read_chunks(pipe.read_end.get(), [](std::string_view) { return false; }),
              ReadEnd::Stopped);
    pipe.write_end.reset();
    EXPECT_EQ(read_chunks(pipe.read_end.get(), take), ReadEnd::EndOfFile);
    EXPECT_EQ(chunks, std::vector<std::string>{"first"});
    EXPECT_EQ(read_chunks(-1, take), ReadEnd::Failed);
    EXPECT_EQ(errno, EBADF);
}

TEST(FdIo, ReadToEndOfFileIsBounded) {
    for (std::size_t max : {std::size_t{5}, std::size_t{4}}) {
        Pipe pipe = make_pipe();
        ASSERT_EQ(write_all(pipe.write_end.get(), "12345"), 0);
        pipe.write_end.reset();
        auto text = read_to_eof(pipe.read_end.get(), max);
        if (max == 5) {
            EXPECT_EQ(text, (std::expected<std::string, int>("12345")));
        } else {
            EXPECT_EQ(text, std::unexpected(EFBIG));
        }
    }
    Pipe open = make_pipe(O_NONBLOCK);  // a writer still there: not the end yet
    EXPECT_EQ(read_to_eof(open.read_end.get(), 10), std::unexpected(EAGAIN));
    EXPECT_EQ(read_to_eof(-1, 10), std::unexpected(EBADF));
}

}  // namespace
}  // namespace ddprun
