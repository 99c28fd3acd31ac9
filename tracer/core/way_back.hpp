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
// registers): no vDSO or no __restore_rt, no room on the thread's stack, a thread one past
// our int3 whose stop held_lend.hpp leaves held, an IFUNC resolver called in a thread under
// seccomp (remote_calls_function.cpp says why). Approximate:
// an ERESTART_RESTARTBLOCK call (nanosleep, poll with a timeout) is restarted from its start,
// not by restart_syscall (whose state rt_sigreturn resets), so it waits its whole time again;
// a signal delivered to the thread at its stop, if probecost dies then, runs its handler first
// on the stack above the frame (4 KiB below the red zone). A process with user shadow stacks
// (not in Debian 12's glibc) would need a restore token on it.
#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/address.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

class TraceeMemory;

namespace way_back {

// The two pieces of code the way back runs, none of them written by us.
struct Gadgets {
  RuntimeAddr syscall_leave_ret;  // vDSO: 0f 05, c9, xor r32,r32 ..., c3
  RuntimeAddr restore_rt;         // libc: 48 c7 c0 0f 00 00 00 0f 05
};
// Found in process `pid`'s vDSO and its executable file mappings (`maps`, libc's first);
// nothing when one of them is not there (no vDSO, another libc).
std::optional<Gadgets> find_gadgets(TraceeMemory& memory, pid_t pid, std::vector<Mapping> maps);

// A frame written below a thread's stack pointer, and what it overwrote: the bytes from `low`
// (the lowest a call may use: a function's stack under the frame) to the frame's end. Below
// RSP is not always free stack: a coroutine's or an alternate signal stack may be a small
// buffer with the program's data under it (a frame 8 KB below RSP on an 8 KiB makecontext
// stack overwrote 1128 bytes of the heap under it), or a thread's stack may end in a guard
// page, which /proc/PID/mem writes anyway (FOLL_FORCE: the resolver then faulted on its
// `ret` there, and we resumed it forever). So the bytes are read and the frame written with
// process_vm_readv/writev, which fail where the thread could not write itself, and put back
// (put_back) once the thread has its own registers again. A death of probecost mid-call
// still leaves the frame's bytes there.
struct Frame {
  RuntimeAddr rbp;  // the RBP to lend the thread
  RuntimeAddr low;
  std::vector<std::uint8_t> before;
};

// Writes the frame for thread `tid` stopped with `saved` (its signal mask `mask`), `below`
// bytes of the call's stack under it checked writable too; nothing when its FPU state cannot
// be read or the thread could not write all of it.
std::optional<Frame> write_frame(pid_t tid, const user_regs_struct& saved, std::uint64_t mask,
                                 const Gadgets& gadgets, std::uint64_t below);
// What `frame` overwrote, written back (the thread has its own registers again); false when
// it could not be.
bool put_back(pid_t tid, const Frame& frame);

// The thread's FPU, SSE and AVX state (PTRACE_GETREGSET NT_X86_XSTATE), to put back with
// set_fpu_state after a function we made it call: a resolver may use any of it (the ABI lets
// a function clobber every vector register), and the thread may have been stopped with live
// values in them, anywhere in its code (an xmm8 of a spinning loop came back changed).
std::optional<std::vector<std::uint8_t>> fpu_state(pid_t tid);
bool set_fpu_state(pid_t tid, std::optional<std::vector<std::uint8_t>> state);  // none: true

// True when signal `sig`, at a signal-delivery-stop of thread `tid`, is one the code we made it
// run raised itself (si_code > 0: the kernel's, not a kill()): it comes again at each resume,
// so the call is over (a return address in a guard page was resumed forever, probecost deaf
// even to SIGTERM).
bool injected_code_faulted(pid_t tid, int sig);

// put_back at the end of a scope, unless released (the thread was lent the frame).
class PutBack {
 public:
  PutBack(pid_t tid, const Frame& frame) : tid_(tid), frame_(&frame) {}
  ~PutBack() {
    if (frame_) put_back(tid_, *frame_);
  }
  PutBack(const PutBack&) = delete;
  PutBack& operator=(const PutBack&) = delete;
  void release() { frame_ = nullptr; }

 private:
  pid_t tid_;
  const Frame* frame_;
};

}  // namespace way_back
}  // namespace probecost
