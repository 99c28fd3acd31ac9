// An injected function call (an IFUNC resolver) with a way back (way_back.hpp): should
// probecost die while the thread runs it, the thread comes back to its own registers by itself.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include <cstring>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost {

namespace {

// Under the frame: the 256 bytes skipped, the ABI's alignment, and the function's own stack,
// checked writable and put back after (glibc's resolvers use none but their return address).
constexpr std::uint64_t kFunctionStack = 256 + 16 + 2048;

// How long a function may run before it is taken for one that never returns (a resolver
// spinning without a system call would hold us, and the thread, forever). Resolvers take
// microseconds; the single-stepped call has its bound in instructions
// (remote_calls_stepped.cpp).
constexpr int kFunctionDeadlineS = 2;

}  // namespace

// The function returns into the vDSO's `syscall; leave; ...; ret` with RBP (callee-saved, so
// as we lent it) at the way back's frame, and its result in RAX, which that `syscall` takes for
// a call number. Untraced, that is ENOSYS (there is no such call: it is an address), and
// `leave; ret` reaches __restore_rt, whose rt_sigreturn loads the frame. Traced, the call's
// syscall-entry-stop gives us the result (orig_rax), the call is skipped (orig_rax -1), and
// from its exit stop the thread has its own registers again, as after an injected system call.
// Resumed with PTRACE_SYSCALL, never single-stepped: the step flag outlives a dying tracer.
// Not for a thread under a seccomp filter (the filter would judge the address as a call
// number, and we cannot know it before: such a thread is single-stepped through the call), nor
// where the frame finds no room: nothing is lent then, and the caller steps.
std::optional<std::uint64_t> RemoteCalls::call_with_way_back(Task& t, RuntimeAddr fn,
                                                             const user_regs_struct& saved) {
  if (seccomp::ThreadFilters::of(t.tid()).mode() != seccomp::ThreadFilters::Mode::Disabled)
    return std::nullopt;
  auto frame = way_back_frame(t, saved, kFunctionStack);
  if (!frame) return std::nullopt;
  way_back::PutBack after(t.tid(), *frame);  // once the thread has its registers back
  auto fpu = way_back::fpu_state(t.tid());
  RuntimeAddr gadget = gadgets_->syscall_leave_ret;
  // The function's stack below the frame, aligned as the ABI wants it at a call.
  std::uint64_t sp = ((frame->rbp.value() - 256) & ~std::uint64_t{15}) - 8;
  std::uint64_t ret = gadget.value();
  std::array<std::uint8_t, 8> ret_bytes{};
  std::memcpy(ret_bytes.data(), &ret, sizeof ret);
  proc_.memory().write(RuntimeAddr(sp), ret_bytes);
  user_regs_struct regs = saved;
  regs.rsp = sp;
  regs.rip = fn.value();
  regs.rbp = frame->rbp.value();
  regs.rax = 0;
  regs.rdi = regs.rsi = regs.rdx = regs.rcx = regs.r8 = regs.r9 = 0;
  regs.eflags &= ~(0x400ull | 0x100ull);                // DF clear at a call (ABI), no step flag
  regs.orig_rax = static_cast<unsigned long long>(-1);  // restart nothing the thread was in
  pid_t tid = t.tid();
  auto gone = [&] {
    return Error("thread " + std::to_string(tid) + " went away during a call of " + fn.hex());
  };
  if (!t.set_regs(regs)) throw gone();
  // From here a death of probecost lets the thread finish the call and come back by the frame.
  std::optional<std::uint64_t> result;
  auto at_entry = [&](Task& lent) {
    // The registers' orig_rax, not the syscall_info's nr: the kernel gives that as an int,
    // sign-extended (an address 0x7f..d3b85120 came as 0xffffffffd3b85120).
    const user_regs_struct* now = lent.regs();
    if (!now) throw gone();
    result = now->orig_rax;
    user_regs_struct skip = *now;
    skip.orig_rax = static_cast<unsigned long long>(-1);
    if (!lent.set_regs(skip)) throw gone();
  };
  std::string what = "a call of " + fn.hex();
  if (int fault = run_to_exit_at(t, gadget, what.c_str(), at_entry, now_s() + kFunctionDeadlineS)) {
    way_back::set_fpu_state(tid, fpu);
    if (!t.set_regs(saved)) throw gone();
    proc_.park_at_interrupt(t.ref());  // the fault's signal dropped: it was the function's
    std::string how = fault < 0
                          ? "did not return within " + std::to_string(kFunctionDeadlineS) + " s"
                          : "raised signal " + std::to_string(fault);
    throw Error("the function at " + fn.hex() + " called in thread " + std::to_string(tid) + " " +
                how + "; the thread has its registers back");
  }
  if (!result) throw gone();          // its exit came without its entry: not our call
  way_back::set_fpu_state(tid, fpu);  // before the registers: the frame has it too
  if (!t.set_regs(saved)) throw gone();
  proc_.park_at_interrupt(t.ref());
  return result;
}

}  // namespace probecost
