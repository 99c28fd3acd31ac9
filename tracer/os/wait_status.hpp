#pragma once
// A decoded waitpid() status. probecost's sources decode wait statuses only through it:
// WIFSTOPPED and friends appear nowhere else outside tests/.
#include <signal.h>
#include <sys/ptrace.h>

#include <string>

namespace probecost {

class WaitStatus {
 public:
  explicit WaitStatus(int raw) : raw_(raw) {}
  // The status waitpid would have given for what waitid reported in `info` (si_code CLD_*,
  // si_status: for a ptrace-stop the whole stop code, event and 0x80 bits included).
  static WaitStatus of(const siginfo_t& info);
  int raw() const { return raw_; }

  bool exited() const;
  bool killed() const;
  bool gone() const { return exited() || killed(); }
  int exit_code() const;
  int term_signal() const;

  bool stopped() const;
  // With PTRACE_O_TRACESYSGOOD a syscall-stop reports SIGTRAP|0x80.
  bool syscall_stop() const;
  // PTRACE_EVENT_* for an event stop, 0 otherwise (bits 16..23 of the status).
  int ptrace_event() const;
  // A plain signal-delivery-stop (not an event, not a syscall-stop): stop_signal() is the signal.
  bool signal_stop() const { return stopped() && !syscall_stop() && ptrace_event() == 0; }
  int stop_signal() const;
  // Under PTRACE_SEIZE, a PTRACE_EVENT_STOP is either a group-stop (the process is being
  // stopped by SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU: to be parked with PTRACE_LISTEN) or a
  // plain stop (PTRACE_INTERRUPT's, or a new thread's first), which carries no signal.
  bool group_stop() const;
  bool interrupt_stop() const { return ptrace_event() == PTRACE_EVENT_STOP && !group_stop(); }
  // PTRACE_EVENT_CLONE, _FORK or _VFORK: a new task exists, traced from birth.
  bool new_task_event() const {
    int e = ptrace_event();
    return e == PTRACE_EVENT_CLONE || e == PTRACE_EVENT_FORK || e == PTRACE_EVENT_VFORK;
  }

  std::string describe() const;

 private:
  int raw_;
};

// Why a thread reported SIGTRAP, from the siginfo the kernel attached (PTRACE_GETSIGINFO).
enum class TrapCause {
  Breakpoint,  // int3 (si_code SI_KERNEL on x86-64) or TRAP_BRKPT
  SingleStep,  // EFLAGS.TF after PTRACE_SINGLESTEP: TRAP_TRACE
  Other,       // a SIGTRAP somebody sent (kill/tgkill), or a hardware watchpoint
};
TrapCause classify_trap(const siginfo_t& info);

}  // namespace probecost
