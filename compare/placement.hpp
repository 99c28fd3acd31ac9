#pragma once
// Where the tracer and the tracee run during a measurement (--placement): the choice, and the
// CPUs it pins each to.
#include <string>
#include <vector>

#include "common/names.hpp"

namespace probecost {

enum class Placement {
  SameCpu,  // tracer and tracee threads on one CPU: reproducible, no cross-CPU wake-ups
  Split,    // tracer on one CPU, tracee on another: every stop is a cross-CPU wake-up
  Free,     // no pinning: what a user gets by default
  Follow,   // the tracee untouched; the tracer pins itself to the CPU the tracee is on
  Spread,   // tracee thread i on CPU i mod (CPUs), the tracer on CPU 0: threads hitting one
            // probe at once, each on a CPU of its own where there are enough
};
inline constexpr auto kPlacementNames = name_table<Placement>({
    {Placement::SameCpu, "same-cpu"},
    {Placement::Split, "split"},
    {Placement::Free, "free"},
    {Placement::Follow, "follow"},
    {Placement::Spread, "spread"},
});
Placement parse_placement(const std::string& text);
std::string placement_name(Placement p);

inline constexpr int kFollowTracee = -2;  // tracer_cpu: wherever the tracee runs at start

struct CpuPlan {
  int tracer_cpu = -1;  // -1: not pinned; kFollowTracee
  int tracee_cpu = -1;
  std::vector<int> thread_cpus;  // Spread: tracee thread i on thread_cpus[i % size]
  std::string describe() const;
};
CpuPlan plan_cpus(Placement p, int cpus);

}  // namespace probecost
