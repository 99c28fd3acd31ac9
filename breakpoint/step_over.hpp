#pragma once
// How a thread stopped on one of our int3 bytes gets past the instruction that byte displaced.
//
// When an int3 traps, the kernel reports SIGTRAP with RIP already one past the 0xCC. A strategy
// leaves the thread stopped, with its registers set so that a plain resume continues correctly
// after the displaced instruction.
#include <sys/user.h>

#include <memory>
#include <string>

#include "breakpoint/site.hpp"

namespace probecost {

// What a strategy may do with the stopped thread. The tracer implements it.
class StoppedThread {
 public:
  virtual ~StoppedThread() = default;
  virtual const user_regs_struct& regs() = 0;  // read once per stop, then cached
  virtual void set_pc(RuntimeAddr pc) = 0;     // writes RIP only
  // PTRACE_SINGLESTEP and wait until this thread reports the step's trap. A signal that arrives
  // meanwhile is kept for delivery at the next resume.
  virtual void single_step() = 0;
};

class StepOver {
 public:
  virtual ~StepOver() = default;
  virtual std::string name() const = 0;
  // True when the site's int3 is absent while stepping, so other threads could run through the
  // site unseen: the tracer must stop them around step().
  virtual bool needs_all_stop() const = 0;
  virtual void step(StoppedThread& thread, BreakpointSite& site) = 0;
};

// The classic debugger way: put the original byte back, rewind RIP onto it, single-step one
// instruction, write int3 again. Two stops per hit.
class SingleStepOver final : public StepOver {
 public:
  std::string name() const override { return "singlestep"; }
  bool needs_all_stop() const override { return true; }
  void step(StoppedThread& thread, BreakpointSite& site) override;
};

std::unique_ptr<StepOver> make_step_over(const std::string& name);

}  // namespace probecost
