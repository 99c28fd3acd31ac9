// Making a stopped tracee thread run one system call, or one function, of our choosing, and
// what that is for: mapping scratch pages near the code we probe, and asking an IFUNC's
// resolver which implementation the process uses.
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <cstring>

#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"
#include "tracer/core/held_lend.hpp"
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

// SIGTRAP unblocked in `t` while we inject code into it. Each single-step's trap is forced on
// the thread, and the kernel's force_sig resets a blocked signal's disposition to SIG_DFL, for
// the whole process: injecting into a thread that blocks SIGTRAP (pthread_create blocks every
// signal in a new thread until its start routine runs) took the program's SIGTRAP handler away
// (seen with fault_busy --churn). The mask is set with ptrace, not an injected call.
class SigtrapUnblocked {
 public:
  explicit SigtrapUnblocked(Task& t) : t_(t), saved_(t.blocked_signals()) {
    constexpr std::uint64_t bit = 1ull << (SIGTRAP - 1);
    if (saved_ && (*saved_ & bit) && t_.set_blocked_signals(*saved_ & ~bit)) return;
    saved_.reset();  // nothing to put back
  }
  ~SigtrapUnblocked() {
    try {
      if (saved_) t_.set_blocked_signals(*saved_);
    } catch (const Error&) {
      // The thread is going away with its process.
    }
  }
  SigtrapUnblocked(const SigtrapUnblocked&) = delete;
  SigtrapUnblocked& operator=(const SigtrapUnblocked&) = delete;

 private:
  Task& t_;
  std::optional<std::uint64_t> saved_;
};

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

// At a PTRACE_EVENT_CLONE/FORK/EXEC/VFORK_DONE stop the thread is still inside the system
// call: RAX holds the -ENOSYS the entry code put there, and the call's result is written only
// when the thread leaves the kernel. Injected code run from that stop leaves the kernel first,
// so the result lands in the injected registers and the -ENOSYS is what we "restore" after:
// glibc's pthread_create took clone3's -ENOSYS for "no clone3" and created the thread a
// second time with clone (fault_suite signals: a SIGINT during pthread_create, 4 of 60
// launched cycles died of SIGSEGV in a thread whose start routine had been freed). So the
// thread finishes its call first, at its syscall-exit-stop, where RAX is the result.
bool TracedProcess::leave_syscall_event(Task& t) {
  int event = t.last_stop().ptrace_event();
  if (event != PTRACE_EVENT_CLONE && event != PTRACE_EVENT_FORK && event != PTRACE_EVENT_EXEC &&
      event != PTRACE_EVENT_VFORK_DONE) {
    return true;  // not inside a system call (or one whose result the stop already holds)
  }
  if (!t.resume_to_syscall_exit()) return false;
  for (;;) {
    auto ws = wait_for(t);
    if (!ws) return false;
    if (ws->syscall_stop()) return true;
    // Nothing but a signal can come first (a SIGKILL ends the thread: no report then).
    if (ws->signal_stop()) t.pending_signals.push_back(ws->stop_signal());
    if (!t.resume_to_syscall_exit()) return false;
  }
}

const user_regs_struct* TracedProcess::step_injected(Task& t) {
  if (!t.single_step()) return nullptr;
  auto ws = wait_for(t);
  if (!ws) return nullptr;
  // A signal arriving meanwhile is delivered after; one the injected code raised is not.
  if (ws->signal_stop() && ws->stop_signal() != SIGTRAP &&
      !way_back::injected_code_faulted(t.tid(), ws->stop_signal())) {
    t.pending_signals.push_back(ws->stop_signal());
  }
  return t.regs();
}

