#pragma once
// `probecost overhead -b PROBE ... -- COMMAND`: what probes cost a real workload. The command
// runs untraced and traced by turns; the traced runs count the probes' hits, which over the
// untraced run's time give the workload's event rate; a calibration's cost per hit of every
// mechanism times that rate is the prediction (the 2006 mail's sum, for the user's program),
// and the measured slowdown says how far the prediction for the mechanism used was off.
//
// A running process (-p PID) has no end to time, so its work is measured by its own rate of
// events: windows with jump probes at the same sites (a few ns a hit: the untraced rate, near
// enough) alternate with windows of the mechanism under test, and the slowdown is the ratio of
// the two rates. Where no jump fits any site, only the process's CPU can be compared.
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/names.hpp"
#include "compare/mechanism.hpp"
#include "compare/runner.hpp"
#include "compare/stats.hpp"
#include "overhead/calibration.hpp"
#include "trace/via.hpp"

namespace probecost {

struct OverheadConfig {
  std::vector<std::string> command;  // launch this, or
  pid_t pid = 0;                     // watch this process for
  double duration_s = 0;             // seconds untraced, then as many traced
  std::vector<std::string> probes;
  bool all_matches = false;
  bool follow_forks = false;  // traced runs follow the command's children (trace -F)
  Via via = Via::Auto;
  StepOverChoice step_over = StepOverChoice::Auto;
  unsigned repeat = 3;  // untraced + traced pairs
  unsigned warmup = 1;  // untraced runs before them, not counted (launched only)
  Placement placement = Placement::Free;
  std::string stdin_path = "/dev/null";
  bool show_output = false;  // the command's stdout and stderr go to probecost's stderr
};

// What the traced runs are compared with: the command run untraced, or (attached) windows with
// jump probes at the sites where one fits, whose events count the process's work.
enum class Reference { Untraced, Jump };

// One run of a launched command, or one window of an attached process.
struct RunRecord {
  double wall_s = 0;  // traced: without held_s
  // The command's CPU: its process tree's (reaped children included) when launched, the
  // process's own threads' when attached.
  double cpu_s = 0;
  std::string end;  // how a launched command ended ("exited with status 0")
  bool ok = true;   // it exited with status 0
  // Traced runs only.
  double held_s = 0;              // stopped while the probes went in: not in wall_s
  double tracer_cpu_s = 0;        // probecost's CPU while the probes were in
  double tracer_setup_cpu_s = 0;  // and putting them in (symbols, bytes): not counted
  std::uint64_t hits = 0;
  std::vector<std::uint64_t> probe_hits;  // in the order of the probes
  // Attached with a jump reference: the hits at the reference's sites (all of a reference
  // window's; a tested window's at those sites only).
  std::uint64_t reference_hits = 0;
  bool cut_short = false;  // attached: the window ended early, at a stop signal
  // Attached: when the window began and ended (CLOCK_MONOTONIC s; a traced window's from when
  // its probes were in), to set beside the process's own log of its work.
  double start_s = 0, end_s = 0;
  // Where the time went: the command's context switches (launched: its tree's), probecost's
  // moves between CPUs, and how often, looked at every 100 ms, probecost ran on another CPU
  // than the one the command last ran on (then each hit's two wake-ups cross CPUs).
  double voluntary_switches = 0;
  double involuntary_switches = 0;
  double tracer_migrations = 0;
  int cpu_samples = 0;
  int cpu_samples_apart = 0;
};

struct ProbeUse {
  std::string spec;
  Via via;          // Int3 or Jump
  std::string how;  // the step-over, or how many bytes the jump replaced
  std::string why_not_jump;
  std::optional<StepMethod> method;  // an int3 probe's step-over
};

// A probe where no jump fits, and why: left out of an attached measurement's reference.
struct NoJump {
  std::string spec, why;
};

struct Measurement {
  std::vector<std::string> command;
  pid_t pid = 0;  // attached; 0 launched
  bool attached = false;
  double duration_s = 0;
  Via via = Via::Auto;
  StepOverChoice step_over = StepOverChoice::Auto;
  Placement placement = Placement::Free;
  std::string cpus;  // where probecost and the command ran
  unsigned warmup = 0;
  std::string stdin_path;    // launched: the command's stdin
  bool show_output = false;  // launched: its stdout and stderr went to probecost's stderr
  std::vector<ProbeUse> probes;
  // Run i of each is a pair, run back to back. Attached with Reference::Jump, `untraced` holds
  // the reference windows (jump probes at reference_probes).
  std::vector<RunRecord> untraced, traced;
  Reference reference = Reference::Untraced;
  std::vector<std::string> reference_probes;  // Reference::Jump: the specs it probes
  std::vector<NoJump> no_jump;                // attached: the probes it leaves out, and why
  double check_held_s = 0;  // attached: held stopped while probecost looked where jumps fit
  unsigned planned = 0;     // pairs asked for (--repeat)
  bool partial = false;     // a stop signal ended the measurement early
  std::array<double, 3> load_before = {-1, -1, -1}, load_after = {-1, -1, -1};
  int cpus_online = 0;
  // The share of the machine's CPU time (all CPUs) that other processes used while it ran:
  // /proc/stat's busy time minus probecost's, its children's and the watched process's.
  // -1 when unknown.
  double others_cpu_share = -1;
};

// What the prediction error is measured against: the slowdown, or (attached, with no jump
// reference to time the work by) the extra CPU; None when there is no error to give.
enum class ErrorBasis { None, Slowdown, ExtraCpu };
inline constexpr auto kErrorBasisNames = name_table<ErrorBasis>({
    {ErrorBasis::None, ""},
    {ErrorBasis::Slowdown, "slowdown"},
    {ErrorBasis::ExtraCpu, "extra CPU"},
});

struct Prediction {
  std::string mechanism;
  std::optional<MechanismId> id;  // the calibration row's
  bool mixed = false;             // the row overhead makes up when the probes' mechanisms differ
  double cpu_ns_per_hit = 0;      // the calibration's
  double wall_ns_per_hit = 0;     // the calibration's
  double cpu_percent = 0;         // extra CPU over the untraced CPU: rate per CPU-s x CPU cost
  double cpu_share_percent = 0;   // of one CPU: rate per wall-s x CPU cost (the 2006 figure)
  double slowdown = 1;            // 1 + rate per wall-s x wall cost
};

struct OverheadResult {
  Measurement m;
  Calibration calibration;
  std::string mechanism;                     // the one used, as named in `predicted`
  std::vector<MechanismId> mechanisms_used;  // by the probes, each once
  // The one used, typed: the probes' one mechanism, or (mixed) the mix of theirs. None
  // and not mixed only for a probe whose via names no mechanism.
  std::optional<MechanismId> mechanism_id;
  bool mixed = false;
  std::uint64_t hits = 0;  // per run: the traced runs' median
  std::vector<std::uint64_t> probe_hits;
  double event_rate_per_s = 0;      // hits per untraced (reference) wall second
  double event_rate_per_cpu_s = 0;  // hits per untraced (reference) CPU second
  std::vector<std::size_t> pairs;   // the pairs the figures are from (failed ones left out)
  Summary untraced_wall, untraced_cpu, traced_wall, traced_cpu, tracer_cpu, held;
  // Launched: traced / untraced wall time; attached: the reference's rate of events over the
  // tested window's. None attached without a jump reference: nothing to time the work by.
  std::optional<Summary> slowdown;
  std::optional<Summary> reference_rate, traced_rate;  // attached, jump reference: hits/s
  Summary extra_cpu_percent, cpu_ns_per_hit;
  std::optional<Summary> wall_ns_per_hit;
  double tracer_ns_per_hit = 0, command_ns_per_hit = 0;  // the two sides of cpu_ns_per_hit
  // Where the traced runs' time went (sums and medians over the pairs): the looks at which
  // probecost ran on another CPU than the command, its moves between CPUs per 1000 hits, and
  // the command's extra voluntary context switches per hit (1 per ptrace stop).
  int cpu_samples = 0, cpu_samples_apart = 0;
  double tracer_migrations_per_1000_hits = 0;
  double command_switches_per_hit = 0;
  std::vector<Prediction> predicted;
  std::optional<double> prediction_error_percent;
  ErrorBasis error_basis = ErrorBasis::None;
  std::vector<std::string> explanations;  // why the prediction is off, with the evidence
  std::vector<std::string> notes;         // what the model leaves out, whatever the error
  std::vector<std::string> warnings;      // failed runs, hit counts that differ, noise
  bool runs_failed = false;               // a run failed or the runs did different work
  std::vector<std::string> cannot_know;   // attached: what a watcher cannot know

