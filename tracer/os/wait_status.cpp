#include "tracer/os/wait_status.hpp"

#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

namespace probecost {

WaitStatus WaitStatus::of(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return WaitStatus((info.si_status & 0xff) << 8);
    case CLD_KILLED:
      return WaitStatus(info.si_status & 0x7f);
    case CLD_DUMPED:
      return WaitStatus((info.si_status & 0x7f) | 0x80);
    case CLD_CONTINUED:
      return WaitStatus(0xffff);
    default:  // CLD_TRAPPED, CLD_STOPPED
      return WaitStatus((info.si_status << 8) | 0x7f);
  }
}

bool WaitStatus::exited() const {
  return WIFEXITED(raw_);
}
bool WaitStatus::killed() const {
  return WIFSIGNALED(raw_);
}
int WaitStatus::exit_code() const {
  return WEXITSTATUS(raw_);
}
int WaitStatus::term_signal() const {
  return WTERMSIG(raw_);
}
bool WaitStatus::stopped() const {
  return WIFSTOPPED(raw_);
}
bool WaitStatus::syscall_stop() const {
  return stopped() && WSTOPSIG(raw_) == (SIGTRAP | 0x80);
}
int WaitStatus::ptrace_event() const {
  return stopped() ? (raw_ >> 16) & 0xff : 0;
}
int WaitStatus::stop_signal() const {
  return WSTOPSIG(raw_) & 0x7f;
}

bool WaitStatus::group_stop() const {
  int s = stop_signal();
  return ptrace_event() == PTRACE_EVENT_STOP &&
         (s == SIGSTOP || s == SIGTSTP || s == SIGTTIN || s == SIGTTOU);
}

std::string WaitStatus::describe() const {
  if (exited()) return "exited with status " + std::to_string(exit_code());
  if (killed()) {
    return std::string("killed by signal ") + std::to_string(term_signal()) + " (" +
           sigabbrev_np(term_signal()) + ")" + (WCOREDUMP(raw_) ? ", core dumped" : "");
  }
  if (syscall_stop()) return "syscall-stop";
  if (ptrace_event() != 0) return "ptrace event " + std::to_string(ptrace_event());
  if (stopped()) return std::string("stopped by SIG") + sigabbrev_np(stop_signal());
  return "status " + std::to_string(raw_);
}

TrapCause classify_trap(const siginfo_t& info) {
  // int3 raises #BP; the kernel's do_int3 sends SIGTRAP with si_code SI_KERNEL (0x80).
  if (info.si_code == SI_KERNEL || info.si_code == TRAP_BRKPT) return TrapCause::Breakpoint;
  if (info.si_code == TRAP_TRACE) return TrapCause::SingleStep;
  return TrapCause::Other;
}

}  // namespace probecost