long TracedProcess::inject_syscall(Task& t, long nr, const std::array<long, 6>& args) {
  pid_t tid = t.tid();
  const user_regs_struct* current = t.regs();
  if (!current) throw Error("thread " + std::to_string(tid) + " is gone");
  user_regs_struct saved = *current;
  user_regs_struct regs = syscall_regs(saved, nr, args);
  if (!syscall_insn_tried_) {
    syscall_insn_ = vdso_syscall(memory_, maps());
    syscall_insn_tried_ = true;
  }
  RuntimeAddr pc(saved.rip);
  RuntimeAddr at = syscall_insn_.value_or(pc);
  bool keep = t.held() && t.last_stop().signal_stop();
  if (!keep) {
    if (auto frame = way_back_frame(t, saved)) {
      way_back::PutBack unless_lent(tid, *frame);
      check_seccomp(pid_, tid, nr, args, gadgets_->syscall_leave_ret);
      unless_lent.release();
      regs.rip = gadgets_->syscall_leave_ret.value();
      return inject_with_way_back(t, regs, saved, *frame, gadgets_->syscall_leave_ret);
    }
  }
  check_seccomp(pid_, tid, nr, args, at);
  SyscallSite site(memory_, pc, syscall_insn_);
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

bool TracedProcess::with_others_stopped(Task* via, const std::function<void(Task&)>& inject) {
  // A thread lent to a batch runs on registers of ours: nothing else is injected meanwhile.
  if (lending_.second) throw Error("an injected call inside a batch of injected system calls");
  Task* t = via ? via : any_stopped_thread();
  if (!t) return false;
  release_hold(*this, *t);  // before the others stop: their waits would collect it in place
  TaskRef ref = t->ref();
  OthersStopped others(*this, ref.tid);
  t = task(ref);  // another thread's exec may have ended it meanwhile
  if (!t || !leave_syscall_event(*t) || !leave_rseq_sequence(*t)) return false;
  lent_mask_ = t->blocked_signals();  // before SIGTRAP is unblocked: the way back's mask
  SigtrapUnblocked unblocked(*t);
  inject(*t);
  return true;
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
bool TracedProcess::give_back_registers(Task& task, const user_regs_struct& saved,
                                        bool keep_step_stop) {
  TaskRef ref = task.ref();
  if (!keep_step_stop) park_after_steps(ref);
  Task* t = this->task(ref);
  return t && t->set_regs(saved);
}

void TracedProcess::park_after_steps(TaskRef ref) {
  Task* t = task(ref);
  if (t && t->stepping()) park_at_interrupt(ref);
}

void TracedProcess::park_at_interrupt(TaskRef ref) {
  try {
    Task* t = task(ref);
    if (!t || !t->stopped()) return;
    if (!t->interrupt() || !t->resume_keeping_signals()) return;
    for (;;) {
      auto ws = wait_for(*t);
      if (!ws || !(t = task(ref))) return;
      if (ws->interrupt_stop()) return;
      // A thread of a stopped group lent to a detach's call goes back into the group-stop:
      // a stop as good as the interrupt's, where the detach leaves it (free_stopped_for_calls).
      if (ws->group_stop() && letting_go_) return;
      if (!ws->signal_stop()) {  // a group-stop, an exit: the event loop's
        events_.defer(*t, *ws);
        return;
      }
      // A signal that reached the thread first: kept for it, and on to the trap.
      t->pending_signals.push_back(ws->stop_signal());
      if (!t->resume_keeping_signals()) return;
    }
  } catch (const Error&) {
    // The thread or its process is going away.
  }
}

std::optional<way_back::Frame> TracedProcess::way_back_frame(Task& t, const user_regs_struct& saved,
                                                             std::uint64_t below) {
  if (!gadgets_tried_) {
    gadgets_ = way_back::find_gadgets(memory_, proc_tid(), maps());
    gadgets_tried_ = true;
  }
  if (!gadgets_ || !lent_mask_) return std::nullopt;
  return way_back::write_frame(t.tid(), saved, *lent_mask_, *gadgets_, below);
}

std::optional<long> TracedProcess::syscall_in_tracee(long nr, const std::array<long, 6>& args,
                                                     Task* via) {
  if (lending_.second && (!via || via->tid() == lending_.first))
    return (*lending_.second)(nr, args);  // in_one_lending's thread
  // The `syscall` borrows two bytes at the thread's PC, which another thread could execute
  // meanwhile (the instruction after a one-byte site, say): everyone else waits.
  std::optional<long> r;
  with_others_stopped(via, [&](Task& t) { r = inject_syscall(t, nr, args); });
  return r;
}

std::optional<long> TracedProcess::run_in_tracee(RuntimeAddr code, RuntimeAddr syscall_at, long nr,
                                                 const std::array<long, 6>& args) {
  std::optional<long> r;
  with_others_stopped(nullptr, [&](Task& t) {
    const user_regs_struct* now = t.regs();
    if (!now || (t.held() && t.last_stop().signal_stop())) return;
    user_regs_struct saved = *now;
    auto frame = way_back_frame(t, saved);
    if (!frame) return;
    way_back::PutBack unless_lent(t.tid(), *frame);
    check_seccomp(pid_, t.tid(), nr, args, syscall_at);
    unless_lent.release();
    user_regs_struct regs = syscall_regs(saved, nr, args);
    regs.rip = code.value();
    // inloop+2: the code's registers set, the thread not yet resumed.
    fault_plan::at_stage("inloop");
    r = inject_with_way_back(t, regs, saved, *frame, syscall_at);
  });
  return r;
}

std::uint64_t TracedProcess::inject_call(Task& t, RuntimeAddr fn) {
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
    if (auto call = syscall_at_pc(memory_, *t.regs())) {
      try {
        check_seccomp(pid_, tid, call->first, call->second, RuntimeAddr(t.regs()->rip));
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

std::optional<std::uint64_t> TracedProcess::call_in_tracee(RuntimeAddr fn, Task* via) {
  // The function runs on the process's memory: no other thread runs meanwhile.
  std::optional<std::uint64_t> r;
  with_others_stopped(via, [&](Task& t) { r = inject_call(t, fn); });
  return r;
}

}  // namespace probecost
