#include "tracer/core/held_lend.hpp"

#include <sys/ptrace.h>

namespace probecost {

void release_hold(TracedProcess& proc, Task& t) {
  if (!t.stopped() || !t.last_stop().signal_stop()) return;
  WaitStatus ws = t.last_stop();
  if (proc.park_trap(t, ws).ptrace_event() == PTRACE_EVENT_STOP) {  // rewound onto its site
    proc.take_stop(t);
    return;
  }
  if (!t.held()) return;
  auto rip = t.rip();
  if (!rip) return;  // gone: its end comes next
  const BreakpointSite* site = proc.space().sites().find(*rip - 1);
  if (site && site->enabled()) return;
  proc.take_stop(t);
}

}  // namespace probecost
