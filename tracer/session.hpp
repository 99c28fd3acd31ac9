#pragma once
// The event loop of one traced process: wait for a stop, classify it, run the handler on a
// breakpoint hit, step over, resume; pass every other signal on to the tracee.
#include <sys/resource.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "breakpoint/step_over.hpp"
#include "tracer/process.hpp"

namespace probecost {

// Set from a signal handler (SIGINT/SIGTERM/SIGHUP in probecost itself): the loop ends at the
// next event or as soon as waitpid returns EINTR.
std::atomic<bool>& stop_requested();
// Set from a timer's signal handler: run() calls its on_tick (progress, --duration).
std::atomic<bool>& tick_requested();

struct SessionStats {
  std::uint64_t hits = 0;
  std::uint64_t stops = 0;           // ptrace-stops handled (a classic hit is two)
  std::uint64_t signals_passed = 0;  // signals delivered on to the tracee
};

class Session {
 public:
  enum class End { ProcessEnded, Exec, Interrupted, Predicate, Tick };

  Session(TracedProcess& process, StepOver& step_over) : proc_(process), step_over_(step_over) {}

  // Runs until the process ends or execs, stop_requested() is set, `stop_after_hit` returns
  // true after a hit (the hitting thread is then left stopped, already past the site), or,
  // with tick_requested() set (a timer's signal), `on_tick` returns true.
  End run(const std::function<bool()>& stop_after_hit = nullptr,
          const std::function<bool()>& on_tick = nullptr);
  const SessionStats& stats() const { return stats_; }
  // The ptrace floor: every SIGTRAP is a compiled-in int3 to count and resume, nothing more.
  void set_floor_mode(bool on) { floor_mode_ = on; }
  // Called on every hit with the thread stopped and its RIP still one past the int3 (stacks).
  void set_hit_observer(std::function<void(pid_t, StoppedThread&, BreakpointSite&)> f) {
    observer_ = std::move(f);
  }

 private:
  void dispatch(pid_t tid, WaitStatus ws);
  void on_event(pid_t tid, int event);
  void on_trap(pid_t tid);
  bool on_breakpoint(pid_t tid, ThreadState& t, StoppedThread& thread);
  void on_hit(pid_t tid, ThreadState& t, StoppedThread& thread, BreakpointSite& site);
  bool next_event(pid_t& tid, int& status, const std::function<bool()>& on_tick, bool& tick_end);

  TracedProcess& proc_;
  StepOver& step_over_;
  SessionStats stats_;
  bool hit_happened_ = false;
  bool floor_mode_ = false;
  std::function<void(pid_t, StoppedThread&, BreakpointSite&)> observer_;
};

}  // namespace probecost
