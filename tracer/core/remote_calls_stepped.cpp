// Injected calls single-stepped, where no way back can be had (remote_calls.hpp): a system call
// at the vDSO's `syscall` (or two bytes borrowed at the thread's PC without a vDSO), a function
// stepped to its return; and the park that leaves no step flag or SIGTRAP behind after them.
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <cstring>

#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"
#include "tracer/core/injected_syscall.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/way_back.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/seccomp.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

std::optional<std::pair<long, std::array<long, 6>>> syscall_at_pc(TraceeMemory& memory,
                                                                  const user_regs_struct& r) {
  std::array<std::uint8_t, 2> insn{};
  try {
    memory.read(RuntimeAddr(r.rip), insn);
  } catch (const Error&) {
    return std::nullopt;  // a step will fault there, and say so
  }
  if (insn[0] != 0x0f || insn[1] != 0x05) return std::nullopt;
  auto a = [](unsigned long long v) { return static_cast<long>(v); };
  return std::pair{a(r.rax),
                   std::array<long, 6>{a(r.rdi), a(r.rsi), a(r.rdx), a(r.r10), a(r.r8), a(r.r9)}};
}

// A `syscall` instruction (0f 05) of the process's vDSO: an injected system call runs there,
// so that none of the program's code is ever written to make one. (Borrowing two bytes at the
// thread's PC, as before, left a `syscall` in the middle of the program's code when probecost
// was killed while one ran.) Any 0f 05 will do: only it runs, from its first byte.
std::optional<RuntimeAddr> vdso_syscall(TraceeMemory& memory, const std::vector<Mapping>& maps) {
  for (const Mapping& m : maps) {
    if (m.path != "[vdso]" || !m.exec) continue;
    std::vector<std::uint8_t> code(static_cast<std::size_t>(m.end - m.start));
    try {
      memory.read(m.start, code);
    } catch (const Error&) {
      return std::nullopt;
    }
    for (std::size_t i = 0; i + 1 < code.size(); ++i) {
      if (code[i] == 0x0f && code[i + 1] == 0x05) return m.start + static_cast<std::int64_t>(i);
    }
  }
  return std::nullopt;
}

// The thread runs on registers of ours, with no way back (tracer/core/way_back.hpp), for the
// guard's lifetime (PROBECOST_DIE_AT_HIT says so of a death then: tracer/os/fault_plan.hpp).
struct RegistersLent {
  RegistersLent() { fault_plan::set_injecting(true); }
  ~RegistersLent() { fault_plan::set_injecting(false); }
  RegistersLent(const RegistersLent&) = delete;
  RegistersLent& operator=(const RegistersLent&) = delete;
};

// Where a system call is injected: the vDSO's syscall instruction, or without a vDSO (vdso=0)
// two bytes at the thread's PC, borrowed for the call and put back.
class SyscallSite {
 public:
  SyscallSite(TraceeMemory& memory, RuntimeAddr pc, std::optional<RuntimeAddr> vdso)
      : memory_(memory), at_(vdso.value_or(pc)), borrowed_(!vdso) {
    if (!borrowed_) return;
    memory_.read(at_, saved_);
    const std::array<std::uint8_t, 2> syscall_insn = {0x0f, 0x05};
    memory_.write(at_, syscall_insn);
  }
  ~SyscallSite() {
    if (!borrowed_) return;
    try {
      memory_.write(at_, saved_);
    } catch (const Error&) {
      // The process is gone.
    }
  }
  RuntimeAddr at() const { return at_; }

 private:
  TraceeMemory& memory_;
  RuntimeAddr at_;
  bool borrowed_;
  std::array<std::uint8_t, 2> saved_{};
};

}  // namespace

const user_regs_struct* RemoteCalls::step_injected(Task& t) {
  if (!t.single_step()) return nullptr;
  auto ws = proc_.wait_for(t);
  if (!ws) return nullptr;
  // A signal arriving meanwhile is delivered after; one the injected code raised is not.
  if (ws->signal_stop() && ws->stop_signal() != SIGTRAP &&
      !way_back::injected_code_faulted(t.tid(), ws->stop_signal())) {
    t.pending_signals.push_back(ws->stop_signal());
  }
  return t.regs();
}

long RemoteCalls::inject_syscall(Task& t, long nr, const std::array<long, 6>& args) {
  pid_t tid = t.tid();
  const user_regs_struct* current = t.regs();
  if (!current) throw Error("thread " + std::to_string(tid) + " is gone");
  user_regs_struct saved = *current;
  user_regs_struct regs = syscall_regs(saved, nr, args);
  if (!syscall_insn_tried_) {
    syscall_insn_ = vdso_syscall(proc_.memory(), proc_.maps());
    syscall_insn_tried_ = true;
  }
  RuntimeAddr pc(saved.rip);
  RuntimeAddr at = syscall_insn_.value_or(pc);
  bool keep = t.held() && t.last_stop().signal_stop();
  check_seccomp(proc_.pid(), tid, nr, args, at);
  SyscallSite site(proc_.memory(), pc, syscall_insn_);
  regs.rip = at.value();
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during an injected system call");
  };
  if (!t.set_regs(regs)) throw gone();
  RegistersLent lent;
  for (;;) {
    const user_regs_struct* now = step_injected(t);
    if (!now) throw gone();
    if (now->rip == at.value() + 2) break;  // the syscall ran
  }
  long result = static_cast<long>(t.regs()->rax);
  if (!give_back_registers(t, saved, keep)) throw gone();
  return result;
}

