#include "tracer/core/session.hpp"

#include <signal.h>
#include <sys/ptrace.h>

#include <array>
#include <cstring>

#include "common/error.hpp"
#include "tracer/core/fault_fixup.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/int3/trap_records.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/os/maps.hpp"

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
        case StepEnd::Trap:
          return true;
        case StepEnd::Fault:
          return false;
        case StepEnd::Again:
          break;
      }
    }
  }

  void take_trap(RuntimeAddr site) override {
    if (!task_.held()) return;
    set_pc(site);
    proc_.take_stop(task_);
  }

  bool run_to_trap(RuntimeAddr at) override {
    for (;;) {
      alive(task_.resume_keeping_signals());
      switch (await_trap()) {
        case StepEnd::Trap:
          if (pc() == at + 1) {
            set_pc(at);
            return true;
          }
          task_.pending_signals.push_back(SIGTRAP);  // not ours: the program's
          break;
        case StepEnd::Fault:
          return false;
        case StepEnd::Again:
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

  enum class StepEnd { Trap, Fault, Again };

  // The thread's next stop after a step or a run: its SIGTRAP, a fault of the instruction,
  // or something to keep and go on from. A signal that arrives meanwhile is kept for the next
  // resume (delivering it now would run the program's handler with our int3 byte removed). An
  // interrupt's PTRACE_EVENT_STOP carries nothing. A clone or fork by the instruction itself:
  // its child is settled at once.
  StepEnd await_trap() {
    auto ws = proc_.wait_for(task_);
    alive(ws.has_value());
    ++stats_.stops;
    if (ws->signal_stop()) {
      int sig = ws->stop_signal();
      if (sig == SIGTRAP) return StepEnd::Trap;
      task_.pending_signals.push_back(sig);
      if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) return StepEnd::Fault;
    }
    if (ws->new_task_event()) {
      if (Task* child = proc_.task(proc_.on_new_task(task_))) child->resume();
    }
    return StepEnd::Again;
  }

  TracedProcess& proc_;
  Task& task_;
  SessionStats& stats_;
};

}  // namespace

BreakpointSite& add_int3_probe(TracedProcess& proc, StepOver& step_over, RuntimeAddr at,
                               const std::string& label, const std::string& what) {
  // The trap area first: the record of each int3, and the handler that stands in for us.
  Int3Area* area = proc.ensure_int3_area(at);
  BreakpointSite& site = proc.space().sites().add(at, label);
  if (site.enabled()) return site;  // two probes naming one address
  try {
    site.enable();
  } catch (const SiteOccupied&) {
    throw Error("cannot probe " + (what.empty() ? label + " at " + at.hex() : what) +
                " in process " + std::to_string(proc.pid()) + ": " +
                whose_int3(proc.memory(), read_maps(proc.proc_tid()), at, proc.pid()));
  }
  step_over.prepare(site);
  if (area) {
    if (auto copy = step_over.copy_of(site)) area->tracer_copy(site.address(), *copy);
  }
  return site;
}

void Session::start() {
  for (auto& [tid, t] : proc_.threads()) t.resume_if_settled();
}

bool Session::handle(const TaskEvent& ev) {
  hit_happened_ = false;
  // Gone: the thread was killed while we handled its event, or a memory write failed because
  // the process is exiting under us (exit_group from another thread). Its exit comes next.
  return proc_.unless_gone([&] { dispatch(ev); }) == Outcome::Done;
}

void Session::resume_after(const TaskEvent& ev) {
  if (!proc_.alive()) return;
  if (Task* t = proc_.task(ev.tid)) t->resume_if_settled();
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
    if (Task* child = proc_.task(proc_.on_new_task(*t))) child->resume_if_settled();
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
  BreakpointSite* site = proc_.space().sites().find(pc - 1);
  if (site && site->enabled() && step_over_->trap_is_unambiguous(*site)) {
    on_hit(t, thread, *site);
    return;
  }
  auto cause = t.trap_cause();
  if (!cause) throw TaskGone{t.tid()};
  if (*cause == TrapCause::Breakpoint && on_breakpoint(t, thread)) return;
  t.pending_signals.push_back(SIGTRAP);  // the program's own int3 or a SIGTRAP sent to it
  ++stats_.signals_passed;
}

bool Session::on_breakpoint(Task& t, StoppedThread& thread) {
  RuntimeAddr at = thread.pc() - 1;
  BreakpointSite* site = proc_.space().sites().find(at);
  if (!site || !site->enabled()) {
    // Our int3 removed after this thread hit it but before we saw the hit: rewind and go on.
    if (proc_.memory().read_byte(at) == kInt3) return false;
    thread.set_pc(at);
    return true;
  }
  on_hit(t, thread, *site);
  return true;
}

void Session::note_copy(const BreakpointSite& site) {
  // A copy placed at the first hit: where the trap area's handler must know to find a thread
  // moved there with its SIGTRAP pending (see Family: stops are held until resumed).
  Int3Area* area = proc_.int3_area();
  auto copy = step_over_->copy_of(site);
  if (area && copy) area->tracer_copy(site.address(), *copy);
}

// The dynamic linker's r_brk (_dl_debug_state) is an empty function that exists to be broken
// on: its return is done for the thread at once (RIP from the top of the stack, which the call
// pushed), and the stop collected, before the link map is read and the new library probed,
// which takes milliseconds of injected calls. Left one byte past the int3 meanwhile, a thread
// let go by a SIGKILLed probecost ran the function's bytes from inside an instruction (review:
// SIGSEGV in _dl_debug_update, 7 of 20 kills during a dlopen/dlclose loop); back in its caller,
// it needs nothing from anyone.
void Session::return_from_hook(Task& t, StoppedThread& thread) {
  user_regs_struct r = thread.regs();
  std::array<std::uint8_t, 8> top{};
  proc_.memory().read(RuntimeAddr(r.rsp), top);
  std::uint64_t to = 0;
  std::memcpy(&to, top.data(), sizeof to);
  r.rip = to;
  r.rsp += 8;
  thread.set_regs(r);
  proc_.take_stop(t);
}

void Session::on_hit(Task& t, StoppedThread& thread, BreakpointSite& site) {
  TaskRef ref = t.ref();
  if (own_hit_ && site.address() == own_at_) {
    return_from_hook(t, thread);
    own_hit_(t);
    if (!proc_.task(ref)) throw TaskGone{ref.tid};
    return;  // nothing to step over: the thread is back in its caller
  }
  // The empty handler: count the hit.
  if (observer_) observer_(t.tid(), thread, site);
  ++site.hits;
  ++t.hits;
  ++stats_.hits;
  hit_happened_ = true;
  fault_plan::at_hit();
  bool had_copy = step_over_->copy_of(site).has_value();
  step_over_->ready(site);
  if (!had_copy) note_copy(site);
  std::optional<OthersStopped> others;
  if (proc_.threads().size() > 1 && step_over_->needs_all_stop(site)) {
    // Stopping the others takes as long as each takes to report: the thread waits on the site
    // meanwhile, not one past it (see TracedProcess::park_trap).
    thread.set_pc(site.address());
    others.emplace(proc_, ref.tid);
  }
  // Another thread's exec while we stopped everyone ends this one (and destroys its Task).
  if (!proc_.task(ref)) throw TaskGone{ref.tid};
  step_over_->step(thread, site);
}

}  // namespace probecost
