#include "tracer/session.hpp"

#include <signal.h>
#include <sys/ptrace.h>

#include <ctime>

#include "common/error.hpp"
#include "tracer/fault_fixup.hpp"

namespace probecost {

namespace {

// The StoppedThread a step-over strategy works on: a Task, whose vanishing (ESRCH) ends the
// hit with TaskGone.
class Stopped final : public StoppedThread {
 public:
  Stopped(TracedProcess& proc, Task& task, SessionStats& stats)
      : proc_(proc), task_(task), stats_(stats) {}

  RuntimeAddr pc() override { return *alive(task_.rip()); }
  const user_regs_struct& regs() override { return *alive(task_.regs()); }
  void set_pc(RuntimeAddr pc) override { alive(task_.set_rip(pc)); }
  void set_regs(const user_regs_struct& regs) override { alive(task_.set_regs(regs)); }

  bool single_step() override {
    for (;;) {
      alive(task_.single_step());
      switch (await_trap()) {
        case Outcome::Trap:
          return true;
        case Outcome::Fault:
          return false;
        case Outcome::Again:
          break;
      }
    }
  }

  bool run_to_trap(RuntimeAddr at) override {
    for (;;) {
      task_.set_state(Task::State::Running);
      alive(task_.ptrace_if_alive(PTRACE_CONT));
      switch (await_trap()) {
        case Outcome::Trap:
          if (pc() == at + 1) {
            set_pc(at);
            return true;
          }
          task_.pending_signals.push_back(SIGTRAP);  // not ours: the program's
          break;
        case Outcome::Fault:
          return false;
        case Outcome::Again:
          break;
      }
    }
  }

 private:
  template <typename T>
  T alive(T value) {
    if (!value) throw TaskGone{task_.tid()};
    return value;
  }

  enum class Outcome { Trap, Fault, Again };

  // The thread's next stop after a step or a run: its SIGTRAP, a fault of the instruction,
  // or something to keep and go on from. A signal that arrives meanwhile is kept for the next
  // resume (delivering it now would run the program's handler with our int3 byte removed). An
  // interrupt's PTRACE_EVENT_STOP carries nothing. A clone or fork by the instruction itself:
  // its child is settled at once.
  Outcome await_trap() {
    auto ws = proc_.wait_for(task_);
    alive(ws.has_value());
    ++stats_.stops;
    if (ws->signal_stop()) {
      int sig = ws->stop_signal();
      if (sig == SIGTRAP) return Outcome::Trap;
      task_.pending_signals.push_back(sig);
      if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) return Outcome::Fault;
    }
    if (ws->new_task_event()) {
      if (Task* child = proc_.task(proc_.on_new_task(task_))) child->resume();
    }
    return Outcome::Again;
  }

  TracedProcess& proc_;
  Task& task_;
  SessionStats& stats_;
};

// Stops the other threads for the lifetime of the guard, and resumes them whatever happens.
class OthersStopped {
 public:
  OthersStopped(TracedProcess& proc, pid_t tid, bool stop) : proc_(proc) {
    if (stop) stopped_ = proc_.stop_all(tid);
  }
  ~OthersStopped() {
    try {
      proc_.resume_stopped(stopped_);
    } catch (const Error&) {
      // A resume fails only for a thread that is gone; its exit is reported later.
    }
  }

 private:
  TracedProcess& proc_;
  std::vector<pid_t> stopped_;
};

}  // namespace

void Session::start() {
  // The launch/attach stop (and any others left from before) are resumed first.
  for (auto& [tid, t] : proc_.tasks()) resume_if_stopped(tid);
}

bool Session::settle(const TaskEvent& ev) {
  hit_happened_ = false;
  try {
    dispatch(ev);
  } catch (const TaskGone&) {
    return false;  // killed while we handled it; its exit is reported next
  } catch (const Error&) {
    // A memory write that failed because the process is exiting under us (exit_group
    // from another thread): its exit is reported next. Anything else is a real failure.
    if (!proc_.dying()) throw;
    return false;
  }
  return true;
}

void Session::handle(const TaskEvent& ev) {
  if (settle(ev) && proc_.alive()) resume_if_stopped(ev.tid);
}

Session::End Session::run(const std::function<bool()>& stop_after_hit,
                          const std::function<bool()>& on_tick) {
  start();
  while (proc_.alive()) {
    if (stop_requested()) return End::Interrupted;
    if (deadline_reached(deadline_, deadline_armed_)) return End::Deadline;
    if (tick_requested().exchange(false) && on_tick && on_tick()) return End::Tick;
    auto ev = proc_.next_event();
    if (!ev) {
      if (errno == ECHILD || proc_.tasks().empty()) break;
      continue;  // a signal: the flags are looked at above
    }
    if (!settle(*ev)) continue;
    if (!proc_.alive()) break;
    if (hit_happened_ && stop_after_hit && stop_after_hit()) return End::Predicate;
    resume_if_stopped(ev->tid);
  }
  return proc_.exec_ended() ? End::Exec : End::ProcessEnded;
}

