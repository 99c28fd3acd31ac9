#pragma once
// The instrumentation mechanisms `probecost compare` measures, and what each needs.
#include <cstdint>
#include <string>
#include <vector>

namespace probecost {

enum class HitSource {
  SiteCalls,      // not a probe: the inferior's own count of site calls
  MarkerRecords,  // records the marker wrote
  SignalTraps,    // the inferior's SIGTRAP handler count
  TracerHits,     // the tracer's count of breakpoint hits
};

struct Mechanism {
  std::string name;
  std::string description;
  std::vector<std::string> inferior_args;
  HitSource hits;
  std::string probe_symbol;  // traced mechanisms: where the tracer inserts int3
  std::string step_over;     // traced mechanisms: the strategy; "floor": no breakpoint, the
                             // tracer only resumes a compiled-in int3; "jump": no int3, a jump
                             // to a trampoline
  // Iterations when --iterations is not given: enough for a stable figure, few enough that
  // the whole default run stays well under a minute (int3-ptrace is ~10^4 times the marker).
  std::uint64_t default_iterations;
  // baseline and marker-off cost nothing, or less than the clock can resolve: their figures
  // are ~0 by design and show the resolution of the measurement, not a cost. They are not
  // judged by the "negative or spread larger than the median" rule (see judge_figures()).
  bool zero_by_design = false;

  bool traced() const { return hits == HitSource::TracerHits; }
  bool probing() const { return hits != HitSource::SiteCalls; }
  bool floor() const { return step_over == "floor"; }
  bool jump() const { return step_over == "jump"; }
};

const std::vector<Mechanism>& all_mechanisms();
// UsageError naming the known mechanisms when `name` is not one.
const Mechanism& mechanism_by_name(const std::string& name);
// "a,b,c" -> mechanisms in the order given; "all" -> every one. Baseline is always included
// (every cost is relative to it), first.
std::vector<Mechanism> select_mechanisms(const std::vector<std::string>& names);

}  // namespace probecost
