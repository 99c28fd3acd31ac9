#include "tracer/core/process.hpp"

#include <linux/kcmp.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "breakpoint/int3/outline.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "tracer/core/clone_args.hpp"
#include "tracer/int3/guardian.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

namespace {

// Whether two tasks share one address space (kcmp(2) KCMP_VM). Nothing when the kernel cannot
// say (no kcmp, or a task gone).
std::optional<bool> share_memory(pid_t a, pid_t b) {
  long r = ::syscall(SYS_kcmp, a, b, KCMP_VM, 0, 0);
  if (r < 0) return std::nullopt;
  return r == 0;
}

}  // namespace

TracedProcess::~TracedProcess() {
  try {
    if (launched_) {
      kill();
    } else {
      detach();
    }
  } catch (const std::exception&) {
    // A destructor cannot report; detach()/kill() are called explicitly on the normal paths.
  }
}

double TracedProcess::cpu_seconds() const {
  if (end_cpu_seconds_) return *end_cpu_seconds_;
  return std::max(0.0, process_cpu_seconds(pid_));
}

bool TracedProcess::dying() {
  if (end_) return true;
  // The address space is gone once every thread has let go of it (exit_group() in progress):
  // reads through /proc/PID/mem fail then (mmget_not_zero), where they worked before. Ask at
  // an address we wrote to.
  if (auto known = space_.an_address_of_ours()) {
    try {
      space_.memory().read_byte(*known);
    } catch (const Error&) {
      return true;
    }
    return false;
  }
  // Nothing written yet: whether any thread still answers.
  for (auto& [tid, t] : threads_) {
    if (t.role() != Task::Role::Thread) continue;
    char state = task_state_letter(tid);
    if (state != 'Z' && state != 'X' && state != 0) return false;
  }
  return true;
}

// ---- waiting -------------------------------------------------------------------------------

void TracedProcess::task_gone(pid_t tid, WaitStatus ws) {
  threads_.vfork_ended(tid);
  threads_.erase(tid);
  if (tid != pid_) return;
  // The leader is reported last, once every other thread of the process has been reaped.
  end_ = ws;
  if (launched_) end_cpu_seconds_ = children_cpu_seconds() - children_cpu_at_launch_;
  space_.forget_all();
  if (int3_area_) int3_area_->forget();
  threads_.erase_if([](const Task& t) { return t.role() == Task::Role::Thread; });
  // Nothing is left to restore: the guardian (one process per traced process, with
  // --follow-forks a shell's every child) goes now, not at the end of the trace.
  if (guardian_) {
    guardian_->done();
    guardian_.reset();
  }
}

WaitStatus TracedProcess::park_trap(Task& t, WaitStatus ws) {
  if (!ws.signal_stop() || ws.stop_signal() != SIGTRAP) return ws;
  auto rip = t.rip();
  BreakpointSite* site = rip ? space_.sites().find(*rip - 1) : nullptr;
  if (!site || !site->enabled() || t.trap_cause() != TrapCause::Breakpoint) return ws;
  if (!t.set_rip(site->address())) return ws;  // gone: its end comes next
  return WaitStatus(0x7f | ((SIGTRAP | (PTRACE_EVENT_STOP << 8)) << 8));
}

Task* TracedProcess::update_from(const TaskEvent& ev) {
  pid_t tid = ev.tid;
  WaitStatus ws = ev.status;
  if (ws.gone()) {
    task_gone(tid, ws);
    return nullptr;
  }
  Task* t = task(tid);
  if (!t) {
    // A task we have not heard of: a thread or a child whose first stop came before its
    // parent's clone/fork event (the kernel does not order the two).
    t = &threads_.add(tid, tgid_of(tid) == pid_ ? Task::Role::Thread : Task::Role::Unknown);
  }
  t->note_stop(ws);
  t->in_vfork = false;  // any stop means it is out of vfork()
  unhide_rseq_cpu(*t);
  if (ws.ptrace_event() == PTRACE_EVENT_EXEC && t->role() == Task::Role::Thread) on_exec(*t);
  if (ws.ptrace_event() == PTRACE_EVENT_EXIT && thread_exit_) thread_exit_(tid);
  // Back from vfork(): its child, which shared its thread pointer, has exec'd or exited.
  const user_regs_struct* r = nullptr;
  if (ws.ptrace_event() == PTRACE_EVENT_VFORK_DONE && new_thread_ && (r = t->regs()))
    new_thread_(tid, r->fs_base);
  return t;
}

