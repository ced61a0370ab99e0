// SigpipeSuppression: a write to a closed peer inside the scope fails with EPIPE instead of killing the process
// (SIGPIPE's default action), and the thread's signal mask and pending set are as they were after the scope.
// The death tests run in a child with SIGPIPE's default action, as a C program that never set it has.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "client/transport/sigpipe_suppression.h"

namespace blockps {
namespace {

// Writes one byte into a pipe whose read end is closed: the kernel answers EPIPE and raises SIGPIPE.
int write_to_closed_pipe() {
  int fds[2];
  if (::pipe(fds) != 0) return -2;
  ::close(fds[0]);
  const char byte = 1;
  const ssize_t n = ::write(fds[1], &byte, 1);
  const int err = errno;
  ::close(fds[1]);
  return n < 0 ? err : 0;
}

bool sigpipe_pending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

bool sigpipe_blocked() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

// The control: without the scope the same write kills the process, so the test below can fail.
TEST(SigpipeSuppressionDeathTest, WithoutItAWriteToAClosedPeerKillsTheProcess) {
  EXPECT_EXIT(
      {
        ::signal(SIGPIPE, SIG_DFL);
        write_to_closed_pipe();
        ::_exit(0);
      },
      ::testing::KilledBySignal(SIGPIPE), "");
}

TEST(SigpipeSuppressionDeathTest, InsideItTheWriteFailsWithEpipeAndNothingIsLeftPending) {
  EXPECT_EXIT(
      {
        ::signal(SIGPIPE, SIG_DFL);
        int err = 0;
        {
          const SigpipeSuppression no_sigpipe;
          err = write_to_closed_pipe();
          const SigpipeSuppression nested;  // an inner scope leaves the consuming to the outer
          if (write_to_closed_pipe() != EPIPE) ::_exit(3);
        }
        if (err != EPIPE) ::_exit(2);
        if (sigpipe_pending() || sigpipe_blocked()) ::_exit(4);
        ::_exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A SIGPIPE that was pending (blocked by the program) before the scope is the program's: it stays pending, and
// the mask the program set stays.
TEST(SigpipeSuppressionTest, ASigpipePendingBeforeStaysAndTheMaskIsRestored) {
  sigset_t sigpipe, old_mask;
  sigemptyset(&sigpipe);
  sigaddset(&sigpipe, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &sigpipe, &old_mask), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGPIPE), 0);
  ASSERT_TRUE(sigpipe_pending());
  {
    const SigpipeSuppression no_sigpipe;
    EXPECT_EQ(write_to_closed_pipe(), EPIPE);
  }
  EXPECT_TRUE(sigpipe_pending());
  EXPECT_TRUE(sigpipe_blocked());
  const timespec now{0, 0};
  EXPECT_EQ(sigtimedwait(&sigpipe, nullptr, &now), SIGPIPE);
  EXPECT_FALSE(sigpipe_pending());
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old_mask, nullptr), 0);
}

}  // namespace
}  // namespace blockps
