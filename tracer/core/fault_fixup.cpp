#include "tracer/core/fault_fixup.hpp"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>

namespace probecost {

namespace {

bool synchronous_fault(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
}

// The copy of the displaced instruction at `pc`, when `pc` is inside a jump's patched bytes
// (after the first: a thread at the site takes the jump).
std::optional<RuntimeAddr> copy_inside_patch(TracedProcess& proc, RuntimeAddr pc) {
  for (const auto& p : proc.space().patches()) {
    auto length = static_cast<std::int64_t>(p->patch().length);
    if (p->installed() && p->address() < pc && pc < p->address() + length)
      return proc.space().relocated().copy_of(pc);
  }
  return std::nullopt;
}

}  // namespace

bool fix_up_fault(TracedProcess& proc, Task& t, int sig) {
  // Another handler entered while one is watched returns first, by an rt_sigreturn of its own.
  if (t.handlers_watched > 0) ++t.handlers_watched;
  if (!synchronous_fault(sig) || proc.space().relocated().empty()) return false;
  auto rip = t.rip();
  if (!rip) return false;
  auto original = proc.space().relocated().original_of(*rip);
  if (!original) return false;
  auto got = t.siginfo();
  if (!got) return false;
  siginfo_t info = *got;
  // si_code <= 0: kill(), tgkill() or sigqueue() sent it while the thread ran the copy; the
  // instruction did not raise it, and the thread goes on in the copy after the handler.
  if (info.si_code <= 0) return false;
  if (info.si_addr == reinterpret_cast<void*>(rip->value())) {
    // PTRACE_SETSIGINFO in a signal-delivery-stop changes what the handler is given.
    info.si_addr = reinterpret_cast<void*>(original->value());
    if (!t.set_siginfo(info)) return false;
  }
  if (!t.set_rip(*original)) return false;
  if (t.handlers_watched == 0) t.handlers_watched = 1;
  return true;
}

void after_handler(TracedProcess& proc, Task& t) {
  if (t.handlers_watched == 0) return;
  // At the exit of rt_sigreturn, RIP is the one the handler's frame restored.
  auto got = t.syscall_info();
  if (!got) return;
  const __ptrace_syscall_info& info = *got;
  if (info.op == PTRACE_SYSCALL_INFO_ENTRY) {
    t.in_sigreturn = info.entry.nr == SYS_rt_sigreturn;
    return;
  }
  if (info.op != PTRACE_SYSCALL_INFO_EXIT || !t.in_sigreturn) return;
  t.in_sigreturn = false;
  --t.handlers_watched;
  if (auto copy = copy_inside_patch(proc, RuntimeAddr(info.instruction_pointer))) t.set_rip(*copy);
}

}  // namespace probecost
