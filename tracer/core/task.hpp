#pragma once
// Task: the one owner of a traced thread, modelled on rr's Task. It owns the tid, the thread's
// state, its registers as read during the current stop, and the signals waiting to be delivered
// to it. Every ptrace request on a thread goes through it, and each request says whether the
// thread may be gone: a traced thread can vanish at any ptrace call (ESRCH), for instance when
// another thread calls exit_group() or the process is sent SIGKILL, which needs no tracer's
// consent. That is an expected outcome (the operation returns false or nothing), not an error.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/address.hpp"
#include "tracer/core/held_signals.hpp"
#include "tracer/os/wait_status.hpp"

namespace probecost {

// Names a Task across a wait: an exec can end a thread and give its tid (the leader's) to
// another, so a tid alone does not say that the Task it named is still the same.
struct TaskRef {
  pid_t tid;
  std::uint64_t serial;
};

// "The thread is gone" is said one way per floor, and turned into the next floor's at one place:
// - a Task request answers false or nothing (its tid named nothing any more: ESRCH);
// - code several calls deep that cannot go on without the thread (the hit path, a step-over)
//   throws TaskGone, never an Error, from such an answer;
// - TracedProcess::unless_gone turns TaskGone (or any Error while the process is dying) into
//   Outcome::Gone, the only form callers above the process see. The end itself is reported by
//   the wait later (Family; none_left() once no traced task is left).
struct TaskGone {
  pid_t tid;
};

class Task {
 public:
  enum class State {
    Running,    // resumed by us (or never stopped since we attached)
    Stopped,    // in a ptrace-stop we know of and have not resumed
    Listening,  // in a group-stop (SIGSTOP from a shell), parked with PTRACE_LISTEN
    Exiting,    // reported PTRACE_EVENT_EXIT, or found a zombie: it runs no user code again
  };
  enum class Role {
    Thread,        // a thread of the traced process
    MemorySharer,  // another process sharing its memory (a vfork child until it execs, a
                   // clone(CLONE_VM) child): our int3 bytes are in its text too
    ForkChild,     // a process with a copy of its memory: cleaned and let go at its first stop
    Unknown,       // a new task whose first stop came before its parent's fork/clone event
  };

  Task(pid_t tid, Role role)
      : pending_signals(tid), tid_(tid), role_(role), serial_(next_serial()) {}

  pid_t tid() const { return tid_; }
  // To find this Task again after a wait, if it still exists (TracedProcess::task(TaskRef)).
  TaskRef ref() const { return {tid_, serial_}; }
  Role role() const { return role_; }
  void set_role(Role r) { role_ = r; }
  // Runs in our address space and is resumed after its stops. A fork child (or a task not yet
  // known to be one) never is: it is cleaned and let go at its first stop, and until that stop
  // is reported it cannot run, so it is never interrupted either.
  bool runs_with_us() const { return role_ == Role::Thread || role_ == Role::MemorySharer; }
  State state() const { return state_; }
  bool stopped() const { return state_ == State::Stopped; }
  // How many times any task has been resumed (or parked in PTRACE_LISTEN) so far: what was read
  // of a process while all its tasks were stopped holds while this has not changed.
  static std::uint64_t resumes() { return resumes_; }

  // The thread reported a stop: registers read before it are stale from now on.
  void note_stop(WaitStatus ws);
  // Found a zombie (or gone from /proc) without a report yet: it runs no user code again, and
  // nobody waits for it to stop.
  void note_exiting() { state_ = State::Exiting; }
  const WaitStatus& last_stop() const { return last_stop_; }
  // The stop was only peeked at (waitid WNOWAIT), not collected: the kernel still keeps it as
  // reportable, with its signal. Family (the one owner of waits) sets it and collects the stop
  // before its next wait; any resume ends it.
  void hold() { held_ = true; }
  bool held() const { return held_; }
  void taken() { held_ = false; }

  // RIP alone (PTRACE_PEEKUSER: one register, half the cost of PTRACE_GETREGS), cached for
  // this stop. Nothing when the thread is gone.
  std::optional<RuntimeAddr> rip();
  bool set_rip(RuntimeAddr pc);    // PTRACE_POKEUSER of RIP only
  const user_regs_struct* regs();  // PTRACE_GETREGS once per stop; nullptr when gone
  bool set_regs(const user_regs_struct& regs);

