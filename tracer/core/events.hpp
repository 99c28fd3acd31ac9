#pragma once
// What a TracedProcess needs from the one owner of tracer events (Family), without knowing it.
//
// ptrace reports every traced task of ours through one wait for any task (Family peeks with
// waitid(P_ALL, __WALL | WNOWAIT), then collects that task with waitpid): waiting for one
// particular thread can block forever (a thread-group leader that has exited is not reported
// while other threads live, and they are not reaped while we wait for it; a thread inside
// vfork() reports nothing until its child execs). So a process never waits by itself: it asks
// the event owner for its next event, and the owner hands every other task's event to the
// process that has the task, which keeps it for the event loop.
#include <sys/types.h>

#include <optional>

#include "tracer/core/task.hpp"
#include "tracer/os/wait_status.hpp"

namespace probecost {

class TracedProcess;

struct TaskEvent {
  pid_t tid;
  WaitStatus status;
};

class EventSource {
 public:
  // The next event of one of `asker`'s tasks, its bookkeeping done (TracedProcess::update_from).
  // Other processes' events that arrive meanwhile are booked to them and kept for the event
  // loop. Nothing when the wait was interrupted by a signal (a tick, a stop request) or no
  // traced task is left (none_left()).
  virtual std::optional<TaskEvent> next_event_of(TracedProcess& asker) = 0;
  // The last wait found no traced task left to wait for (ECHILD).
  virtual bool none_left() const = 0;
  // Keeps `ws` on `task` for the event loop, behind the events kept before it.
  virtual void defer(Task& task, WaitStatus ws) = 0;
  // A fork/vfork/clone event of `parent`, a task of `process`: the new task becomes one of
  // `process`'s (a thread, a process sharing its memory, a fork child to clean and let go) or,
  // while following forks, a new process of the family. Returns the new task's tid when the
  // caller is to resume it, else 0.
  virtual pid_t on_new_task(TracedProcess& process, Task& parent) = 0;
  // Collects `task`'s stop now if it is only held (Task::held): once collected, the kernel
  // keeps no signal for it, so the caller first puts the thread where a resume without that
  // signal is right (see Family).
  virtual void take_stop(Task& task) = 0;

 protected:
  ~EventSource() = default;
};

}  // namespace probecost
