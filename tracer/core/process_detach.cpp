// Letting go of a traced process: detach (it runs on untraced, exactly as it was) and kill.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include "common/error.hpp"
#include "tracer/core/copy_exits.hpp"
#include "tracer/core/fault_fixup.hpp"
#include "tracer/core/process.hpp"
#include "tracer/int3/guardian.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/int3/trap_records.hpp"
#include "tracer/os/syscalls.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

bool TracedProcess::is_our_trap_at(RuntimeAddr at) {
  // Ours if a site is there, or was: a site removed since (its byte is no longer int3). A
  // program's own int3 leaves 0xCC in memory: its SIGTRAP is the program's.
  if (space_.sites().find(at)) return true;
  try {
    return space_.memory().read_byte(at) != kInt3;
  } catch (const Error&) {
    return false;
  }
}

bool TracedProcess::consume_queued_sigtrap(Task& t, RuntimeAddr site) {
  // Resumed, the thread dequeues the SIGTRAP before it returns to user space (a trap's signal
  // is "synchronous" and goes first), and reports it as a signal-delivery-stop: swallowed
  // here, with RIP put back on the site. Other signals that come first are kept for it.
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (!t.resume_keeping_signals()) return false;
    auto ws = wait_for(t);
    if (!ws) return false;
    if (ws->signal_stop() && ws->stop_signal() == SIGTRAP) {
      if (t.trap_cause() == TrapCause::Breakpoint) return t.set_rip(site);
      t.pending_signals.push_back(SIGTRAP);  // somebody else's: delivered at detach
      return true;
    }
    if (ws->signal_stop()) t.pending_signals.push_back(ws->stop_signal());
    if (ws->new_task_event()) events_.defer(t, *ws);
    if (t.deferred) return true;  // an event to settle first; its trap stays queued
  }
  return false;
}

void TracedProcess::fix_up_trap(Task& t) {
  if (t.deferred && t.deferred->signal_stop() && t.deferred->stop_signal() == SIGTRAP) {
    // A SIGTRAP reported while we stopped everything: a hit we have not handled yet?
    auto cause = t.trap_cause();
    if (!cause) return;
    auto rip = t.rip();
    if (rip && *cause == TrapCause::Breakpoint && is_our_trap_at(*rip - 1)) {
      t.set_rip(*rip - 1);
      t.deferred.reset();
    }
    return;  // otherwise the program's own SIGTRAP: delivered at detach
  }
  // The kernel reports a PTRACE_INTERRUPT (or a group-stop) before a SIGTRAP that the
  // thread's int3 has already queued: RIP is then one past our site and the trap is still
  // pending. Put back the byte and detach now, and the SIGTRAP kills the process.
  auto rip = t.rip();
  if (!rip || !space_.sites().find(*rip - 1) || !sigtrap_pending(t.tid())) return;
  consume_queued_sigtrap(t, *rip - 1);
}

void TracedProcess::settle_new_tasks() {
  // Fork/clone events seen while stopping everything: their children exist and are traced;
  // each must be stopped (its first stop) before it can be cleaned and let go.
  std::vector<pid_t> parents, new_tasks;
  for (auto& [tid, t] : threads_) {
    if (t.deferred && t.deferred->new_task_event()) parents.push_back(tid);
  }
  for (pid_t tid : parents) {
    Task& parent = threads_.at(tid);
    parent.deferred.reset();
    if (auto child = parent.event_message()) new_tasks.push_back(static_cast<pid_t>(*child));
    on_new_task(parent);  // nothing is resumed: everything is being let go
  }
  for (pid_t tid : new_tasks) {
    Task* t = task(tid);
    if (t && !t->stopped()) wait_for(*t);  // a new task's first stop: it always comes
  }
  // Every fork child still held, including one whose event was handled but whose first stop
  // has not come yet: it holds a copy of our int3 bytes, and comes to that stop for sure.
  std::vector<pid_t> children;
  for (auto& [tid, t] : threads_) {
    if (!t.runs_with_us()) children.push_back(tid);
  }
  for (pid_t c : children) {
    if (Task* t = task(c); t && !t->stopped()) wait_for(*t);
    if (Task* t = task(c); t && t->stopped()) release_fork_child(*t);
  }
}