bool TracedProcess::will_report(Task& t) {
  char state = task_state_letter(t.tid());
  // A traced zombie is reported to us, and only then can its parent reap it: a thread at once,
  // a thread-group leader once the rest of its group is gone (a short-lived fork child). A
  // leader whose other threads live is not reported meanwhile: do not wait for it.
  if (state == 'Z' && (tgid_of(t.tid()) != t.tid() || task_ids(t.tid()).size() <= 1)) return true;
  if (state == 0 || state == 'Z' || state == 'X') {
    t.note_exiting();
    return false;
  }
  if (blocked_in_vfork(t.tid())) {
    t.in_vfork = true;
    return false;
  }
  return true;
}

std::optional<WaitStatus> TracedProcess::wait_for(Task& target, double deadline) {
  pid_t tid = target.tid();
  for (;;) {
    auto ev = events_.next_event_of(*this);
    if (!ev) {
      // A signal (a tick, a stop request): give up only on a task that cannot report. One
      // that will report does so soon (it is being stepped, or was just resumed).
      Task* t = task(tid);
      if (!t || events_.none_left() || !will_report(*t)) return std::nullopt;
      if (deadline > 0 && now_s() >= deadline && t->interrupt()) deadline = 0;
      continue;
    }
    Task* t = task(ev->tid);
    if (ev->tid == tid) return t ? std::optional<WaitStatus>(ev->status) : std::nullopt;
    if (!task(tid)) return std::nullopt;  // gone with an exec
    if (t) events_.defer(*t, ev->status);
  }
}

std::vector<pid_t> TracedProcess::stop_all(pid_t except, bool include_listening) {
  std::vector<pid_t> awaited, stopped;
  for (auto& [tid, t] : threads_) {
    if (tid == except || t.stopped() || t.in_vfork || t.state() == Task::State::Exiting ||
        !t.runs_with_us())
      continue;
    if (t.state() == Task::State::Listening && !include_listening) continue;
    // ESRCH: it is dying; its exit is reported like any event.
    if (t.interrupt()) awaited.push_back(tid);
  }
  auto settled = [&](pid_t tid) {
    Task* t = task(tid);
    return !t || t->stopped() || t->in_vfork || t->state() == Task::State::Exiting;
  };
  int forced_ticks = 0;
  for (;;) {
    std::erase_if(awaited, settled);
    if (awaited.empty()) return stopped;
    // Threads other than a leader always report (their exit, at worst). A leader that is a
    // zombie waits for them: look before blocking; the tick covers the race after the look.
    // A thread of ours is its group's leader when it has the process's ID (exec gives it).
    auto leader = [&](pid_t tid) {
      const Task* t = task(tid);
      return t && t->role() == Task::Role::Thread ? tid == pid_ : tgid_of(tid) == tid;
    };
    bool only_leaders = std::all_of(awaited.begin(), awaited.end(), leader);
    if (only_leaders) {
      std::erase_if(awaited, [&](pid_t tid) { return !will_report(*task(tid)); });
      if (awaited.empty()) return stopped;
    }
    auto ev = events_.next_event_of(*this);
    if (!ev) {
      // A second stop request gives up on threads that still have not stopped a second later:
      // something we cannot see holds them, and the user wants out. Letting go of a thread
      // that is still ours only happens when probecost exits (the kernel detaches it then).
      if (events_.none_left() || (force_requested() && ++forced_ticks > 10)) return stopped;
      std::erase_if(awaited, [&](pid_t tid) { return !task(tid) || !will_report(*task(tid)); });
      continue;
    }
    Task* t = task(ev->tid);
    if (!t) continue;
    bool awaited_interrupt = ev->status.interrupt_stop() &&
                             std::find(awaited.begin(), awaited.end(), ev->tid) != awaited.end();
    // Anything but the interrupt's own stop (a breakpoint hit, a signal, a clone, a
    // group-stop, a new task's first stop) is kept for the event loop. The interrupt then
    // stays pending and shows up later as a plain PTRACE_EVENT_STOP, which is simply resumed.
    if (awaited_interrupt) {
      stopped.push_back(ev->tid);
    } else {
      events_.defer(*t, ev->status);
    }
  }
}

