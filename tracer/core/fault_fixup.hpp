#pragma once
// Faults in relocated instructions (issue 15, item 4). An out-of-line copy of the int3 step-over
// or a displaced instruction in a jump's trampoline runs at another address than the original.
// When it faults, the kernel reports the copy's address, and a program whose handler recognises
// the faulting instruction by its address (HotSpot's SafeFetch, Go's runtime, the sanitizers)
// would not know it. The kernel hides its own uprobes the same way: a trap in the out-of-line
// copy is reported at the probed address (arch/x86/kernel/uprobes.c: arch_uprobe_abort_xol puts
// regs->ip back on the probe; traps.c fills si_addr from uprobe_get_trap_addr()).
//
// So, at the signal-delivery stop of a synchronous SIGSEGV, SIGBUS, SIGFPE or SIGILL whose RIP
// is at a copy: RIP becomes the original instruction's address, and so does si_addr where it was
// the copy's (SIGILL and SIGFPE report the instruction's address; SIGSEGV and SIGBUS a data
// address, the same from the copy, whose RIP-relative operands are re-biased to it). Nothing
// else differs: a fault leaves the registers as they were before the instruction, and a copy
// runs with the program's own registers, stack and flags.
//
// A handler may return into the middle of a jump's patched bytes (to the instruction after the
// one that faulted, or to retry a displaced instruction other than the first). The thread is
// therefore watched until its handler returns: resumed with PTRACE_SYSCALL, and at the exit of
// rt_sigreturn a RIP at a displaced instruction goes to that instruction's copy. After a detach
// nothing can do this: the jumps are gone then, but a thread still running a trampoline's copy
// faults with the copy's address.
#include "tracer/core/process.hpp"

namespace probecost {

// At the signal-delivery stop of `sig` (not SIGTRAP): fixes RIP and siginfo up when a relocated
// copy raised it. True when it did.
bool fix_up_fault(TracedProcess& proc, Task& task, int sig);

// At a syscall-stop of `task`: if it is the exit of a watched handler's rt_sigreturn, moves a
// RIP inside a jump's patched bytes to its copy.
void after_handler(TracedProcess& proc, Task& task);

}  // namespace probecost
