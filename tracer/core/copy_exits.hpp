#pragma once
// Letting go of threads that are inside our relocated copies (an out-of-line copy of the int3
// step-over, a trampoline's displaced instructions), or whose signal handlers return into one.
//
// The scratch pages and trampolines stay mapped after a detach, and a thread left in a copy
// would go on there and jump back to the instruction after the original. That is right for
// the code as it is now, but not for whatever comes next: a later probecost (or another tool)
// that puts a jmp over the same site makes that jump back land inside its jmp's bytes, and the
// thread dies (SIGSEGV or SIGILL). A handler blocked across the detach is the sure case: its
// frame holds the copy's address for as long as the handler runs.
//
// So, with every thread stopped and the original bytes back: a RIP at a copy's first byte goes
// to the original instruction, and one at a copy's jump back to that jump's target; the same
// for the RIP saved in each signal frame on a thread's stack, rewritten in the frame. Both are
// exact: a copy runs on the program's registers, stack and flags, so RIP is all that differs
// there. A thread inside a trampoline's own code (its counting, before the copies) cannot be
// moved so; a later probecost sees it there (JumpProbes::check_threads) and takes no jump that
// its way back could enter in the middle.
#include "tracer/core/process.hpp"

namespace probecost {

// Every stopped thread of `proc`; never throws (a thread may vanish at any call).
void leave_copies(TracedProcess& proc);

}  // namespace probecost
