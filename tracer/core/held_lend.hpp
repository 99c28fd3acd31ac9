#pragma once
// A thread about to be lent to injected code while its signal-delivery-stop is held (only
// peeked at with WNOWAIT: Family's hold_or_collect), issue 23. The kernel still keeps the
// stop's signal then: a SIGKILL of probecost while the thread runs our code lets the kernel
// deliver it at OUR registers (a vDSO `syscall`, a resolver), and the thread runs on with
// them. So the hold is let go of before the lending, in a way a death cannot harm, and the
// lending gets its way back (way_back.hpp) like any other:
// - the SIGTRAP of one of our int3 hits (RIP one past an enabled site, TRAP_BRKPT): the thread
//   is rewound onto the site and the stop collected (TracedProcess::park_trap and take_stop;
//   a real wait leaves the kernel no signal for it). Let go, it takes the int3 again (the trap
//   area's handler, the guardian) or runs the original instruction once the byte is back.
//   Every step-over goes on from the site as well as from one past it (Outline and SingleStep
//   set RIP themselves, Emulate computes it from the instruction, not from RIP).
// - any other held signal stop: collected where it is. A SIGTRAP of ours already stepped
//   over (the thread at a copy or past the instruction) needs nothing more; the program's own
//   signal is the event's handler's to keep in pending_signals (Session::dispatch, detach's
//   free_stopped_for_calls), delivered at the thread's next resume. A death while the thread
//   is lent loses that signal (the way back returns it to its own registers without it),
//   where a held stop delivered it, or the last step's SIGTRAP in its place, at our registers.
// - not a thread one byte past an enabled site whose stop is not that int3's (the last step's
//   SIGTRAP of an injection that had no way back, RIP given back past the int3): collected,
//   it would run from inside the displaced instruction. It keeps its stop, single-stepped.
#include "tracer/core/process.hpp"

namespace probecost {

void release_hold(TracedProcess& proc, Task& task);

}  // namespace probecost
