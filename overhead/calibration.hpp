#pragma once
// What one hit of each mechanism costs on this machine: the figures `probecost overhead`
// multiplies by a workload's event rate. They come from a `probecost compare -f json` report
// (--calibration FILE) or from a quick built-in run of compare, cached per machine, probecost
// version, placement and step-over strategy in $XDG_CACHE_HOME/probecost (~/.cache/probecost).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compare/runner.hpp"

namespace probecost {

// probecost's version (the project's, from CMake): a calibration is cached per version.
const char* probecost_version();

struct CalibrationRow {
  std::string mechanism;
  std::optional<MechanismId> id;     // none: one this probecost does not know, or the mix
  bool mixed = false;                // overhead's mix of the probes' mechanisms (analyze.cpp)
  double cpu_ns_per_hit = 0;         // median: tracee + tracer CPU per hit, minus the baseline's
  double wall_ns_per_hit = 0;        // median: loop time per hit, minus the baseline's
  double tracer_cpu_ns_per_hit = 0;  // the tracer's side of cpu_ns_per_hit (0: no tracer)
  std::string step_over;             // how its site was stepped over (int3 mechanisms), else ""
  std::optional<StepMethod> method;  // step_over's first word, when it names one
  std::string problem;               // compare's warning on the row, else ""
};

struct Calibration {
  std::string source;                     // the file, or "built-in, ..." with where it is cached
  double age_s = 0;                       // since it was measured
  std::string machine;                    // "CPU model, kernel, N CPUs"
  std::string placement;                  // compare's name: same-cpu, split, free or follow
  std::optional<Placement> placement_id;  // that name's, when this probecost knows it
  std::string version;                    // probecost's, when the report says (built-in ones do)
  double load_1min = -1;                  // the load average when it was measured; -1 when unknown
  double others_cpu_share = -1;           // the share of the CPUs other processes used meanwhile
  // Every mechanism of the report but the baseline (the zero every cost is measured from), in
  // the report's order: a mechanism compare gains later appears here with no change.
  std::vector<CalibrationRow> rows;

  const CalibrationRow* find(MechanismId id) const;
};

// Parses the text of a `compare -f json` report. UsageError naming `source` when it is not
// one (not JSON, no mechanisms, no baseline).
Calibration parse_calibration(const std::string& json_text, const std::string& source,
                              double age_s);
// --calibration FILE: UsageError when it is missing, unreadable or not such a report. Its age
// is its "created_unix_s" when it has one, else the file's modification time.
Calibration load_calibration_file(const std::string& path);

struct CalibrationRequest {
  Placement placement = Placement::Free;
  StepOverChoice step_over = StepOverChoice::Auto;  // int3-ptrace-fast's strategy
  std::string inferior;                             // probecost-inferior
  bool recalibrate = false;                         // measure even when a cached one fits
  std::function<void(int, int, const std::string&)> progress;
};

// The built-in calibration: the cached one when it was made by this probecost version on
// this machine at this placement and strategy and has every mechanism compare knows, else a
// new one (compare, every mechanism, 3 runs of a fraction of its iterations: 3 to 10 s),
// which is cached when the cache directory can be written. A row compare warned about is
// cached with its warning, which every report shows (--recalibrate measures again).
Calibration builtin_calibration(const CalibrationRequest& request);

// $XDG_CACHE_HOME/probecost, else $HOME/.cache/probecost; empty when neither is set.
std::string calibration_cache_dir();

// The share of compare's default iterations the built-in calibration runs, by placement: a
// cross-CPU placement makes every ptrace hit 4 to 5 times dearer.
double calibration_iteration_scale(Placement placement);

}  // namespace probecost
