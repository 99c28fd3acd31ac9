#pragma once
// Whether a thread's stack can hold a signal frame, without unwinding it.
//
// The kernel writes every x86-64 signal frame with its FPU state in XSAVE format when the CPU
// and the kernel use XSAVE (use_xsave(): CPUID's OSXSAVE bit), and marks that state with
// FP_XSTATE_MAGIC1 (0x46505853, "SXPF") in the software-reserved bytes of its legacy area
// (save_sw_bytes, arch/x86/kernel/fpu/signal.c), 64-byte aligned plus 464. A stack with no such
// word between RSP and its mapping's end holds no signal frame, so no handler can return into
// anything from it; a stack with one may (or the word is a program's): the caller walks it.
// A walk (libunwind, up to 256 frames) took 1.5 ms of an attach's 9.5 ms hold for one thread
// (issue 23 item 7); reading and scanning a stack's used part takes microseconds.
#include <sys/types.h>

#include <cstdint>
#include <span>

namespace probecost {

// True when the kernel marks signal frames so (this machine's CPU and kernel use XSAVE).
bool signal_frames_marked();

// True when [rsp, end) of thread `tid`'s memory could be read whole (process_vm_readv) and holds
// no FP_XSTATE_MAGIC1 16 bytes past a multiple of 64 (where a frame's would be): no signal frame.
// False when it holds one, cannot be read, is larger than `limit` bytes, or frames are not
// marked on this machine.
bool holds_no_signal_frame(pid_t tid, std::uint64_t rsp, std::uint64_t end,
                           std::uint64_t limit = 1 << 20);

// The scan alone, over bytes that start at address `start`.
bool bytes_hold_signal_mark(std::uint64_t start, std::span<const std::uint8_t> bytes);

}  // namespace probecost