bool deadline_reached(double deadline, bool& armed) {
  if (deadline <= 0) return false;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: ~20 ns, no system call
  double left = deadline - (ts.tv_sec + ts.tv_nsec / 1e9);
  if (left <= 0) return true;
  if (left < Ticker::kPeriod && !armed) {
    Ticker::next_tick_within(left);  // once: a system call
    armed = true;
  }
  return false;
}

void Session::resume_if_stopped(pid_t tid) {
  Task* t = proc_.task(tid);
  if (t && t->stopped() && !t->deferred && t->runs_with_us()) t->resume();
}

void Session::dispatch(const TaskEvent& ev) {
  Task* t = proc_.task(ev.tid);
  if (!t || ev.status.gone()) return;  // its bookkeeping is done already
  ++stats_.stops;
  WaitStatus ws = ev.status;
  if (t->role() == Task::Role::Unknown || t->role() == Task::Role::ForkChild) {
    proc_.on_first_stop(*t);
    return;
  }
  if (ws.group_stop()) {
    // The process is being stopped (SIGSTOP/SIGTSTP from a shell): stay stopped, as without
    // a tracer, and be told of the SIGCONT. PTRACE_LISTEN, not PTRACE_CONT, does that.
    t->resume_listening();
    return;
  }
  if (ws.new_task_event()) {
    if (pid_t child = proc_.on_new_task(*t)) resume_if_stopped(child);
    return;
  }
  // PTRACE_EVENT_EXEC is settled by the process's bookkeeping; PTRACE_EVENT_STOP (an
  // interrupt, a new thread's first stop) is simply resumed. Syscall-stops come from a thread
  // in a handler of a fault of a relocated copy (fault_fixup.hpp).
  if (ws.syscall_stop()) return after_handler(proc_, *t);
  if (ws.ptrace_event() != 0) return;
  int sig = ws.stop_signal();
  if (sig == SIGTRAP) return on_trap(*t);
  fix_up_fault(proc_, *t, sig);       // raised by a relocated copy: the original's, to the program
  t->pending_signals.push_back(sig);  // meant for the tracee: deliver it
  ++stats_.signals_passed;
}

void Session::on_trap(Task& t) {
  if (trap_hook_ && trap_hook_(t)) return;
  Stopped thread(proc_, t, stats_);
  // Fast classification: RIP one past a site whose int3 never leaves and whose displaced
  // instruction is longer than a byte can only be that int3 (see trap_is_unambiguous), so
  // PTRACE_GETSIGINFO is skipped.
  RuntimeAddr pc = step_over_->pc_suffices() ? thread.pc() : RuntimeAddr(thread.regs().rip);
  BreakpointSite* site = proc_.sites().find(pc - 1);
  if (site && site->enabled() && step_over_->trap_is_unambiguous(*site)) {
    on_hit(t, thread, *site);
    return;
  }
  siginfo_t info;
  if (!t.ptrace_if_alive(PTRACE_GETSIGINFO, nullptr, &info)) throw TaskGone{t.tid()};
  if (classify_trap(info) == TrapCause::Breakpoint && on_breakpoint(t, thread)) return;
  t.pending_signals.push_back(SIGTRAP);  // the program's own int3 or a SIGTRAP sent to it
  ++stats_.signals_passed;
}

bool Session::on_breakpoint(Task& t, StoppedThread& thread) {
  RuntimeAddr at = thread.pc() - 1;
  BreakpointSite* site = proc_.sites().find(at);
  if (!site || !site->enabled()) {
    // Our int3 removed after this thread hit it but before we saw the hit: rewind and go on.
    if (proc_.memory().read_byte(at) == kInt3) return false;
    thread.set_pc(at);
    return true;
  }
  on_hit(t, thread, *site);
  return true;
}

void Session::on_hit(Task& t, StoppedThread& thread, BreakpointSite& site) {
  // The empty handler: count the hit.
  if (observer_) observer_(t.tid(), thread, site);
  ++site.hits;
  ++t.hits;
  ++stats_.hits;
  hit_happened_ = true;
  step_over_->ready(site);
  bool all_stop = proc_.tasks().size() > 1 && step_over_->needs_all_stop(site);
  pid_t tid = t.tid();
  std::uint64_t serial = t.serial();
  OthersStopped others(proc_, tid, all_stop);
  // Another thread's exec while we stopped everyone ends this one (and destroys its Task).
  if (!proc_.still(tid, serial)) throw TaskGone{tid};
  step_over_->step(thread, site);
}

}  // namespace probecost
