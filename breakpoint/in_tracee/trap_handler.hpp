#pragma once
// The SIGTRAP handler probecost puts into a process it probes with int3, so that nobody dies
// when probecost itself does (SIGKILL, the OOM killer): a thread that then hits one of our
// int3 bytes, or had hit one and was waiting for us, gets a SIGTRAP with no tracer to take it.
// The handler does in the process what probecost would have done: it sends the thread to a
// copy of the displaced instruction, which goes on to the code after it (the kernel's uprobes
// go through their [uprobes] page alike). Written by probecost into the trap area (no agent
// library); generated as instructions with Zydis' encoder (x86_asm.hpp).
//
// While probecost is attached the handler is never reached for our sites: the tracer sees
// every SIGTRAP first and suppresses ours. Every other SIGTRAP goes to the program's own
// disposition, exactly as the kernel would have delivered it:
// - a handler is called with the mask the kernel would have set (the interrupted mask, its
//   sa_mask, and SIGTRAP unless SA_NODEFER), after SA_RESETHAND resets the disposition;
//   SA_ONSTACK and SA_RESTART are ours too, so the stack and restarts are the same;
// - SIG_DFL: the disposition is reset and the same siginfo sent again (rt_tgsigqueueinfo):
//   delivered after our return, it terminates the process with a core, as it would have;
// - SIG_IGN: a signal sent by kill() is dropped; one the kernel forced (si_code SI_KERNEL or
//   positive: int3, a single-step) kills, as the kernel's force_sig does with SIG_IGN.
// The handler reads the area's records (trap_area.hpp) afresh on every signal.
#include <cstdint>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/x86/decoder.hpp"

namespace probecost::trap {

struct HandlerCode {
  std::vector<std::uint8_t> bytes;
  std::uint64_t handler_offset = 0;   // from the code's start
  std::uint64_t restorer_offset = 0;  // rt_sigreturn
  // The system calls the code makes: their numbers and where each syscall instruction is,
  // for checking them against the process's seccomp filter before installing.
  struct Call {
    long nr;
    std::uint64_t offset;
  };
  std::vector<Call> calls;
};

// The code for an area at `area` laid out as `layout`, to be written at the layout's
// code_offset.
HandlerCode handler_code(RuntimeAddr area, const Layout& layout);

// Our disposition over the program's: the handler with SA_SIGINFO and our restorer, the
// program's SA_ONSTACK and SA_RESTART, every signal blocked while it runs.
KernelSigaction our_disposition(const KernelSigaction& program, RuntimeAddr handler,
                                RuntimeAddr restorer);

// What the handler resumes a thread at instead of the displaced instruction `in`: its copy at
// `at` that goes on to the code after it (relocate()), or for a direct call, the return
// address pushed and a jump to the callee. Empty, with `why`, when there is no such copy.
std::vector<std::uint8_t> resume_copy(const Instruction& in, RuntimeAddr at, std::string& why);

// The `moved` addresses of a record for `in`: where the tracer may have put a thread past it
// (its own copy of it, `tracer_copy`, may be empty).
std::array<std::uint64_t, 3> moved_addresses(const Instruction& in, RuntimeAddr tracer_copy);

}  // namespace probecost::trap