void TracedProcess::resume_stopped(const std::vector<pid_t>& tids) {
  for (pid_t tid : tids) {
    if (Task* t = task(tid)) t->resume_if_settled();
  }
}

OthersStopped::~OthersStopped() {
  try {
    proc_.resume_stopped(stopped_);
  } catch (const Error&) {
    // A resume fails only for a thread that is gone; its exit is reported later.
  }
}

// ---- new tasks, exec -----------------------------------------------------------------------

std::optional<NewTask> TracedProcess::new_task_of(Task& parent) {
  int event = parent.last_stop().ptrace_event();
  auto msg = parent.event_message();
  if (!msg || *msg == 0) return std::nullopt;
  pid_t child = static_cast<pid_t>(*msg);
  pid_t child_tgid = tgid_of(child);
  // A thread can run, exit and be reaped before we look at its parent's clone event: then
  // there is nothing to track, and a Task for it would be waited for forever.
  if (child_tgid == 0 && !task(child)) return std::nullopt;
  Task::Role role = Task::Role::ForkChild;
  if (child_tgid == pid_) {
    role = Task::Role::Thread;
  } else if (share_memory(parent.tid(), child).value_or(event == PTRACE_EVENT_VFORK)) {
    role = Task::Role::MemorySharer;
  }
  return NewTask{child, role, event == PTRACE_EVENT_VFORK};
}

pid_t TracedProcess::add_new_task(const NewTask& child, Task& parent,
                                  std::optional<WaitStatus> first_stop) {
  // A child whose first stop came before this event was held if it looked like another
  // process's (Unknown). One of our own threads was not: it was resumed and may be stopped
  // again for something else, such as a breakpoint hit waiting in `deferred`, which must not
  // be dropped (the thread would go on one byte past the site, its first instruction skipped).
  // A first stop that came before any of us knew the task is held by the event owner.
  Task* known = task(child.tid);
  bool reported = first_stop || (known && known->stopped() && known->role() == Task::Role::Unknown);
  Task& c = threads_.add(child.tid, child.role);
  c.set_role(child.role);
  if (new_thread_ && c.runs_with_us()) {
    if (auto tp = child_thread_pointer(space_.memory(), parent.regs())) new_thread_(child.tid, *tp);
  }
  // A child on its parent's thread pointer (no CLONE_SETTLS) is not told: the pointer's bounds
  // stay the parent's, and the child's stack is not in them (its hits are not copied).
  if (new_stack_ && c.runs_with_us()) {
    const user_regs_struct* pr = parent.regs();
    auto tp = child_thread_pointer(space_.memory(), pr);
    if (tp && pr && *tp != pr->fs_base)
      new_stack_(child.tid, *tp, child_stack(space_.memory(), pr));
  }
  if (first_stop) c.note_stop(*first_stop);
  if (child.vfork) {
    threads_.entered_vfork(parent, child.tid);
    hide_rseq_cpu(parent);
  }
  if (!reported) return 0;
  c.deferred.reset();  // its first stop, held until now: settled here
  return on_first_stop(c) ? child.tid : 0;
}

