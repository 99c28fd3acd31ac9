#include "tracer/inject.hpp"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include "breakpoint/error.hpp"
#include "tracer/syscalls.hpp"
#include "tracer/wait_status.hpp"

namespace probecost {

long inject_syscall(pid_t tid, TraceeMemory& memory, long nr, const std::array<long, 6>& args) {
  user_regs_struct saved;
  if (sys::ptrace_call(PTRACE_GETREGS, tid, nullptr, &saved) < 0) {
    throw Error::from_errno("PTRACE_GETREGS before injecting a system call");
  }
  // Borrow the two bytes at the thread's PC for a `syscall` instruction (0f 05), single-step
  // it, then put bytes and registers back, as if nothing had run.
  RuntimeAddr pc(saved.rip);
  std::array<std::uint8_t, 2> code;
  memory.read(pc, code);
  const std::array<std::uint8_t, 2> syscall_insn = {0x0f, 0x05};
  memory.write(pc, syscall_insn);

  user_regs_struct regs = saved;
  regs.rax = static_cast<unsigned long long>(nr);
  regs.rdi = args[0];
  regs.rsi = args[1];
  regs.rdx = args[2];
  regs.r10 = args[3];
  regs.r8 = args[4];
  regs.r9 = args[5];
  // orig_rax = -1: the kernel must not take the thread for one interrupted in a system call
  // and "restart" it when we resume.
  regs.orig_rax = static_cast<unsigned long long>(-1);
  long result = 0;
  try {
    if (sys::ptrace_call(PTRACE_SETREGS, tid, nullptr, &regs) < 0) {
      throw Error::from_errno("PTRACE_SETREGS to inject a system call");
    }
    for (;;) {
      if (sys::ptrace_call(PTRACE_SINGLESTEP, tid, nullptr, nullptr) < 0) {
        throw Error::from_errno("PTRACE_SINGLESTEP over an injected system call");
      }
      int status = 0;
      if (sys::wait_for(tid, &status, __WALL) != tid || WaitStatus(status).gone()) {
        throw Error("thread " + std::to_string(tid) + " went away during an injected system call");
      }
      if (sys::ptrace_call(PTRACE_GETREGS, tid, nullptr, &regs) < 0) {
        throw Error::from_errno("PTRACE_GETREGS after an injected system call");
      }
      if (regs.rip == pc.value() + 2) break;  // the syscall ran (a signal may have come first)
    }
    result = static_cast<long>(regs.rax);
  } catch (...) {
    memory.write(pc, code);
    sys::ptrace_call(PTRACE_SETREGS, tid, nullptr, &saved);
    throw;
  }
  memory.write(pc, code);
  if (sys::ptrace_call(PTRACE_SETREGS, tid, nullptr, &saved) < 0) {
    throw Error::from_errno("PTRACE_SETREGS after injecting a system call");
  }
  return result;
}

}  // namespace probecost
