#pragma once
// `probecost compare`: every mechanism, repeated, against the baseline; then the model.
#include <functional>
#include <string>
#include <vector>

#include "compare/machine.hpp"
#include "compare/model.hpp"
#include "compare/runner.hpp"
#include "compare/stats.hpp"

namespace probecost {

struct CompareConfig {
  std::vector<MechanismId> mechanisms = all_mechanism_ids();
  std::uint64_t iterations = 0;  // 0: each mechanism's default, times iteration_scale
  double iteration_scale = 1;    // a quicker run (probecost overhead's calibration): < 1
  unsigned repeat = 5;
  unsigned threads = 1;
  std::string work = "empty";
  Placement placement = Placement::SameCpu;
  std::vector<double> rates = {750'000};
  std::string inferior;
  std::optional<StepOverChoice> step_over;  // for int3-ptrace-fast; none: auto
  unsigned handlers = 0;                    // see RunConfig
  unsigned spare_probes = 0;                // see RunConfig
  // judge_figures() on every row. The experiments turn it off: their runs are sized for the
  // question they answer (a disabled marker's ~0, a marker inside a memcpy's spread, --quick)
  // and their notes say where the spread drowns a difference; what they refuse is an inexact
  // hit count.
  bool judge_noise = true;
};

struct MechanismResult {
  Mechanism mechanism;
  std::vector<Sample> samples;
  std::uint64_t iterations = 0;
  std::uint64_t hits = 0;  // per run; every run must agree
  std::uint64_t expected_hits = 0;
  Summary ns_per_iter;
  Summary per_hit_ns;  // ns per iteration minus the baseline's median
  Summary per_hit_cycles;
  Summary cpu_ns_per_hit;            // (tracee + tracer CPU) per iteration minus the baseline's
  double tracee_cpu_ns_per_hit = 0;  // medians, not baseline-corrected
  double tracer_cpu_ns_per_hit = 0;
  double syscalls_per_hit = 0;
  double stops_per_hit = 0;
  std::string step_over_plan;
  // cpu_ns_per_hit / the marker's, the verdict's figure; 0 when there is no marker row
  double x_marker = 0;
  std::vector<Extrapolation> extrapolation;
  std::string problem;
  // The problem is judge_figures' (the runs completed, every hit counted, but the figure is
  // noise): a warning, where any other problem is a failed measurement.
  bool noisy = false;
  std::string skipped;      // the machine refused this mechanism (no uprobe PMU, no permission)
  Summary wall_ns_per_hit;  // longest thread's loop / all threads' hits, minus the baseline's
  std::uint64_t tracee_minflt = 0;  // the program's minor page faults in its loop, most of a run
};

struct CompareResult {
  Machine machine;
  CompareConfig config;
  CpuPlan cpus;
  std::vector<MechanismResult> mechanisms;
  bool trustworthy() const;
  // Some row has a problem that is not noise: a wrong hit count, a run that failed.
  bool failed() const;
};

// UsageError unless `work` is "empty" or "memcpy:BYTES" with BYTES a whole number > 0: checked
// by probecost before anything runs, not left to the inferior.
void check_work(const std::string& work);

// Fewer iterations per run than this measure cold-start effects rather than a cost per hit.
inline constexpr std::uint64_t kMinTrustedIterations = 1000;

// Sets r.problem (unless already set) when a figure cannot be trusted: fewer than
// kMinTrustedIterations per run, a negative cost, or a spread (max - min over the runs) larger
// than the median, and then r.noisy. Rows that are ~0 by design (Mechanism::zero_by_design) are
// not judged: for them the last two would hold by construction.
void judge_figures(MechanismResult& r);

// Sets every row's x_marker: its CPU ns/hit (median) over the marker row's, the ratio the
// verdict names; 0 for every row when there is no marker row or its cost is not above 0.
void relate_to_marker(CompareResult& result);

// The mechanisms in run order, with the baseline first; the runs of a skipped mechanism stop at
// its first, which says why. `progress(done, total, what)` is called before each run.
CompareResult run_compare(const CompareConfig& cfg,
                          const std::function<void(int, int, const std::string&)>& progress);
// The same with mechanisms made by the caller (cfg.mechanisms unused); the first is the
// baseline every cost is relative to.
CompareResult run_mechanisms(const std::vector<Mechanism>& mechs, const CompareConfig& cfg,
                             const std::function<void(int, int, const std::string&)>& progress);

}  // namespace probecost
