// A fork child's copy of our probes: what its memory holds of them, taken over as its own.
//
// A fork's copy of the memory may come before some of our writes. The fork event is decided
// when fork() starts (a thread seized by then reports it), but reported only once the copy
// is made: a thread inside fork() while we stop every thread reports its event after the
// copy, and the probes then go in while it is held at that event. Its child's copy holds none
// of them: no int3, no trap area, no raised semaphore, and our handler is not its
// disposition. Taking over "the parent's probes" as if the copy held them wrote the records
// of a trap area the child did not have (EIO: the trace ended with no report, 1 to 2 of 8
// follow-forks cycles under load), and would have lowered semaphores it never got.
//
// Every batch of our writes is made with every thread stopped, so that no fork is under way
// inside one: a copy holds a batch whole or not at all, and the bytes of its sites tell which.
// The child has run none of its own code yet (it is at its first stop): its bytes are those
// of the copy.
#include <unistd.h>

#include <algorithm>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/int3/trap_records.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

namespace {

// Whether the child's memory holds `parent`'s trap area: a valid header of ours at its address.
bool holds_area(TraceeMemory& child, pid_t child_pid, const Int3Area& parent) {
  std::vector<std::string> notes;
  for (const auto& a : read_trap_areas(child, read_maps(child_pid), notes)) {
    if (a.address == parent.address() && a.tracer_pid == ::getpid()) return true;
  }
  return false;
}

}  // namespace

void TracedProcess::take_over_fork(TracedProcess& parent, std::optional<WaitStatus> first_stop,
                                   bool with_guardian) {
  Task& t = threads_.add(pid_, Task::Role::Thread);
  if (first_stop) {
    t.note_stop(*first_stop);
  } else if (!wait_for(t)) {
    return;  // killed before its first stop: there is nothing to set up
  }
  if (!alive()) return;
  auto holds = [&](RuntimeAddr at) { return parent.space_.copy_holds(space_.memory(), at); };
  // Its copy holds the raises made with the sites it holds (read before a jump comes out).
  semaphores_.adopt(parent.semaphores_, holds, space_.memory());
  std::vector<const BreakpointSite*> missing;
  for (const auto& site : parent.space_.sites()) {
    if (!site->enabled()) continue;
    if (holds(site->address())) {
      space_.sites().add(site->address(), site->label()).adopt(site->saved_byte());
    } else {
      missing.push_back(site.get());
    }
  }
  // Its copy of the trap area records those int3 bytes, and its SIGTRAP disposition is ours;
  // a copy made before the area was mapped has neither.
  Outcome area = unless_gone([&] {
    if (parent.int3_area_ && holds_area(space_.memory(), pid_, *parent.int3_area_))
      adopt_int3_area(Int3Area::inherit(*this, *parent.int3_area_));
  });
  if (area == Outcome::Gone) return;
  Outcome probes = unless_gone([&] {
    for (const auto& p : parent.space_.patches()) {
      if (!p->installed()) continue;
      space_.memory().write(p->address(), p->patch().original_bytes());
      space_.sites().add(p->address(), p->label()).enable();
    }
    // A site its copy came before: an int3 of its own now, as the jumps get.
    for (const BreakpointSite* s : missing) space_.sites().add(s->address(), s->label()).enable();
  });
  if (probes == Outcome::Gone) return;  // killed meanwhile: nothing more to set up
  // Its scratch pages (step-over copies) were copied with the rest of its memory, those mapped
  // before its fork.
  space_.inherit_copies(parent.space_);
  if (parent.has_guardian() && with_guardian) start_guardian();
}

}  // namespace probecost
