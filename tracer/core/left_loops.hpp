#pragma once
// Threads a killed probecost left in its warm loop (breakpoint/in_tracee/warm_loop.hpp), taken
// the rest of their way back at the next attach, before anything else is done to them.
//
// `record` has a thread run a loop that writes each page of its call buffer (100-250 ms on a
// hypervisor with shadow page tables), as an injected call with a way back: a SIGKILL of
// probecost then lets the thread finish the loop and return to its own state by itself
// (tracer/core/way_back.hpp). But `probecost restore`, run at once, attaches while the thread
// is still looping: it unmapped the call buffer under it (the thread died of SIGSEGV, 5 of 40
// record-sigkill cycles of the fault suite with the loop on), and an injection of its own into
// that thread would write its frame where the loop's is (the same RSP) and leave it looping for
// ever. So every attach first looks at each stopped thread: one whose RIP is in the loop of a
// page that says it is ours (header and code) is moved to where the loop's `leave; ret` would
// take it, __restore_rt, with RSP at the frame: its first instruction when resumed is the
// rt_sigreturn that gives it its own registers, mask and FPU state back. The loop's remaining
// writes (a byte ORed with 0 per page of a buffer about to go) and its getpid are skipped;
// neither is the program's work.
#include <string>
#include <vector>

namespace probecost {

class TracedProcess;

// Each stopped thread of `proc` in a warm loop moved to the rest of its way back; a line per
// thread said in the result. Never throws (a thread may vanish at any call).
std::vector<std::string> finish_left_way_backs(TracedProcess& proc);

}  // namespace probecost
