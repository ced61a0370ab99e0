#pragma once

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>

namespace blockps {

// libiscsi writes to its socket with writev(), which raises SIGPIPE when the target has closed the connection
// (a tgtd restarted, a session dropped by `tgtadm --op delete --mode conn`). SIGPIPE's default action kills the
// process: a C or C++ training program that never touched its signal handling would die where libblockps would
// have reconnected. A library must not change the process's handlers, so every call into libiscsi that may
// write runs inside one of these: SIGPIPE is blocked in this thread for the scope (the write then fails with
// EPIPE, which libiscsi reports as a transport error), a SIGPIPE the scope raised is taken off the thread's
// pending set before the old mask comes back, and one that was pending before is left alone.
// Scopes nest: an inner one finds SIGPIPE blocked and leaves the consuming to the outer.
class SigpipeSuppression {
 public:
  SigpipeSuppression() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    pending_before_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &old_mask_);
  }
  ~SigpipeSuppression() {
    const int saved_errno = errno;  // the caller may still read the failed call's errno
    if (!pending_before_ && sigismember(&old_mask_, SIGPIPE) == 0) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec now{0, 0};
        while (sigtimedwait(&sigpipe_, nullptr, &now) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    errno = saved_errno;
  }
  SigpipeSuppression(const SigpipeSuppression&) = delete;
  SigpipeSuppression& operator=(const SigpipeSuppression&) = delete;

 private:
  sigset_t sigpipe_;
  sigset_t old_mask_;
  bool pending_before_ = false;
};

}  // namespace blockps