  // Resumes with PTRACE_CONT, delivering the first pending signal with its own siginfo when
  // the thread is in a signal-delivery-stop (the only stop in which the kernel injects the
  // resume's signal; in any other stop it may silently drop it, see ptrace(2) "Signal
  // injection"). Other pending signals go back to the kernel's queue (held_signals.hpp), so
  // none is lost: each comes back as a stop of its own. While handlers_watched, PTRACE_SYSCALL.
  bool resume();
  // resume() when the thread is stopped by us with nothing deferred and runs with us (after
  // an event is handled, or once a stop-the-world is over). False when it is not resumed.
  bool resume_if_settled();
  // PTRACE_CONT without a signal: pending_signals stay kept for a later resume(). For a thread
  // that must first reach a trap of ours (a step-over's, or a queued int3's).
  bool resume_keeping_signals();
  bool resume_listening();  // PTRACE_LISTEN: stays in group-stop, reports the SIGCONT
  // PTRACE_SYSCALL without a signal, from an event stop inside a system call: the thread
  // reports the call's syscall-exit-stop next, before any user instruction runs.
  bool resume_to_syscall_exit();
  bool single_step();  // PTRACE_SINGLESTEP, never with a signal
  // The last resume was PTRACE_SINGLESTEP. The kernel keeps the thread's single-step flag
  // (TIF_SINGLESTEP, and TF in its registers) until a resume of another kind clears it, and a
  // dying tracer's exit_ptrace() does not (only PTRACE_DETACH's ptrace_disable() does): a
  // thread let go so would trap after its next instruction, or at the exit of its next
  // system call (TRAP_BRKPT).
  bool stepping() const { return stepping_; }
  // PTRACE_INTERRUPT: a running thread reports a PTRACE_EVENT_STOP soon (not a thread inside
  // vfork(), which reports nothing until its child execs or exits).
  bool interrupt();
  // Lets go of the thread with its first pending signal (the others are re-sent afterwards).
  bool detach();
  // PTRACE_SETOPTIONS (all of them: it replaces the ones it had), in a ptrace-stop.
  bool set_options(long options);

  // PTRACE_GETEVENTMSG: at a clone/fork/vfork event, the new task's tid. Nothing when the
  // thread is gone.
  std::optional<unsigned long> event_message();
  // Why the thread's SIGTRAP stop happened, from its siginfo (PTRACE_GETSIGINFO). Nothing when
  // the thread is gone.
  std::optional<TrapCause> trap_cause();
  // The thread's blocked-signal mask (PTRACE_GETSIGMASK / PTRACE_SETSIGMASK: no code of the
  // thread runs). Nothing, or false, when the thread is gone.
  std::optional<std::uint64_t> blocked_signals();
  bool set_blocked_signals(std::uint64_t mask);
  // PTRACE_GETSIGINFO / PTRACE_SETSIGINFO: in a signal-delivery-stop, what the handler will be
  // given. Nothing (false) when the thread is gone.
  std::optional<siginfo_t> siginfo();
  bool set_siginfo(const siginfo_t& info);
  // PTRACE_GET_SYSCALL_INFO (Linux 5.3) at a syscall-stop: entry or exit, the number, RIP.
  std::optional<__ptrace_syscall_info> syscall_info();

  // Signals meant for the program, oldest first, each with its siginfo. One slot would lose a
  // second signal that arrives while the thread is single-stepped over a site.
  HeldSignals pending_signals;
  // An event the thread reported while we were waiting for something else (stopping all
  // threads, single-stepping another): the event loop handles it later.
  std::optional<WaitStatus> deferred;
  // Inside vfork(), waiting for its child to exec or exit: it cannot report a stop until then,
  // so nobody waits for it (PTRACE_INTERRUPT stays pending until it returns to user space).
  bool in_vfork = false;
  std::uint64_t hits = 0;
  // Signal handlers the thread entered since it was given a fault of a relocated copy
  // (tracer/core/fault_fixup.hpp): while there are any, resume() uses PTRACE_SYSCALL, so that each
  // rt_sigreturn is seen (`in_sigreturn`: between its entry and exit stops).
  int handlers_watched = 0;
  bool in_sigreturn = false;

 private:
  // ptrace on this thread. False when the thread is gone (ESRCH); any other failure throws.
  bool ptrace_if_alive(__ptrace_request request, void* addr = nullptr, void* data = nullptr);
  // Delivers the head of pending_signals through `request`'s data and re-sends the rest.
  bool resume_with_signals(__ptrace_request request);
  void invalidate_registers();
  // Resumed (or parked in PTRACE_LISTEN): registers are stale, the stop is no longer held.
  void leave_stop(State next);

  inline static std::uint64_t resumes_ = 0;
  static std::uint64_t next_serial() {
    static std::uint64_t n = 0;
    return ++n;
  }

  pid_t tid_;
  Role role_;
  std::uint64_t serial_;  // unique per Task object
  State state_ = State::Running;
  WaitStatus last_stop_{0};
  user_regs_struct regs_{};
  bool have_regs_ = false;
  bool have_rip_ = false;
  bool held_ = false;
  bool stepping_ = false;
};

// Whether the thread has a SIGTRAP of its own queued (not yet dequeued): an int3 it executed
// whose trap is still behind a stop the kernel reported first. Reads /proc/TID/status.
bool sigtrap_pending(pid_t tid);
// The state letter of /proc/TID/stat ('R', 'S', 'D', 'Z', 't', ...); 0 when it is gone.
char task_state_letter(pid_t tid);
// True when the thread is blocked in vfork() or clone(CLONE_VFORK): it waits for its child to
// exec or exit, and reports nothing before.
bool blocked_in_vfork(pid_t tid);

}  // namespace probecost
