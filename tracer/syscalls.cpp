#include "tracer/syscalls.hpp"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace probecost::sys {

Counters& counters() {
  static Counters c;
  return c;
}

long ptrace_call(enum __ptrace_request request, pid_t tid, void* addr, void* data) {
  ++counters().ptrace;
  return ::ptrace(request, tid, addr, data);
}

pid_t wait_for(pid_t tid, int* status, int options, bool interruptible) {
  for (;;) {
    ++counters().wait;
    pid_t r = ::waitpid(tid, status, options);
    if (r >= 0 || errno != EINTR || interruptible) return r;
  }
}

int tgkill(pid_t tgid, pid_t tid, int sig) {
  ++counters().other;
  return static_cast<int>(::syscall(SYS_tgkill, tgid, tid, sig));
}

int tkill(pid_t tid, int sig) {
  ++counters().other;
  return static_cast<int>(::syscall(SYS_tkill, tid, sig));
}

}  // namespace probecost::sys
