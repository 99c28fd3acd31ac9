// Bringing threads out of our jump areas before the detach unmaps them (OurMappings::release).
//
// A process that calls a probed function all the time has, at any moment, a thread or two
// inside a trampoline's own code (its counting, its call record): stopped there by the
// detach's PTRACE_INTERRUPT, it would go on through the trampoline, so the area could not go,
// and the call buffer (CPUs x ring, 32 MiB here) stayed with it (a busy fault_busy: 9 of 20
// detaches kept them, piling up until `probecost restore`). With the patches out, nothing
// leads into an area again once a thread has left it: so the threads caught in one are let run
// (together; every other thread stays stopped), and interrupted again, until each RIP is out,
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
#include "tracer/os/fault_plan.hpp"

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
  for (const OurMapping& m : space_.our_mappings().list()) {
    if (m.kind == OurMapping::Kind::JumpArea) areas.push_back(m);
  }
  if (areas.empty()) return;
  std::vector<TaskRef> running;
  for (auto& [tid, t] : threads_) {
    if (!t.stopped() || !t.runs_with_us()) continue;
    if (auto rip = t.rip(); rip && in_any(areas, *rip)) running.push_back(t.ref());
  }
  if (running.empty()) return;
  fault_plan::at_stage("runout");
  // Keeps the threads whose step says to go on; a stuck one's reason goes on the areas.
  auto step_all = [&](auto step) {
    std::vector<TaskRef> going;
    for (const TaskRef& ref : running) {
      RunOutStep r;
      try {
        r = step(ref);
      } catch (const Error& e) {
        r = RunOutStep::stuck(e.what());
      }
      if (r.is == RunOutStep::Is::Going) going.push_back(ref);
      if (r.is == RunOutStep::Is::Stuck) space_.our_mappings().note_stuck(ref.tid, r.why);
    }
    running = std::move(going);
  };
  step_all([&](TaskRef ref) { return may_run_out(ref); });
  // The caught threads run together, each run interrupting them all: with the patches out they
  // cannot lead one another back in, and the detach waits for the slowest alone, not for the
  // sum. One at a time, 33 threads hammering a probe (fault_busy) often had several of them
  // caught, and a loaded machine gave each its CPU only late in its 0.26 s: a detach of 2.3 s
  // in Release at load 15, and, in the sanitizer build on CI, past the fault suite's 5 s bound.
  for (int run = 0;; ++run) {
    step_all([&](TaskRef ref) { return still_inside(ref, areas); });
    if (running.empty()) return;
    if (run == kRuns) {
      step_all([](TaskRef) {
        return RunOutStep::stuck("it did not leave in " + std::to_string(kRuns) + " runs");
      });
      return;
    }
    step_all([&](TaskRef ref) { return resume_for_run(ref); });
    if (running.empty()) return;
    pause_for_run(run);
    step_all([&](TaskRef ref) { return stop_after_run(ref); });
  }
}

// Whether the thread may be run out.
TracedProcess::RunOutStep TracedProcess::may_run_out(TaskRef ref) {
  Task* t = task(ref);
  if (!t) return RunOutStep::done();
  // A group-stop stays the program's (the detach puts the thread back into it), and an event
  // still to report is the event loop's: neither thread is moved.
  if (t->last_stop().group_stop()) return RunOutStep::stuck("it is in a group-stop");
  if (t->deferred && !t->deferred->signal_stop()) {
    return RunOutStep::stuck("it has an event to report first");
  }
  if (t->deferred) {
    // A signal that came in the trampoline: the run goes without it, the detach gives it.
    t->pending_signals.push_front(t->deferred->stop_signal());
    t->deferred.reset();
  }
  return RunOutStep::going();
}

// Going while the stopped thread is still in an area; done once it is out, or moved out
// because it stands at a copy's first byte or jump back.
TracedProcess::RunOutStep TracedProcess::still_inside(TaskRef ref,
                                                      const std::vector<OurMapping>& areas) {
  Task* t = task(ref);
  if (!t) return RunOutStep::done();
  auto rip = t->rip();
  if (!rip || !in_any(areas, *rip)) return RunOutStep::done();
  if (auto to = space_.relocated().in_original(*rip)) {
    t->set_rip(*to);
    return RunOutStep::done();
  }
  return RunOutStep::going();
}

TracedProcess::RunOutStep TracedProcess::resume_for_run(TaskRef ref) {
  Task* t = task(ref);
  return t && t->resume_keeping_signals() ? RunOutStep::going() : RunOutStep::done();
}

// Back in an interrupt stop after a run (going); stuck when the thread reported something else.
TracedProcess::RunOutStep TracedProcess::stop_after_run(TaskRef ref) {
  Task* t = task(ref);
  if (!t || !t->interrupt()) return RunOutStep::done();
  for (;;) {
    auto ws = wait_for(*t);
    if (!ws || !(t = task(ref))) return RunOutStep::done();
    if (ws->interrupt_stop()) return RunOutStep::going();
    if (!ws->signal_stop()) {
      events_.defer(*t, *ws);  // an exit, a clone, a group-stop: the event loop's
      return RunOutStep::stuck("it reported an event while it was brought out");
    }
    // A signal: kept for the thread (delivered at the detach), and on to the interrupt.
    t->pending_signals.push_back(ws->stop_signal());
    if (!t->resume_keeping_signals()) return RunOutStep::done();
  }
}

}  // namespace probecost
