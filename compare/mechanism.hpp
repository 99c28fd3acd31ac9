#pragma once
// The instrumentation mechanisms `probecost compare` measures, and what each needs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/int3/step_over_choice.hpp"

namespace probecost {

// Which mechanism, parsed once from its name (-m, or a report read back); the name stays
// what is printed.
enum class MechanismId {
  Baseline,
  MarkerOff,
  Marker,
  Int3Signal,
  Int3Ptrace,
  Int3PtraceFast,
  Jump,
  Record,  // probecost record's probes: a call's entry and return
  Uprobe,
  UprobeNop5,
  UprobePush,
  PtraceFloor,
  Custom,  // made by a caller, not one of compare's: bench's instruction kinds, marker variants
};

enum class HitSource {
  SiteCalls,      // not a probe: the inferior's own count of site calls
  MarkerRecords,  // records the marker wrote
  SignalTraps,    // the inferior's SIGTRAP handler count
  TracerHits,     // the tracer's count of breakpoint hits
  KernelUprobe,   // the kernel's count, in a perf event on the uprobe PMU
};

struct Mechanism {
  MechanismId id = MechanismId::Custom;
  std::string name;  // as printed, and as -m names it
  std::string description;
  std::vector<std::string> inferior_args;
  HitSource hits;
  std::string probe_symbol;  // traced and uprobe mechanisms: where the probe goes
  // Traced mechanisms with an int3 site: the strategy (none for ptrace-floor, which has no
  // site, the tracer only resumes a compiled-in int3, nor for jump, whose site jumps to a
  // trampoline).
  std::optional<StepOverChoice> step_over;
  // Iterations when --iterations is not given: enough for a stable figure, few enough that
  // the whole default run stays well under a minute (int3-ptrace is ~10^4 times the marker).
  std::uint64_t default_iterations;
  // baseline and marker-off cost nothing, or less than the clock can resolve: their figures
  // are ~0 by design and show the resolution of the measurement, not a cost. They are not
  // judged by the "negative or spread larger than the median" rule (see judge_figures()).
  bool zero_by_design = false;

  bool traced() const { return hits == HitSource::TracerHits; }
  bool uprobe() const { return hits == HitSource::KernelUprobe; }
  bool probing() const { return hits != HitSource::SiteCalls; }
  bool floor() const { return id == MechanismId::PtraceFloor; }
  bool jump() const { return id == MechanismId::Jump; }
  bool is(MechanismId other) const { return id == other; }
};

// compare's mechanisms, in run order.
const std::vector<Mechanism>& all_mechanisms();
const Mechanism& mechanism(MechanismId id);
// Every one of compare's mechanisms.
std::vector<MechanismId> all_mechanism_ids();
// The mechanism of that name; none for a name this probecost does not know (a report of
// another version read back).
std::optional<MechanismId> find_mechanism(const std::string& name);
// -m's names ("all": every one), in the order given: UsageError naming the known mechanisms
// for a name that is not one.
std::vector<MechanismId> parse_mechanisms(const std::vector<std::string>& names);
// The mechanisms in the order given, each once, the baseline always first (every cost is
// relative to it).
std::vector<Mechanism> select_mechanisms(const std::vector<MechanismId>& ids);

}  // namespace probecost