void TracedProcess::release_fork_child_fully(Task& child) {
  // Its copy of the trap area holds records of our int3 bytes, and its SIGTRAP disposition is
  // our handler (fork copies both): a follower of its own takes it over and lets it go, as a
  // detach lets go of this process (the program's disposition put back, the records marked
  // out, every int3 and jump out). Writing the bytes back alone left our handler as the child's
  // disposition for good. The same for its copy of the semaphore table: lowered, unmapped.
  pid_t tid = child.tid();
  WaitStatus first_stop = child.last_stop();
  events_.take_stop(child);  // no stale report of it left for the family to collect later
  threads_.erase(tid);
  std::unique_ptr<TracedProcess> copy = follower(tid, events_);
  try {
    copy->take_over_fork(*this, first_stop, false);
    copy->detach();
  } catch (const Error&) {
    // Gone meanwhile: nothing to clean. Its destructor lets go of what is left.
  }
}

void TracedProcess::detach_vfork_waiters() {
  // A thread inside vfork() cannot stop, so it cannot be detached, until its child execs or
  // exits; the child (detached above) now can. Wait a bounded time, then leave it to the
  // kernel, which detaches it when probecost exits.
  std::vector<pid_t> waiting;
  for (auto& [tid, t] : threads_) {
    if (!t.stopped() && t.in_vfork && t.interrupt()) waiting.push_back(tid);
  }
  for (pid_t tid : waiting) {
    for (int ticks = 0; ticks < 30; ++ticks) {
      Task* t = task(tid);
      if (!t || t->stopped()) break;
      t->in_vfork = false;
      if (wait_for(*t) || force_requested()) break;
    }
    if (Task* t = task(tid); t && t->stopped()) t->detach();
  }
}

