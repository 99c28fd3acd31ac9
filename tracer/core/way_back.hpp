#pragma once
// The way back of a thread lent to an injected system call, should probecost die while the
// thread runs on our registers (issue 23 item 8; fault_suite record-sigkill harmed 2 to 6% of
// its cycles with it: the thread went on from the vDSO's `syscall` into its `leave; ret` with
// its own RBP and died of SIGSEGV at a return address out of libc's data).
//
// The dying tracer's exit_ptrace() lets every tracee go from its stop as it is. So the call is
// set up to end well with no tracer: it runs at a vDSO `syscall` followed by `leave`, register
// clearing and `ret`, with RBP lent to point at a frame written below the thread's red zone.
// If the thread runs on untraced, `leave; ret` reaches libc's __restore_rt (`mov $15,%rax;
// syscall`), and rt_sigreturn loads the frame: every register, RIP, the flags, the FPU state
// (PTRACE_GETREGSET NT_X86_XSTATE) and the signal mask the thread had, the call it was
// interrupted in restarted (RIP - 2, RAX its number), as the kernel would have on its resume.
// The frame's uc_stack has an invalid ss_flags: restore_altstack() fails on it, and the kernel
// ignores that failure, so the thread's sigaltstack stays as it is (we cannot read it).
// The injected call itself still runs (a mapping or a descriptor made by it stays).
//
// Not covered (these keep the single-stepped call, whose death lets the thread go on our
// registers): no vDSO or no __restore_rt, no room on the thread's stack, a thread stopped at
// one of our int3 hits with its SIGTRAP held, an IFUNC resolver called in a thread under
// seccomp (call_way_back.cpp says why). Approximate:
// an ERESTART_RESTARTBLOCK call (nanosleep, poll with a timeout) is restarted from its start,
// not by restart_syscall (whose state rt_sigreturn resets), so it waits its whole time again;
// a signal delivered to the thread at its stop, if probecost dies then, runs its handler first
// on the stack above the frame (4 KiB below the red zone). A process with user shadow stacks
// (not in Debian 12's glibc) would need a restore token on it.
#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <optional>

#include "common/address.hpp"

namespace probecost {

class TraceeMemory;

namespace way_back {

// The two pieces of code the way back runs, none of them written by us.
struct Gadgets {
  RuntimeAddr syscall_leave_ret;  // vDSO: 0f 05, c9, xor r32,r32 ..., c3
  RuntimeAddr restore_rt;         // libc: 48 c7 c0 0f 00 00 00 0f 05
};
// Found in process `pid`'s vDSO and its executable file mappings (libc's first); nothing when
// one of them is not there (no vDSO, another libc).
std::optional<Gadgets> find_gadgets(TraceeMemory& memory, pid_t pid);

// Writes the frame for thread `tid` stopped with `saved` (its signal mask `mask`) and returns
// the RBP to lend it; nothing when its FPU state cannot be read or the frame not written.
std::optional<RuntimeAddr> write_frame(TraceeMemory& memory, pid_t tid,
                                       const user_regs_struct& saved, std::uint64_t mask,
                                       const Gadgets& gadgets);

}  // namespace way_back
}  // namespace probecost
