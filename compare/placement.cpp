#include "compare/placement.hpp"

#include "common/error.hpp"

namespace probecost {

Placement parse_placement(const std::string& text) {
  if (text == "same-cpu") return Placement::SameCpu;
  if (text == "split") return Placement::Split;
  if (text == "free") return Placement::Free;
  if (text == "follow") return Placement::Follow;
  if (text == "spread") return Placement::Spread;
  throw UsageError("bad placement '" + text + "' (same-cpu, split, free, follow or spread)");
}

std::string placement_name(Placement p) {
  switch (p) {
    case Placement::SameCpu:
      return "same-cpu";
    case Placement::Split:
      return "split";
    case Placement::Free:
      return "free";
    case Placement::Follow:
      return "follow";
    case Placement::Spread:
      return "spread";
  }
  return "?";
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
      if (cpus < 2) throw UsageError("placement split needs 2 CPUs; this machine has 1");
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