namespace {

bool is_stop_signal(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

}  // namespace

void TracedProcess::free_stopped_for_calls(Task& t) {
  // A thread held in a job-control stop may run the detach's injected calls all the same: a
  // process whose every thread is stopped so (a SIGSTOPped fork child) kept our SIGTRAP handler
  // as its disposition, and its areas, with no thread to run rt_sigaction or munmap. A
  // group-stop comes back by itself: the kernel puts a detached thread of a stopped group back
  // into it (__ptrace_unlink sets JOBCTL_STOP_PENDING). A stop signal not delivered yet is sent
  // again once the thread is detached (tkill: nobody reads a stop signal's siginfo). After each
  // call, resumed to be parked, the thread goes back into the group-stop (letting_go_ keeps it
  // there: park_at_interrupt).
  if (!t.deferred) return;
  if (t.deferred->group_stop()) {
    t.deferred.reset();
  } else if (t.deferred->signal_stop() && is_stop_signal(t.deferred->stop_signal())) {
    t.pending_signals.push_front(t.deferred->stop_signal());
    t.deferred.reset();
  }
}

// Every thread may be held in a signal-delivery-stop when the detach stops them all: the
// SIGCHLDs of children that exited meanwhile (a parent forking without pause, `-F`). A thread
// held so keeps its stop for the signal's delivery and runs no injected call, so none was left
// to put the program's SIGTRAP disposition back, and our handler stayed (fault_regression
// FollowForks, about 1 run of 20 under load). Those signals are delivered now, as the event
// loop would have, with their own siginfo (the same signal from the same stop), and the
// threads stopped again; a few rounds at most, or the detach goes on as before.
void TracedProcess::free_a_thread_for_calls() {
  for (int round = 0; round < 4 && !calls_.any_stopped_thread(); ++round) {
    std::vector<pid_t> held;
    for (auto& [tid, t] : threads_) {
      if (t.stopped() && t.runs_with_us() && t.deferred && t.deferred->signal_stop() &&
          t.deferred->stop_signal() != SIGTRAP && !is_stop_signal(t.deferred->stop_signal()))
        held.push_back(tid);
    }
    if (held.empty()) return;
    for (pid_t tid : held) {
      Task& t = threads_.at(tid);
      t.pending_signals.push_front(t.deferred->stop_signal());
      t.deferred.reset();
      t.resume();
    }
    stop_all(0, true);
    settle_new_tasks();
  }
}

void TracedProcess::detach() {
  if (detached_) return;
  letting_go_ = true;
  stop_all(0, true);
  settle_new_tasks();
  free_a_thread_for_calls();
  for (auto& [tid, t] : threads_) {
    if (t.stopped()) fix_up_trap(t);
    // A hit parked on its site while everything stopped (park_trap: deferred as a plain
    // interrupt stop, to trap again once resumed) has nothing left to report with the sites
    // going out: dropped now rather than at the end, so that the thread may run the detach's
    // injected calls. A single-threaded process caught at a hit otherwise had no thread to
    // run munmap, and kept the call buffer (busy python3 under `record` of an int3-served
    // function: 2 of 8 cycles).
    if (t.stopped() && t.runs_with_us() && t.deferred && t.deferred->interrupt_stop())
      t.deferred.reset();
    if (t.stopped() && t.runs_with_us()) free_stopped_for_calls(t);
  }
  std::exception_ptr failure;
  if (alive()) {
    try {
      leave_moved_code();
      remove_patches();
      space_.sites().disable_all();
    } catch (...) {
      failure = std::current_exception();
    }
    if (!failure) let_go_of_int3_area();
    try {
      semaphores_.lower_all(space_.memory(), guardian_.get());
      let_go_of_semaphore_table();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure && dying()) failure = nullptr;  // nothing left to restore
  if (guardian_ && !failure) guardian_->done();
  for (auto& [tid, t] : threads_) {
    // A fault a copy raised, held in its signal-delivery-stop: the original's (before the
    // copies are left: its RIP still says which copy).
    if (t.stopped() && t.deferred && t.deferred->signal_stop() &&
        t.deferred->stop_signal() != SIGTRAP)
      fix_up_fault(*this, t, t.deferred->stop_signal());
  }
  if (alive()) leave_copies(*this);
  if (alive() && !failure) space_.let_go_of_scratch_pages();
  // The trampolines and the call buffer, where no thread is left in them, once the threads
  // caught inside are brought out; not after a patch failed to come out (a jump may still
  // lead there).
  if (alive() && !failure) {
    run_out_of_our_areas();
    space_.our_mappings().release(*this);
  }
  for (auto& [tid, t] : threads_) {
    if (!t.stopped()) {
      leftovers_.push_back(tid);  // a zombie not reported yet, a thread in vfork()
      continue;
    }
    // A deferred signal stop: the thread is still in that signal-delivery-stop, and the
    // signal goes with PTRACE_DETACH's data. A thread in group-stop stays stopped: the
    // kernel puts a detached thread of a stopped group back into the group-stop.
    if (t.deferred && t.deferred->signal_stop())
      t.pending_signals.push_front(t.deferred->stop_signal());
    t.deferred.reset();
    t.detach();
  }
  detach_vfork_waiters();
  threads_.clear();
  detached_ = true;
  if (failure) std::rethrow_exception(failure);
}

void TracedProcess::kill() {
  if (detached_ || (threads_.empty() && end_)) return;
  if (alive()) {
    try {
      leave_moved_code();
      remove_patches();
      space_.sites().disable_all();  // for the processes that share its memory
    } catch (const std::exception&) {
    }
  }
  if (guardian_) guardian_->done();
  for (const auto& [tid, t] : threads_) {
    if (t.role() != Task::Role::Thread) sys::kill(tid, SIGKILL);
  }
  sys::kill(pid_, SIGKILL);
  // Reap every task: with __WALL each traced thread reports its own exit, the leader last.
  while (!threads_.empty()) {
    if (!events_.next_event_of(*this) && (events_.none_left() || force_requested())) break;
  }
  if (!end_) end_ = WaitStatus(SIGKILL);
  threads_.clear();
}

std::vector<LeftAlone> TracedProcess::forget_moved_code() {
  auto out = space_.forget_moved_code();
  // Its record too: the SIGTRAP handler goes by the records alone, and would send a thread
  // that hits an int3 of ours at the same address in the next library there (probed again)
  // to this one's copy.
  for (const LeftAlone& l : out) {
    if (l.int3 && int3_area_) int3_area_->removed(l.at);
  }
  return out;
}

void TracedProcess::leave_moved_code() {
  for (const auto& l : forget_moved_code()) left_alone_.push_back(l.text());
}

void TracedProcess::remove_patches() {
  // Every thread is stopped, and none can be inside a patched range (a thread only enters one
  // at its first byte, to take the jump). The trampolines stay mapped: a thread stopped in one
  // goes on through it, to the original code it jumps back to.
  std::exception_ptr first;
  for (auto& p : space_.patches()) {
    try {
      p->remove();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

Int3Area* TracedProcess::ensure_int3_area(RuntimeAddr near) {
  if (int3_area_ || int3_area_tried_) return int3_area_.get();
  int3_area_tried_ = true;
  std::unique_ptr<Int3Area> area;
  try {
    area = Int3Area::map(*this, near);
  } catch (const Error&) {
    if (!dying()) throw;  // the process is going away under us: nothing to map
  }
  if (area) adopt_int3_area(std::move(area));
  return int3_area_.get();
}

void TracedProcess::adopt_int3_area(std::unique_ptr<Int3Area> area) {
  int3_area_ = std::move(area);
  int3_area_tried_ = true;
  Int3Area* a = int3_area_.get();
  space_.sites().set_recorder(
      {[a](RuntimeAddr at, std::uint8_t original) { a->record(at, original); },
       [a](RuntimeAddr at) { a->removed(at); }});
}

void TracedProcess::let_go_of_int3_area() {
  // Every int3 is out and every thread stopped: the records say so, and the program's own
  // SIGTRAP disposition comes back. A failure here harms nobody: our handler passes every
  // SIGTRAP on to the program's disposition, and restore finds it.
  // Once nothing leads into the area any more, it goes with the jump areas, where no thread is
  // in it (before, each attach with an int3 left one: +16 KiB resident per `trace --via int3`
  // of python3, merged into one growing mapping).
  if (!int3_area_) return;
  try {
    if (int3_area_->let_go())
      space_.our_mappings().add(
          {OurMapping::Kind::TrapArea, int3_area_->address(), int3_area_->size(), 0});
  } catch (const Error&) {
  }
}

void TracedProcess::start_guardian() {
  guardian_ = Guardian::start(pid_, space_.memory().fd());
  Guardian* g = guardian_.get();
  // The code each int3 went into, for the guardian's check before it writes a byte back.
  auto watch = [this, g](RuntimeAddr at, std::uint8_t original) {
    const Mapping* m = mapping_at(at);
    g->watch(at, original, m ? file_identity(*m, at) : trap::FileIdentity{});
  };
  space_.sites().set_watcher(watch);
  semaphores_.watch_all(*g);
  for (const auto& s : space_.sites()) {
    if (s->enabled()) watch(s->address(), s->saved_byte());
  }
}

std::optional<int> release_leftovers(std::vector<pid_t> tids, pid_t command, bool block) {
  int seen = stop_signals_seen();
  for (;;) {
    // Only the tasks we traced: a waitpid(-1) here would also reap children that are not ours
    // to reap (a library caller's).
    std::erase_if(tids, [](pid_t tid) {
      int status = 0;
      pid_t r = sys::wait_for(tid, &status, __WALL | WNOHANG, false);
      if (r == 0) return false;  // not reportable yet
      if (r < 0) return true;    // not ours any more (detached after all, or reaped)
      WaitStatus ws(status);
      if (ws.gone()) return true;
      long sig = ws.signal_stop() && ws.ptrace_event() == 0 ? ws.stop_signal() : 0;
      sys::ptrace_call(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(sig));
      return true;
    });
    if (!block) return std::nullopt;
    // Woken every tick (100 ms) to look at the leftovers again.
    int status = 0;
    pid_t r = sys::wait_for(command, &status, __WALL, true);
    if (r == command) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (stop_signals_seen() > seen && force_requested()) return std::nullopt;
  }
}

}  // namespace probecost
