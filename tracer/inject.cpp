// Making a stopped tracee thread run one system call, or one function, of our choosing, and
// what that is for: mapping scratch pages near the code we probe, and asking an IFUNC's
// resolver which implementation the process uses.
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <cstring>

#include "breakpoint/outline.hpp"
#include "common/error.hpp"
#include "tracer/maps.hpp"
#include "tracer/process.hpp"

namespace probecost {

namespace {

// Borrows the two bytes at the thread's PC for a `syscall` instruction (0f 05).
class BorrowedBytes {
 public:
  BorrowedBytes(TraceeMemory& memory, RuntimeAddr at) : memory_(memory), at_(at) {
    memory_.read(at_, saved_);
    const std::array<std::uint8_t, 2> syscall_insn = {0x0f, 0x05};
    memory_.write(at_, syscall_insn);
  }
  ~BorrowedBytes() {
    try {
      memory_.write(at_, saved_);
    } catch (const Error&) {
      // The process is gone.
    }
  }

 private:
  TraceeMemory& memory_;
  RuntimeAddr at_;
  std::array<std::uint8_t, 2> saved_{};
};

}  // namespace

const user_regs_struct* TracedProcess::step_injected(Task& t) {
  if (!t.single_step()) return nullptr;
  auto ws = wait_for(t);
  if (!ws) return nullptr;
  // A signal that arrives meanwhile is kept for the thread, and delivered after.
  if (ws->signal_stop() && ws->stop_signal() != SIGTRAP) {
    t.pending_signals.push_back(ws->stop_signal());
  }
  return t.regs();
}

long TracedProcess::inject_syscall(Task& t, long nr, const std::array<long, 6>& args) {
  pid_t tid = t.tid();
  const user_regs_struct* current = t.regs();
  if (!current) throw Error("thread " + std::to_string(tid) + " is gone");
  user_regs_struct saved = *current;
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
  RuntimeAddr pc(saved.rip);
  BorrowedBytes borrowed(memory_, pc);
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during an injected system call");
  };
  if (!t.set_regs(regs)) throw gone();
  for (;;) {
    const user_regs_struct* now = step_injected(t);
    if (!now) throw gone();
    if (now->rip == pc.value() + 2) break;  // the syscall ran
  }
  long result = static_cast<long>(t.regs()->rax);
  if (!t.set_regs(saved)) throw gone();
  return result;
}

template <typename Inject>
auto TracedProcess::with_others_stopped(Task* via, Inject inject)
    -> std::optional<decltype(inject(std::declval<Task&>()))> {
  Task* t = via ? via : any_stopped_thread();
  if (!t) return std::nullopt;
  TaskRef ref = t->ref();
  OthersStopped others(*this, ref.tid);
  t = task(ref);  // another thread's exec may have ended it meanwhile
  if (!t) return std::nullopt;
  return inject(*t);
}

std::optional<long> TracedProcess::syscall_in_tracee(long nr, const std::array<long, 6>& args,
                                                     Task* via) {
  // The `syscall` borrows two bytes at the thread's PC, which another thread could execute
  // meanwhile (the instruction after a one-byte site, say): everyone else waits.
  return with_others_stopped(via, [&](Task& t) { return inject_syscall(t, nr, args); });
}

std::uint64_t TracedProcess::inject_call(Task& t, RuntimeAddr fn) {
  pid_t tid = t.tid();
  const user_regs_struct* current = t.regs();
  if (!current) throw Error("thread " + std::to_string(tid) + " is gone");
  user_regs_struct saved = *current;
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during a call of " + fn.hex());
  };
  // A frame below the thread's stack pointer and its 128-byte red zone, aligned as the ABI
  // wants it at a call (rsp + 8 a multiple of 16 at the function's first instruction), with a
  // return address that we never let run: the thread is single-stepped, and we stop it the
  // moment it returns there with the stack popped. Nothing of the tracee's code is borrowed.
  std::uint64_t sp = ((saved.rsp - 128 - 256) & ~std::uint64_t{15}) - 8;
  RuntimeAddr ret(saved.rip);
  std::array<std::uint8_t, 8> ret_bytes{};
  std::uint64_t ret_value = ret.value();
  std::memcpy(ret_bytes.data(), &ret_value, sizeof ret_value);
  memory_.write(RuntimeAddr(sp), ret_bytes);
  user_regs_struct regs = saved;
  regs.rsp = sp;
  regs.rip = fn.value();
  regs.rax = 0;
  regs.rdi = regs.rsi = regs.rdx = regs.rcx = regs.r8 = regs.r9 = 0;
  regs.eflags &= ~(0x400ull | 0x100ull);  // DF clear at a call (ABI); TF is ours to set
  // As for an injected system call: the kernel must not restart one the thread was in.
  regs.orig_rax = static_cast<unsigned long long>(-1);
  if (!t.set_regs(regs)) throw gone();
  // A resolver is tens of instructions; a bound keeps a runaway one from holding us forever.
  constexpr int kMaxSteps = 200'000;
  for (int step = 0;; ++step) {
    if (step == kMaxSteps) {
      t.set_regs(saved);
      throw Error("the function at " + fn.hex() + " called in thread " + std::to_string(tid) +
                  " did not return within " + std::to_string(kMaxSteps) + " instructions");
    }
    const user_regs_struct* now = step_injected(t);
    if (!now) throw gone();
    if (now->rip == ret.value() && now->rsp == sp + 8) break;  // returned
  }
  std::uint64_t result = t.regs()->rax;
  if (!t.set_regs(saved)) throw gone();
  return result;
}

std::optional<std::uint64_t> TracedProcess::call_in_tracee(RuntimeAddr fn, Task* via) {
  // The function runs on the process's memory: no other thread runs meanwhile.
  return with_others_stopped(via, [&](Task& t) { return inject_call(t, fn); });
}

std::optional<RuntimeAddr> TracedProcess::map_scratch(RuntimeAddr near, Task* via) {
  // Within +-2 GiB of `near` (less a margin), so that a relocated RIP-relative operand and a
  // 5-byte jmp back both reach. MAP_FIXED_NOREPLACE: never clobber an existing mapping.
  constexpr std::uint64_t kReach = (1ull << 31) - (1ull << 20);
  auto hint = free_range_near(read_maps(proc_tid()), near, kPageSize, kReach);
  long flags = MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0);
  auto addr = syscall_in_tracee(SYS_mmap,
                                {static_cast<long>(hint ? hint->value() : 0),
                                 static_cast<long>(kPageSize), PROT_READ | PROT_EXEC, flags, -1, 0},
                                via);
  if (!addr) return std::nullopt;
  if (*addr < 0 && *addr > -4096) {
    throw Error::from_errno("mmap of a scratch page in process " + std::to_string(pid_),
                            static_cast<int>(-*addr));
  }
  scratch_pages_.push_back(RuntimeAddr(static_cast<std::uint64_t>(*addr)));
  return scratch_pages_.back();
}

}  // namespace probecost
