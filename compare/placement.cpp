#include "compare/placement.hpp"

#include "common/error.hpp"

namespace probecost {

Placement parse_placement(const std::string& text) {
  if (auto p = kPlacementNames.find(text)) return *p;
  throw UsageError("bad placement '" + text + "' (" + kPlacementNames.known() + ")");
}

std::string placement_name(Placement p) {
  return kPlacementNames.name(p);
}

std::string CpuPlan::describe() const {
  auto cpu = [](int c) {
    if (c == kFollowTracee) return std::string("the tracee's CPU at start");
    return c < 0 ? std::string("any CPU") : "CPU " + std::to_string(c);
  };
  if (!thread_cpus.empty()) {
    return "tracer on " + cpu(tracer_cpu) + ", tracee thread i on CPU i mod " +
           std::to_string(thread_cpus.size());
  }
  return "tracer on " + cpu(tracer_cpu) + ", tracee on " + cpu(tracee_cpu);
}

CpuPlan plan_cpus(Placement p, int cpus) {
  switch (p) {
    case Placement::SameCpu:
      return {0, 0, {}};
    case Placement::Split:
      if (cpus < 2) throw Error("placement split needs 2 CPUs; this machine has 1");
      return {0, 1, {}};
    case Placement::Free:
      return {-1, -1, {}};
    case Placement::Follow:
      return {kFollowTracee, -1, {}};
    case Placement::Spread: {
      CpuPlan plan{0, -1, {}};
      for (int c = 0; c < cpus; ++c) plan.thread_cpus.push_back(c);
      return plan;
    }
  }
  return {};
}

}  // namespace probecost
