#include "core/syscalls.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sluice {
namespace {

// Both ends of a pipe or a socket pair, closed at the end of the test.
struct Fds {
  int fd[2] = {-1, -1};
  ~Fds() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  void Close(int i) {
    close(fd[i]);
    fd[i] = -1;
  }
};

TEST(Syscalls, ReadNoCancelReadsWhatWasWrittenThenTheEnd) {
  Fds p;
  ASSERT_EQ(pipe(p.fd), 0);
  ASSERT_EQ(write(p.fd[1], "abc", 3), 3);
  char buffer[8] = {};
  EXPECT_EQ(ReadNoCancel(p.fd[0], buffer, sizeof(buffer)), 3);
  EXPECT_EQ(std::string(buffer, 3), "abc");
  p.Close(1);
  EXPECT_EQ(ReadNoCancel(p.fd[0], buffer, sizeof(buffer)), 0);
}

TEST(Syscalls, ReadNoCancelFailsWithTheErrnoReadWouldSet) {
  char buffer[8];
  errno = 0;
  EXPECT_EQ(ReadNoCancel(-1, buffer, sizeof(buffer)), -1);
  EXPECT_EQ(errno, EBADF);
  Fds p;
  ASSERT_EQ(pipe2(p.fd, O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ReadNoCancel(p.fd[0], buffer, sizeof(buffer)), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST(Syscalls, SendmsgNoCancelSendsEveryPieceInOrder) {
  Fds s;
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s.fd), 0);
  char hello[] = "hello, ";
  char world[] = "world";
  iovec iov[2] = {{hello, 7}, {world, 5}};
  msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  EXPECT_EQ(SendmsgNoCancel(s.fd[0], &msg, MSG_NOSIGNAL), 12);
  char buffer[16] = {};
  ASSERT_EQ(read(s.fd[1], buffer, sizeof(buffer)), 12);
  EXPECT_EQ(std::string(buffer, 12), "hello, world");
}

TEST(Syscalls, SendmsgNoCancelToAGonePeerFailsWithEpipeAndNoSignal) {
  Fds s;
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s.fd), 0);
  s.Close(1);
  char byte = 'x';
  iovec iov = {&byte, 1};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  errno = 0;
  // MSG_NOSIGNAL passed through: without it SIGPIPE would end the test.
  EXPECT_EQ(SendmsgNoCancel(s.fd[0], &msg, MSG_NOSIGNAL), -1);
  EXPECT_EQ(errno, EPIPE);
}

// Both ways to wait: epoll_wait's own call, and epoll_pwait without a mask (the other kernels').
class SyscallsEpoll : public ::testing::TestWithParam<bool> {
 protected:
  int Wait(int ep, epoll_event* out, int max, int timeout_ms) {
    return GetParam() ? EpollPwaitNoMaskNoCancel(ep, out, max, timeout_ms)
                      : EpollWaitNoCancel(ep, out, max, timeout_ms);
  }
};
INSTANTIATE_TEST_SUITE_P(WaitAndPwait, SyscallsEpoll, ::testing::Bool());

TEST_P(SyscallsEpoll, ReportsWhatIsReadyAndTimesOut) {
  Fds p;
  ASSERT_EQ(pipe(p.fd), 0);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = 42;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, p.fd[0], &ev), 0);
  epoll_event out[4] = {};
  EXPECT_EQ(Wait(ep, out, 4, 0), 0);  // nothing yet: the zero timeout returns
  ASSERT_EQ(write(p.fd[1], "x", 1), 1);
  ASSERT_EQ(Wait(ep, out, 4, 1000), 1);
  EXPECT_EQ(out[0].data.u64, 42u);
  EXPECT_NE(out[0].events & EPOLLIN, 0u);
  close(ep);
  errno = 0;
  EXPECT_EQ(Wait(ep, out, 4, 0), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace sluice
