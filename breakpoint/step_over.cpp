#include "breakpoint/step_over.hpp"

#include "breakpoint/error.hpp"

namespace probecost {

void SingleStepOver::step(StoppedThread& thread, BreakpointSite& site) {
  site.disable();
  thread.set_pc(site.address());
  thread.single_step();
  site.enable();
}

std::unique_ptr<StepOver> make_step_over(const std::string& name) {
  if (name == "singlestep") return std::make_unique<SingleStepOver>();
  throw UsageError("unknown step-over strategy '" + name + "' (known: singlestep)");
}

}  // namespace probecost
