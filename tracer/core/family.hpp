#pragma once
// Family: the one owner of tracer events. It holds the traced processes of one trace (the one
// started or attached to, and, when following forks, the processes it forks that we
// follow, each a TracedProcess with its own memory, sites and jumps) and the one event stream
// for them all: the single wait for any task (waitid(P_ALL, __WALL)), the map from a task to its
// process, the events kept for the event loop (deferred) and the first stops of tasks nobody knew
// yet (orphans).
//
// A wait made on behalf of one process (stopping its threads, single-stepping one) also sees
// the others' events: each is booked to the process that has the task and kept for the event
// loop. A new process's first stop can come before its parent's fork event (the kernel does
// not order them): it is held as an orphan until the parent's event says what it is.
//
// A signal-delivery-stop is held, not collected: it is peeked at (waitid with WNOWAIT) and
// left reportable until the thread is resumed or the next wait. Collecting it (waitpid) makes
// the kernel forget its signal (kernel/exit.c wait_task_stopped zeroes the stop's code), so a
// thread whose int3 stop was collected is let go by a dying tracer one byte past the int3,
// inside the displaced instruction, with no SIGTRAP for the trap area's handler (issue 16:
// wrong results, SIGILL at probe_fn+3). Held, its SIGTRAP is delivered, and the handler takes
// it wherever the hit path had put the thread. The resume (PTRACE_CONT) of a stop never
// collected replaces its code as a collected one's would: no system call more per hit. A stop
// still held when the next wait comes is collected first (waitid(P_ALL) would report it again
// and again): by then the hit path has put the thread on its site, or somewhere the handler
// knows (breakpoint/in_tracee/trap_area.hpp TrapRecord::moved).
//
// Tracing one process is a family of one: fork children are cleaned and let go until
// set_following(true).
#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "tracer/core/events.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

// An event of the family, with the process it belongs to.
struct FamilyEvent {
  TracedProcess* process;
  TaskEvent event;
};

class Family final : public EventSource {
 public:
  // TracedProcess::launch and attach, as the root of a new family.
  static std::unique_ptr<Family> launch(const LaunchSpec& spec);
  static std::unique_ptr<Family> attach(pid_t pid, bool with_guardian = false);
  // Another process to trace, attached as attach() does (several PIDs): a member of its
  // own, with no parent, never handed out by take_new_members() (its tracer sets it up).
  TracedProcess& attach_another(pid_t pid, bool with_guardian = false);
  ~Family();
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  TracedProcess& root() { return *members_.front(); }
  // While following, a fork (or vfork + exec) child becomes a member; otherwise, and once the
  // trace is letting go of everything, it is cleaned of our bytes and let go.
  void set_following(bool on) { following_ = on; }
  bool following() const { return following_; }

  const std::vector<std::unique_ptr<TracedProcess>>& members() const { return members_; }
  // The member that made `member` (nullptr for the root).
  TracedProcess* parent_of(const TracedProcess& member) const;
  // Members made since the last call, oldest first: they are stopped, waiting for their
  // tracer-level set-up (a fork child: its step-over; an exec'd one: its new image's probes).
  std::vector<TracedProcess*> take_new_members();
  // Some member still runs (or exec'd, and waits for its new image to be probed).
  bool any_alive() const;

  // The next event of any member, its bookkeeping done: a deferred one first, then the wait.
  // Nothing when the wait was interrupted (a signal), the event was nobody's yet (an orphan),
  // or no traced task is left (none_left()).
  std::optional<FamilyEvent> next_event();
  bool none_left() const override { return none_left_; }

  // EventSource, for the members.
  std::optional<TaskEvent> next_event_of(TracedProcess& asker) override;
  void defer(Task& task, WaitStatus ws) override;
  pid_t on_new_task(TracedProcess& process, Task& parent) override;
  void take_stop(Task& task) override;

 private:
  Family() = default;
  // The one wait for any task of the tracer (a peek, then a collect unless the stop is held),
  // interruptible by the tick and stop requests. Held stops are collected first.
  std::optional<TaskEvent> wait_any();
  // The process a task belongs to (`asker`, or a member): the one that has it, or whose
  // process it is a thread of.
  TracedProcess* owner(pid_t tid, TracedProcess* asker);
  // Books `ev` to its owner (`asker` when the task is its) with TracedProcess::update_from,
  // and settles what is the family's to settle (a process sharing a member's memory that
  // exec'd). Returns the owner, nullptr when the task is nobody's yet (held as an orphan).
  TracedProcess* book(const TaskEvent& ev, TracedProcess* asker);
  void on_exec_of_sharer(TracedProcess& from, Task& task);
  std::optional<FamilyEvent> next_deferred();
  std::optional<WaitStatus> take_orphan(pid_t tid);
  TracedProcess& add_member(std::unique_ptr<TracedProcess> member, TracedProcess& parent);
  // After `ev` (from wait_any) was booked to `o`: a signal-delivery-stop of a task of `o` is
  // held; any other peeked event is collected now.
  void hold_or_collect(TracedProcess* o, const TaskEvent& ev);
  // waitpid(tid, WNOHANG) of a stop reported already (`peeked`) or of a task that is gone
  // since its stop was held. Whatever it reports that is not that stop (an exit meanwhile;
  // anything of a task that is gone) is kept for wait_any.
  void collect(pid_t tid, bool peeked);
  void collect_held();

  Ticker ticker_;                                        // bounds every wait (see ticker.hpp)
  std::vector<std::unique_ptr<TracedProcess>> members_;  // the root first
  std::map<const TracedProcess*, TracedProcess*> parents_;
  // Where each task was last found: checked against the member's own tasks before use.
  std::unordered_map<pid_t, TracedProcess*> owners_;
  std::deque<pid_t> deferred_;  // tasks given a deferred event, oldest first
  std::map<pid_t, WaitStatus> orphans_;
  pid_t peeked_ = 0;  // the task whose event wait_any returned last, not collected yet
  struct Held {
    TracedProcess* process;
    TaskRef task;
  };
  std::vector<Held> held_;                   // held stops, collected before the next wait
  std::deque<TaskEvent> reaped_;             // events found while collecting, for wait_any
  std::set<const TracedProcess*> attached_;  // attach_another()'s
  std::size_t handed_out_ = 1;               // members before this index have been taken
  bool following_ = false;
  bool none_left_ = false;  // wait_any() found no traced task (ECHILD)
};

}  // namespace probecost
