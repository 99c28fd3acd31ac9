#pragma once
// The event loop of one traced process: wait for a stop, classify it, run the handler on a
// breakpoint hit, step over, resume; pass every other signal on to the tracee.
#include <sys/types.h>

#include <cstdint>
#include <functional>

#include "breakpoint/step_over.hpp"
#include "tracer/process.hpp"
#include "tracer/ticker.hpp"

namespace probecost {

struct SessionStats {
  std::uint64_t hits = 0;
  std::uint64_t stops = 0;           // ptrace-stops handled (a classic hit is two)
  std::uint64_t signals_passed = 0;  // signals delivered on to the tracee
};

// True once CLOCK_MONOTONIC reaches `deadline` (seconds; 0: none). Close to it, the next tick
// is brought forward once (`armed`), so that a waiting loop wakes up in time.
bool deadline_reached(double deadline, bool& armed);

class Session {
 public:
  enum class End { ProcessEnded, Exec, Interrupted, Predicate, Tick, Deadline };

  Session(TracedProcess& process, StepOver& step_over) : proc_(process), step_over_(&step_over) {}

  // Runs until the process ends or execs, stop_requested() is set, `stop_after_hit` returns
  // true after a hit (the hitting thread is then left stopped, already past the site), or
  // `on_tick` returns true at a tick (every 100 ms). Flags are looked at on every turn, so a
  // process that hits a probe without pause cannot keep the loop from seeing them.
  End run(const std::function<bool()>& stop_after_hit = nullptr,
          const std::function<bool()>& on_tick = nullptr);
  // The pieces of run() for a loop that waits for several processes at once (Family): resume
  // every stopped thread, then hand each of the process's events to handle(), which resumes
  // the thread afterwards.
  void start();
  void handle(const TaskEvent& ev);
  const SessionStats& stats() const { return stats_; }
  // After an exec: the new image's strategy (the old one's plans and pages are gone).
  void set_step_over(StepOver& step_over) { step_over_ = &step_over; }
  // run() ends with End::Deadline once CLOCK_MONOTONIC reaches `seconds` (looked at on every
  // turn, and a tick is brought forward to it when the loop is waiting).
  void set_deadline(double monotonic_seconds) { deadline_ = monotonic_seconds; }
  // Called first on every SIGTRAP stop, with nothing read from the thread yet. True: handled
  // (the thread is resumed as it is, nothing delivered, no site looked up). compare's ptrace
  // floor counts compiled-in int3 this way: one stop, waitpid + PTRACE_CONT per hit.
  void set_trap_hook(std::function<bool(Task&)> hook) { trap_hook_ = std::move(hook); }
  // Called on every hit with the thread stopped and its RIP still one past the int3 (stacks).
  void set_hit_observer(std::function<void(pid_t, StoppedThread&, BreakpointSite&)> f) {
    observer_ = std::move(f);
  }

 private:
  // dispatch() with the ways a thread or the process can go away under it caught: false when
  // the event ended that way (its exit is reported next).
  bool settle(const TaskEvent& ev);
  void dispatch(const TaskEvent& ev);
  void on_trap(Task& task);
  bool on_breakpoint(Task& task, StoppedThread& thread);
  void on_hit(Task& task, StoppedThread& thread, BreakpointSite& site);
  void resume_if_stopped(pid_t tid);

  TracedProcess& proc_;
  StepOver* step_over_;
  SessionStats stats_;
  bool hit_happened_ = false;
  double deadline_ = 0;
  bool deadline_armed_ = false;
  std::function<void(pid_t, StoppedThread&, BreakpointSite&)> observer_;
  std::function<bool(Task&)> trap_hook_;
};

}  // namespace probecost