// Issue 23 item 2: a SIGKILL of probecost after an injected call left the thread at the
// last step's stop, whose SIGTRAP the kernel still held (Family holds signal stops) and whose
// single-step flag survives the tracer (Task::stepping): let go, the thread took the SIGTRAP
// at once (its read then failing with EINTR), or restarted the futex or read it was stopped
// in and trapped at its exit (TRAP_BRKPT, TF clear in the program's handler: the kernel
// clears the flag as it delivers). So the thread is moved to an interrupt stop, which holds
// neither, before its registers are given back: PTRACE_INTERRUPT queues a trap, and
// PTRACE_CONT (which clears the flag and cancels the step's SIGTRAP) reaches it in the same
// get_signal() loop, before any instruction of the thread runs. Given back there, the
// registers are the thread's own from a stop that holds nothing; the restart of the system
// call the thread was in is the kernel's, as before, when it is resumed. Given back first,
// a death between the two would still have trapped. Not for a stop whose signal the kernel
// holds for the thread (one past our int3, left held: held_lend.hpp): the last step's SIGTRAP
// stands in for it, and the trap area's handler takes the thread where its registers put it.
bool RemoteCalls::give_back_registers(Task& task, const user_regs_struct& saved,
                                      bool keep_step_stop) {
  TaskRef ref = task.ref();
  if (!keep_step_stop) park_after_steps(ref);
  Task* t = proc_.task(ref);
  return t && t->set_regs(saved);
}

void RemoteCalls::park_after_steps(TaskRef ref) {
  Task* t = proc_.task(ref);
  if (t && t->stepping()) proc_.park_at_interrupt(ref);
}

std::uint64_t RemoteCalls::inject_call(Task& t, RuntimeAddr fn) {
  pid_t tid = t.tid();
  const user_regs_struct* current = t.regs();
  if (!current) throw Error("thread " + std::to_string(tid) + " is gone");
  user_regs_struct saved = *current;
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during a call of " + fn.hex());
  };
  bool keep = t.held() && t.last_stop().signal_stop();
  fault_plan::at_stage("ifunc");
  if (auto r = keep ? std::nullopt : call_with_way_back(t, fn, saved)) return *r;
  // Else, single-stepped: a frame below the thread's stack pointer and its 128-byte red zone,
  // aligned as the ABI wants it at a call (rsp + 8 a multiple of 16 at the function's first
  // instruction), with a return address that we never let run: we stop the thread the moment it
  // returns there with the stack popped. Nothing of the tracee's code is borrowed.
  std::uint64_t sp = ((saved.rsp - 128 - 256) & ~std::uint64_t{15}) - 8;
  RuntimeAddr ret(saved.rip);
  std::array<std::uint8_t, 8> ret_bytes{};
  std::uint64_t ret_value = ret.value();
  std::memcpy(ret_bytes.data(), &ret_value, sizeof ret_value);
  if (sys::vm_write(tid, ret_bytes.data(), ret_bytes.size(), sp) != 8)  // not a guard page's
    throw Error("no room on thread " + std::to_string(tid) + "'s stack to call " + fn.hex());
  user_regs_struct regs = saved;
  regs.rsp = sp;
  regs.rip = fn.value();
  regs.rax = 0;
  regs.rdi = regs.rsi = regs.rdx = regs.rcx = regs.r8 = regs.r9 = 0;
  regs.eflags &= ~(0x400ull | 0x100ull);  // DF clear at a call (ABI); TF is ours to set
  // As for an injected system call: the kernel must not restart one the thread was in.
  regs.orig_rax = static_cast<unsigned long long>(-1);
  auto fpu = way_back::fpu_state(tid);  // put back before the registers (way_back.hpp)
  if (!t.set_regs(regs)) throw gone();
  RegistersLent lent;
  // A resolver is tens of instructions; a bound keeps a runaway one from holding us forever.
  constexpr int kMaxSteps = 200'000;
  for (int step = 0;; ++step) {
    if (step == kMaxSteps) {
      give_back_registers(t, saved, keep);
      throw Error("the function at " + fn.hex() + " called in thread " + std::to_string(tid) +
                  " did not return within " + std::to_string(kMaxSteps) + " instructions");
    }
    // A system call the function makes is the tracee's filter's to allow, as ours are.
    if (auto call = syscall_at_pc(proc_.memory(), *t.regs())) {
      try {
        check_seccomp(proc_.pid(), tid, call->first, call->second, RuntimeAddr(t.regs()->rip));
      } catch (const seccomp::Refused&) {
        give_back_registers(t, saved, keep);
        throw;
      }
    }
    const user_regs_struct* now = step_injected(t);
    if (!now) throw gone();
    if (now->rip == ret.value() && now->rsp == sp + 8) break;  // returned
    if (int sig = t.last_stop().signal_stop() ? t.last_stop().stop_signal() : 0;
        way_back::injected_code_faulted(tid, sig)) {
      way_back::set_fpu_state(tid, fpu);
      give_back_registers(t, saved, keep);
      throw Error("the function at " + fn.hex() + " raised signal " + std::to_string(sig));
    }
  }
  std::uint64_t result = t.regs()->rax;
  way_back::set_fpu_state(tid, fpu);
  if (!give_back_registers(t, saved, keep)) throw gone();
  return result;
}

}  // namespace probecost