  const Prediction* used() const;
  const CalibrationRow* used_row() const;  // in `calibration`, the mix's row included
  // Whether `row` (a CalibrationRow or a Prediction) is of the mechanism used: an unknown
  // mechanism's row never is.
  template <typename Row>
  bool is_used(const Row& row) const {
    return row.mixed ? mixed : !mixed && mechanism_id && row.id == mechanism_id;
  }
  bool uses(MechanismId id) const;
  bool uses_int3() const {
    return uses(MechanismId::Int3Ptrace) || uses(MechanismId::Int3PtraceFast);
  }
  bool trustworthy() const { return warnings.empty(); }
  // A warning that is not a failure (an attached window with no event to compare) is noise:
  // the measurement completed, and the command exits 0 unless --strict.
  bool failed() const { return runs_failed; }
};

// The arithmetic, explanations included: no measuring (tested on fixtures).
OverheadResult analyze(const Measurement& m, const Calibration& c);

// The calibration's name of the mechanism a probe used: int3-ptrace (the classic single-step)
// or int3-ptrace-fast (one stop: emulate, outline, auto) for an int3 probe; for any other
// probe its via, which is the name of compare's mechanism (jump).
std::string mechanism_of(const ProbeUse& probe, StepOverChoice step_over);
// The same as compare's mechanism; none for a via compare has no mechanism for.
std::optional<MechanismId> mechanism_id_of(const ProbeUse& probe, StepOverChoice step_over);

// Runs the command (or watches the process) untraced and traced by turns. `progress` gets a
// line before each run. A stop signal ends it early, with the pairs done so far (partial);
// CannotProbe when the command cannot be run as asked (a probe cannot be placed).
Measurement measure(const OverheadConfig& cfg,
                    const std::function<void(const std::string&)>& progress);

}  // namespace probecost