bool TracedProcess::on_first_stop(Task& t) {
  switch (t.role()) {
    case Task::Role::Unknown:
      return false;  // held until its parent's event says what it is
    case Task::Role::ForkChild:
      release_fork_child(t);
      return false;
    default:
      return true;
  }
}

void TracedProcess::release_fork_child(Task& child) {
  if (int3_area_ || semaphores_.table()) {  // its copies of them, let go of as a detach does
    release_fork_child_fully(child);
    return;
  }
  // It has its own copy of our int3 bytes: put the originals back and let it go. It is never
  // resumed before this, so it is at its first stop; should it be on a hit all the same, it is
  // rewound onto the site, whose original instruction then runs.
  try {
    if (child.last_stop().signal_stop() && child.last_stop().stop_signal() == SIGTRAP) {
      if (auto rip = child.rip(); rip && space_.sites().find(*rip - 1)) child.set_rip(*rip - 1);
    }
    ProcMemory child_memory(child.tid());
    // First, while its copy of our bytes tells which raises it holds.
    semaphores_.lower_copy(child_memory,
                           [&](RuntimeAddr at) { return space_.copy_holds(child_memory, at); });
    for (const auto& site : space_.sites()) {
      if (site->enabled()) child_memory.write_byte(site->address(), site->saved_byte());
    }
    // Its jumps lead into a shared mapping of ours: they would count its calls as the
    // process's. Its copy of the text gets the original bytes.
    for (const auto& p : space_.patches()) {
      if (p->installed()) child_memory.write(p->address(), p->patch().original_bytes());
    }
  } catch (const Error&) {
    // Gone already: nothing to clean.
  }
  child.detach();
  threads_.erase(child.tid());
}

void TracedProcess::take_exec_of_sharer(pid_t tid, WaitStatus ws) {
  threads_.add(tid, Task::Role::Thread).note_stop(ws);
  exec_ended_ = true;  // the tracer runs it to its entry point and probes its image
}

void TracedProcess::hand_over_sharer(pid_t tid) {
  threads_.vfork_ended(tid);
  threads_.erase(tid);
}

void TracedProcess::release_sharer(Task& t) {
  pid_t tid = t.tid();
  threads_.vfork_ended(tid);
  t.detach();
  threads_.erase(tid);
}

void TracedProcess::on_exec(Task& t) {
  // execve() killed every other thread, and the exec'ing thread took the leader's tid (the
  // event comes from the leader's tid; GETEVENTMSG would give the former one). None of the
  // others reports anything more that we need.
  pid_t leader = t.tid();
  threads_.erase_if(
      [&](const Task& o) { return o.tid() != leader && o.role() == Task::Role::Thread; });
  if (int3_area_) int3_area_->forget();
  exec_ended_ = true;
  // The old address space, and our int3 bytes with it, are gone; /proc/PID/mem is opened
  // afresh (last: it throws when the process is gone too).
  space_.replaced_by_exec();
  calls_.forget_vdso();
}

// ---- scratch pages -------------------------------------------------------------------------

void TracedProcess::park_at_interrupt(TaskRef ref) {
  try {
    Task* t = task(ref);
    if (!t || !t->stopped()) return;
    if (!t->interrupt() || !t->resume_keeping_signals()) return;
    for (;;) {
      auto ws = wait_for(*t);
      if (!ws || !(t = task(ref))) return;
      if (ws->interrupt_stop()) return;
      // A thread of a stopped group lent to a detach's call goes back into the group-stop:
      // a stop as good as the interrupt's, where the detach leaves it (free_stopped_for_calls).
      if (ws->group_stop() && letting_go_) return;
      if (!ws->signal_stop()) {  // a group-stop, an exit: the event loop's
        events_.defer(*t, *ws);
        return;
      }
      // A signal that reached the thread first: kept for it, and on to the trap.
      t->pending_signals.push_back(ws->stop_signal());
      if (!t->resume_keeping_signals()) return;
    }
  } catch (const Error&) {
    // The thread or its process is going away.
  }
}

}  // namespace probecost
