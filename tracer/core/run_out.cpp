// Bringing threads out of our jump areas before the detach unmaps them (OurMappings::release).
//
// A process that calls a probed function all the time has, at any moment, a thread or two
// inside a trampoline's own code (its counting, its call record): stopped there by the
// detach's PTRACE_INTERRUPT, it would go on through the trampoline, so the area could not go,
// and the call buffer (CPUs x ring, 32 MiB here) stayed with it (a busy fault_busy: 9 of 20
// detaches kept them, piling up until `probecost restore`). With the patches out, nothing
// leads into an area again once a thread has left it: so each thread caught in one is let run,
// alone (every other thread stays stopped), and interrupted again, until its RIP is outside,
// or at a copy's first byte or jump back, which leave_copies' rule moves to the original code
// (tracer/core/copy_exits.hpp) without running the copy. A trampoline's path is a few tens of
// instructions: the first run nearly always takes the thread out; a futex wait for room in a
// full ring is bounded by the ring's wait bound, and ends as soon as the drain, still running
// during the detach, frees room. The thread runs what it would run anyway once let go, on its
// own registers, a little earlier: its trampoline, then its own code, until the interrupt.
//
// Not single-stepped, as it was: the single-step flag outlives a dying tracer (Task::stepping),
// and a SIGKILL of probecost in the middle of the steps let the thread go with TF set, to die
// of the next instruction's SIGTRAP (issue 23 §1b; PROBECOST_DIE_AT_HIT=runout+N, the
// OurMappings death test). A run needs no flag: a death at any moment lets the thread run on
// from wherever it is. Nor do its restartable sequences need help: resumed once, a thread
// inside one is sent to its abort handler by the kernel and runs it through, as untraced.
//
// Nothing else can lead into an area: the patches are out, no relocated instruction is a
// call, and `record` never rewrites a return address (its exits are patched in place:
// breakpoint/jump/exit_plan.hpp), so no frame returns into a trampoline. A signal frame can (a
// handler interrupted a thread in a trampoline and has not returned): that thread is not
// run (its handler may run for ever), and its area stays, as before, to be taken out by a
// later attach (reclaim_left_areas) or `probecost restore` once no thread can be in it.
#include <signal.h>
#include <sys/ptrace.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

// Runs of the thread before it is given up on, the n-th lasting kFirstRunNs << 2n up to
// kLongestRunNs (50 us, 200 us, 0.8 ms, 3.2 ms, 12.8 ms, then 25 ms: 0.26 s in all): a wait
// for a CPU on a loaded machine (1 of 40 detaches at load 30 kept its area with 17 ms in all:
// fault_regression MemoryBusy), a wait for room in a ring.
constexpr int kRuns = 15;
constexpr long kFirstRunNs = 50'000;
constexpr long kLongestRunNs = 25'000'000;

bool in_any(const std::vector<OurMapping>& areas, RuntimeAddr at) {
  return std::any_of(areas.begin(), areas.end(), [at](const OurMapping& m) {
    return m.start <= at && at < m.start + static_cast<std::int64_t>(m.size);
  });
}

void pause_for_run(int run) {
  long ns = run < 5 ? kFirstRunNs << (2 * run) : kLongestRunNs;
  timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

}  // namespace

void TracedProcess::run_out_of_our_areas() {
  std::vector<OurMapping> areas;
  for (const OurMapping& m : our_mappings_.list()) {
    if (m.kind == OurMapping::Kind::JumpArea) areas.push_back(m);
  }
  if (areas.empty()) return;
  std::vector<TaskRef> caught;
  for (auto& [tid, t] : tasks_) {
    if (!t.stopped() || !t.runs_with_us()) continue;
    if (auto rip = t.rip(); rip && in_any(areas, *rip)) caught.push_back(t.ref());
  }
  if (!caught.empty()) sys::at_stage("runout");
  for (const TaskRef& ref : caught) {
    std::string why;
    try {
      why = bring_out_of(ref, areas);
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) our_mappings_.note_stuck(ref.tid, why);
  }
}

std::string TracedProcess::bring_out_of(TaskRef ref, const std::vector<OurMapping>& areas) {
  Task* t = task(ref);
  if (!t) return {};
  // A group-stop stays the program's (the detach puts the thread back into it), and an event
  // still to report is the event loop's: neither thread is moved.
  if (t->last_stop().group_stop()) return "it is in a group-stop";
  if (t->deferred && !t->deferred->signal_stop()) return "it has an event to report first";
  if (t->deferred) {
    // A signal that came in the trampoline: the run goes without it, the detach gives it.
    t->pending_signals.push_front(t->deferred->stop_signal());
    t->deferred.reset();
  }
  for (int run = 0;; ++run) {
    if (!(t = task(ref))) return {};
    auto rip = t->rip();
    if (!rip || !in_any(areas, *rip)) return {};
    if (auto to = relocated_.in_original(*rip)) {
      t->set_rip(*to);
      return {};
    }
    if (run == kRuns) return "it did not leave in " + std::to_string(kRuns) + " runs";
    if (!t->resume_keeping_signals()) return {};
    pause_for_run(run);
    if (std::string why = stop_after_run(ref); !why.empty()) return why;
  }
}

// Back in an interrupt stop after a run; why not, when the thread reported something else.
std::string TracedProcess::stop_after_run(TaskRef ref) {
  Task* t = task(ref);
  if (!t || !t->interrupt()) return {};
  for (;;) {
    auto ws = wait_for(*t);
    if (!ws || !(t = task(ref))) return {};
    if (ws->interrupt_stop()) return {};
    if (!ws->signal_stop()) {
      events_.defer(*t, *ws);  // an exit, a clone, a group-stop: the event loop's
      return "it reported an event while it was brought out";
    }
    // A signal: kept for the thread (delivered at the detach), and on to the interrupt.
    t->pending_signals.push_back(ws->stop_signal());
    if (!t->resume_keeping_signals()) return {};
  }
}

}  // namespace probecost
