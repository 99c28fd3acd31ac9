#pragma once
// The handling of one traced process's events, for the event loop (event_loop.hpp): classify
// a stop, run the handler on a breakpoint hit and step over it, keep every other signal for
// delivery to the tracee.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "breakpoint/int3/step_over.hpp"
#include "tracer/core/process.hpp"

namespace probecost {

struct SessionStats {
  std::uint64_t hits = 0;
  std::uint64_t stops = 0;           // ptrace-stops handled (a classic hit is two)
  std::uint64_t signals_passed = 0;  // signals delivered on to the tracee
};

// Puts an int3 probe at `at` (its site named `label`) and readies `step_over` for its hits: the
// one way in for int3 probes. The process's trap area
// (tracer/int3/int3_area.hpp) is mapped with its first int3 and records each one before it is
// written. A second probe at the same address is the same site. Error naming `what` (by default
// the label and address) and the process when the address holds an int3 already, saying whose:
// a killed probecost's (`probecost restore` puts the byte back) or someone else's breakpoint.
BreakpointSite& add_int3_probe(TracedProcess& proc, StepOver& step_over, RuntimeAddr at,
                               const std::string& label, const std::string& what = {});

class Session {
 public:
  Session(TracedProcess& process, StepOver& step_over) : proc_(process), step_over_(&step_over) {}

  TracedProcess& process() { return proc_; }
  // Resumes every stopped thread (the launch or attach stop, and any other left from before):
  // before the loop hands the process's first event.
  void start();
  // Handles one event of the process, its bookkeeping done: a hit is counted and stepped over,
  // a signal kept for delivery, a new task settled. The thread stays stopped (resume_after
  // lets it go on). False when the thread or the process went away under it (its exit is
  // reported next).
  bool handle(const TaskEvent& ev);
  // Whether the event handle() took last was a breakpoint hit.
  bool hit() const { return hit_happened_; }
  // Resumes the event's thread if it is still stopped, with nothing deferred, and the process
  // lives.
  void resume_after(const TaskEvent& ev);
  const SessionStats& stats() const { return stats_; }
  // After an exec: the new image's strategy (the old one's plans and pages are gone).
  void set_step_over(StepOver& step_over) { step_over_ = &step_over; }
  // Called first on every SIGTRAP stop, with nothing read from the thread yet. True: handled
  // (the thread is resumed as it is, nothing delivered, no site looked up): what counting
  // int3 bytes compiled into the program costs at least, one stop, waitpid + PTRACE_CONT per hit.
  void set_trap_hook(std::function<bool(Task&)> hook) { trap_hook_ = std::move(hook); }
  // Called on every hit with the thread stopped and its RIP still one past the int3 (stacks).
  void set_hit_observer(std::function<void(pid_t, StoppedThread&, BreakpointSite&)> f) {
    observer_ = std::move(f);
  }
  // The int3 site at `at` is probecost's own (the dynamic linker's r_brk: link_map.hpp, an
  // empty function): its hits are not counted and not observed; the function's return is done
  // for the thread, then `on_hit` runs with the thread stopped in its caller (every other
  // thread running).
  void set_own_site(RuntimeAddr at, std::function<void(Task&)> on_hit) {
    own_at_ = at;
    own_hit_ = std::move(on_hit);
  }

 private:
  void dispatch(const TaskEvent& ev);
  void return_from_hook(Task& t, StoppedThread& thread);
  void on_trap(Task& task);
  bool on_breakpoint(Task& task, StoppedThread& thread);
  void on_hit(Task& task, StoppedThread& thread, BreakpointSite& site);
  void note_copy(const BreakpointSite& site);

  TracedProcess& proc_;
  StepOver* step_over_;
  SessionStats stats_;
  bool hit_happened_ = false;
  std::function<void(pid_t, StoppedThread&, BreakpointSite&)> observer_;
  std::function<bool(Task&)> trap_hook_;
  RuntimeAddr own_at_;
  std::function<void(Task&)> own_hit_;
};

}  // namespace probecost
