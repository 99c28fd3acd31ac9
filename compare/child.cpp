#include "compare/child.hpp"

#include <signal.h>
#include <sys/wait.h>

#include "common/error.hpp"
#include "tracer/os/ticker.hpp"
#include "tracer/os/wait_status.hpp"

namespace probecost {

Child::~Child() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void Child::wait_for_stop() {
  int status = wait(WUNTRACED);
  if (!WaitStatus(status).stopped()) {
    pid_ = 0;
    throw Error("the inferior " + WaitStatus(status).describe() + " before its loop");
  }
}

void Child::resume_to_end() {
  if (::kill(pid_, SIGCONT) != 0) throw Error::from_errno("SIGCONT to the inferior");
  int status = wait(0);
  pid_ = 0;
  WaitStatus ws(status);
  if (!ws.exited() || ws.exit_code() != 0) throw Error("the inferior " + ws.describe());
}

int Child::wait(int flags) {
  int status = 0;
  while (::waitpid(pid_, &status, flags) < 0) {
    if (errno != EINTR) throw Error::from_errno("waitpid on the inferior");
    if (stop_requested()) throw Error("interrupted");
  }
  return status;
}

}  // namespace probecost
