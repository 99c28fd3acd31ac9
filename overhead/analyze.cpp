// overhead's arithmetic: the pairs' figures (against an untraced run, or an attached process's
// reference windows), the predictions, and the prediction's error. No measuring here.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/format.hpp"
#include "overhead/explain.hpp"
#include "overhead/overhead.hpp"

namespace probecost {

const Prediction* OverheadResult::used() const {
  for (const auto& p : predicted) {
    if (is_used(p)) return &p;
  }
  return nullptr;
}

const CalibrationRow* OverheadResult::used_row() const {
  for (const auto& row : calibration.rows) {
    if (is_used(row)) return &row;
  }
  return nullptr;
}

bool OverheadResult::uses(MechanismId id) const {
  return std::find(mechanisms_used.begin(), mechanisms_used.end(), id) != mechanisms_used.end();
}

std::string mechanism_of(const ProbeUse& probe, StepOverChoice step_over) {
  auto id = mechanism_id_of(probe, step_over);
  return id ? mechanism(*id).name : via_name(probe.via);
}

std::optional<MechanismId> mechanism_id_of(const ProbeUse& probe, StepOverChoice step_over) {
  switch (probe.via) {
    case Via::Int3:
      return step_over == StepOverChoice::SingleStep ? MechanismId::Int3Ptrace
                                                     : MechanismId::Int3PtraceFast;
    case Via::Jump:
      return MechanismId::Jump;
    case Via::Auto:
      break;  // a probe's report says Int3 or Jump
  }
  return std::nullopt;
}

namespace {

// The pairs whose two runs both ended well; every pair when none did (and a warning either way).
std::vector<std::size_t> usable_pairs(const Measurement& m, std::vector<std::string>& warnings,
                                      bool& failed) {
  std::size_t n = std::min(m.untraced.size(), m.traced.size());
  std::vector<std::size_t> good, all;
  for (std::size_t i = 0; i < n; ++i) {
    all.push_back(i);
    if (m.untraced[i].ok && m.traced[i].ok) good.push_back(i);
    for (const auto* run : {&m.untraced[i], &m.traced[i]}) {
      if (run->ok) continue;
      failed = true;
      warnings.push_back(std::string(run == &m.traced[i] ? "traced" : "untraced") + " run " +
                         std::to_string(i + 1) + ": the command " + run->end);  // launched only
    }
  }
  if (good.empty() && !all.empty()) {
    warnings.push_back("no pair of runs ended with status 0: the figures are of failing runs");
    return all;
  }
  if (good.size() < all.size()) {
    warnings.push_back("the figures are from the " + std::to_string(good.size()) +
                       " pair(s) of "
                       "runs that both ended with status 0");
  }
  return good;
}

template <typename F>
Summary over(const std::vector<std::size_t>& pairs, F&& f) {
  std::vector<double> v;
  for (std::size_t i : pairs) v.push_back(f(i));
  return summarize(v);
}

Prediction predict(const CalibrationRow& row, double rate_per_s, double rate_per_cpu_s) {
  Prediction p;
  p.mechanism = row.mechanism;
  p.id = row.id;
  p.mixed = row.mixed;
  p.cpu_ns_per_hit = row.cpu_ns_per_hit;
  p.wall_ns_per_hit = row.wall_ns_per_hit;
  p.cpu_percent = rate_per_cpu_s * row.cpu_ns_per_hit / 1e7;
  p.cpu_share_percent = rate_per_s * row.cpu_ns_per_hit / 1e7;
  p.slowdown = 1 + rate_per_s * row.wall_ns_per_hit / 1e9;
  return p;
}

// Probes that used different mechanisms (--via auto): one row, the calibration's costs
// weighted by each probe's hits. Nothing when a mechanism is not in the calibration.
std::optional<CalibrationRow> mixed_row(const OverheadResult& r, const std::string& name) {
  CalibrationRow mix;
  mix.mechanism = name;
  mix.mixed = true;
  double hits = 0;
  for (std::size_t i = 0; i < r.m.probes.size() && i < r.probe_hits.size(); ++i) {
    auto id = mechanism_id_of(r.m.probes[i], r.m.step_over);
    const CalibrationRow* row = id ? r.calibration.find(*id) : nullptr;
    if (!row) return std::nullopt;
    double h = static_cast<double>(r.probe_hits[i]);
    mix.cpu_ns_per_hit += h * row->cpu_ns_per_hit;
    mix.wall_ns_per_hit += h * row->wall_ns_per_hit;
    mix.tracer_cpu_ns_per_hit += h * row->tracer_cpu_ns_per_hit;
    hits += h;
  }
  if (hits > 0) {
    mix.cpu_ns_per_hit /= hits;
    mix.wall_ns_per_hit /= hits;
    mix.tracer_cpu_ns_per_hit /= hits;
  }
  return mix;
}

// The mechanism the probes used (r.mechanisms_used, and a via with none by its name), named
// and typed: one, or "mixed: a + b" in the names' order.
void mechanism_used(OverheadResult& r) {
  std::vector<std::string> names;
  for (MechanismId id : r.mechanisms_used) names.push_back(mechanism(id).name);
  for (const auto& p : r.m.probes) {
    if (!mechanism_id_of(p, r.m.step_over)) {
      names.push_back(via_name(p.via));  // Via::Auto: a probe's report never says it
      break;
    }
  }
  std::sort(names.begin(), names.end());
  r.mixed = names.size() != 1;
  if (!r.mixed) {
    r.mechanism = names.front();
    if (!r.mechanisms_used.empty()) r.mechanism_id = r.mechanisms_used.front();
    return;
  }
  r.mechanism = "mixed";
  for (std::size_t i = 0; i < names.size(); ++i) r.mechanism += (i ? " + " : ": ") + names[i];
}

// The same over the pairs where `f` has a value; none when no pair has.
template <typename F>
std::optional<Summary> over_some(const std::vector<std::size_t>& pairs, F&& f) {
  std::vector<double> v;
  for (std::size_t i : pairs) {
    if (auto x = f(i)) v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  return summarize(v);
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

// Pair i's figures against its reference: the command run untraced (launched), or a window of
// the process before the traced one, with jump probes (its events count its work) or without
// (its CPU alone).
class PairFigures {
 public:
  explicit PairFigures(const Measurement& m) : m_(m) {}
  bool jump_reference() const { return m_.attached && m_.reference == Reference::Jump; }

  // How much of the reference's work the traced run did: launched the same run (1); with jump
  // windows, its hits at the reference's sites over the reference's; with an untraced window,
  // its length over the reference's (the same time: no count of work).
  double work(std::size_t i) const {
    const RunRecord &u = m_.untraced[i], &t = m_.traced[i];
    if (!m_.attached) return 1;
    if (jump_reference()) return ratio(t.reference_hits, u.reference_hits);
    return ratio(t.wall_s, u.wall_s);
  }
  // The reference's CPU for the traced run's work: the process's, and probecost's reading the
  // jump windows' counters.
  double base_command_cpu(std::size_t i) const { return m_.untraced[i].cpu_s * work(i); }
  double base_cpu(std::size_t i) const {
    double tracer = jump_reference() ? m_.untraced[i].tracer_cpu_s : 0;
    return (m_.untraced[i].cpu_s + tracer) * work(i);
  }
  double extra_cpu(std::size_t i) const {
    return m_.traced[i].cpu_s + m_.traced[i].tracer_cpu_s - base_cpu(i);
  }
  // Launched: traced over untraced wall time. With jump windows: the reference's rate of
  // events at its sites over the traced window's. None without a count of the work.
  std::optional<double> slowdown(std::size_t i) const {
    const RunRecord &u = m_.untraced[i], &t = m_.traced[i];
    if (!m_.attached) return u.wall_s > 0 ? std::optional(t.wall_s / u.wall_s) : std::nullopt;
    double before = ratio(u.reference_hits, u.wall_s), now = ratio(t.reference_hits, t.wall_s);
    if (!jump_reference() || before <= 0 || now <= 0) return std::nullopt;
    return before / now;
  }
  // Events per second of the untraced process: the traced window's, sped up by the slowdown.
  std::optional<double> untraced_rate(std::size_t i) const {
    auto s = slowdown(i);
    const RunRecord& t = m_.traced[i];
    if (!s) return std::nullopt;
    return ratio(static_cast<double>(t.hits), t.wall_s) * *s;
  }
  // Wall time per hit: what the traced run took beyond the untraced time of the same work.
  std::optional<double> wall_ns_per_hit(std::size_t i) const {
    auto s = slowdown(i);
    const RunRecord& t = m_.traced[i];
    if (!s || !t.hits || *s <= 0) return std::nullopt;
    return t.wall_s * (1 - 1 / *s) * 1e9 / static_cast<double>(t.hits);
  }
  double per_hit(std::size_t i, double seconds) const {
    return m_.traced[i].hits ? seconds * 1e9 / static_cast<double>(m_.traced[i].hits) : 0.0;
  }

 private:
  const Measurement& m_;
};

// Hits per run, per probe, and a warning when a command's runs did not all do the same work
// (an attached process's windows differ by nature).
void count_hits(OverheadResult& r) {
  const auto& T = r.m.traced;
  Summary hits = over(r.pairs, [&](std::size_t i) { return static_cast<double>(T[i].hits); });
  r.hits = static_cast<std::uint64_t>(std::llround(hits.median));
  if (!r.m.attached && hits.min != hits.max) {
    r.runs_failed = true;
    r.warnings.push_back("the traced runs counted different numbers of hits (" +
                         group_thousands(hits.min) + " to " + group_thousands(hits.max) +
                         "): the runs did not do the same work");
  }
  for (std::size_t p = 0; p < r.m.probes.size(); ++p) {
    r.probe_hits.push_back(static_cast<std::uint64_t>(std::llround(
        over(r.pairs, [&](std::size_t i) {
          return p < T[i].probe_hits.size() ? static_cast<double>(T[i].probe_hits[p]) : 0.0;
        }).median)));
  }
}

void time_and_cpu(OverheadResult& r, const PairFigures& f) {
  const auto& U = r.m.untraced;
  const auto& T = r.m.traced;
  const auto& pairs = r.pairs;
  r.untraced_wall = over(pairs, [&](std::size_t i) { return U[i].wall_s; });
  r.untraced_cpu = over(pairs, [&](std::size_t i) { return U[i].cpu_s; });
  r.traced_wall = over(pairs, [&](std::size_t i) { return T[i].wall_s; });
  r.traced_cpu = over(pairs, [&](std::size_t i) { return T[i].cpu_s; });
  r.tracer_cpu = over(pairs, [&](std::size_t i) { return T[i].tracer_cpu_s; });
  r.held = over(pairs, [&](std::size_t i) { return T[i].held_s; });
  r.extra_cpu_percent = over(pairs, [&](std::size_t i) {
    return f.base_cpu(i) > 0 ? 100 * f.extra_cpu(i) / f.base_cpu(i) : 0.0;
  });
  r.cpu_ns_per_hit = over(pairs, [&](std::size_t i) { return f.per_hit(i, f.extra_cpu(i)); });
  r.tracer_ns_per_hit =
      over(pairs, [&](std::size_t i) { return f.per_hit(i, T[i].tracer_cpu_s); }).median;
  r.command_ns_per_hit = over(pairs, [&](std::size_t i) {
                           return f.per_hit(i, T[i].cpu_s - f.base_command_cpu(i));
                         }).median;
  r.slowdown = over_some(pairs, [&](std::size_t i) { return f.slowdown(i); });
  r.wall_ns_per_hit = over_some(pairs, [&](std::size_t i) { return f.wall_ns_per_hit(i); });
}

// Where the traced runs' time went: looks at the CPUs, probecost's moves, the command's
// context switches.
void where_time_went(OverheadResult& r, const PairFigures& f) {
  const auto& U = r.m.untraced;
  const auto& T = r.m.traced;
  for (std::size_t i : r.pairs) {
    r.cpu_samples += T[i].cpu_samples;
    r.cpu_samples_apart += T[i].cpu_samples_apart;
  }
  r.tracer_migrations_per_1000_hits = over(r.pairs, [&](std::size_t i) {
                                        return f.per_hit(i, T[i].tracer_migrations) / 1e6;
                                      }).median;
  r.command_switches_per_hit =
      over(r.pairs, [&](std::size_t i) {
        return f.per_hit(i, T[i].voluntary_switches - U[i].voluntary_switches) / 1e9;
      }).median;
}

// The workload's rate of events, per wall second and per CPU second of the untraced process.
void event_rates(OverheadResult& r, const PairFigures& f) {
  const auto& U = r.m.untraced;
  const auto& T = r.m.traced;
  double hits = static_cast<double>(r.hits);
  if (!r.m.attached) {
    r.event_rate_per_s = ratio(hits, r.untraced_wall.median);
    r.event_rate_per_cpu_s = ratio(hits, r.untraced_cpu.median);
    return;
  }
  r.cannot_know = what_cannot_be_known(r.m);
  if (f.jump_reference()) {
    auto rate = [&](std::size_t i) { return f.untraced_rate(i); };
    r.event_rate_per_s = over_some(r.pairs, rate).value_or(Summary{}).median;
    r.reference_rate = over_some(r.pairs, [&](std::size_t i) -> std::optional<double> {
      return ratio(U[i].reference_hits, U[i].wall_s);
    });
    r.traced_rate = over_some(r.pairs, [&](std::size_t i) -> std::optional<double> {
      return ratio(T[i].reference_hits, T[i].wall_s);
    });
  } else {
    r.event_rate_per_s = ratio(hits, r.traced_wall.median);  // the traced window's: all there is
  }
  r.event_rate_per_cpu_s =
      ratio(r.event_rate_per_s, ratio(r.untraced_cpu.median, r.untraced_wall.median));
}

void predictions(OverheadResult& r) {
  const Calibration& c = r.calibration;
  for (const auto& row : c.rows) {
    r.predicted.push_back(predict(row, r.event_rate_per_s, r.event_rate_per_cpu_s));
  }
  for (const auto& p : r.m.probes) {
    auto id = mechanism_id_of(p, r.m.step_over);
    if (id && !r.uses(*id)) r.mechanisms_used.push_back(*id);
  }
  mechanism_used(r);
  if (!r.used_row()) {
    if (auto mix = mixed_row(r, r.mechanism); mix && r.mixed) {
      r.calibration.rows.push_back(*mix);
      r.predicted.push_back(predict(*mix, r.event_rate_per_s, r.event_rate_per_cpu_s));
    }
  }
}

// What the model and the measurement leave out, whatever the error.
void add_notes(OverheadResult& r) {
  const Measurement& m = r.m;
  const Calibration& c = r.calibration;
  if (m.partial) {
    r.notes.push_back("Interrupted: the figures are from the " + std::to_string(r.pairs.size()) +
                      " of " + std::to_string(m.planned) + " pairs done before the stop signal" +
                      (!m.traced.empty() && m.traced.back().cut_short
                           ? ", the last traced window cut short"
                           : "") +
                      ".");
  }
  for (const auto& n : m.no_jump) {
    r.notes.push_back("No jump fits " + n.spec + " (" + n.why + "): " +
                      (m.reference == Reference::Jump
                           ? "the reference windows leave it out, and count the work by the others."
                           : "with no jump at any site, only the process's CPU is compared."));
  }
  if (r.uses_int3() && !c.placement.empty() && c.placement_id != m.placement) {
    r.notes.push_back("The calibration was made at placement " + c.placement +
                      ", this measurement at " + placement_name(m.placement) +
                      ": an int3 probe's cost depends on where the tracer and the command run.");
  }
  if (r.uses(MechanismId::Jump) && c.find(MechanismId::Jump)) {
    r.notes.push_back(
        "The calibration's jump row is compare's: a jump probe that writes the "
        "marker's record {TSC, id, arg} per hit. The jump probes here only count hits (trace "
        "without --events), which costs less: the prediction for jump is an upper bound.");
  }
  if (c.find(MechanismId::Record)) {
    r.notes.push_back(
        "The record row predicts `probecost record -b` at these probes: each hit a call, its "
        "entry and its return recorded (a jump at each, where one fits the function's exits "
        "too; an int3 costs what int3 does).");
  }
}

// The prediction for the mechanism used against the measured slowdown (or, with no count of an
// attached process's work, its extra CPU).
void prediction_error(OverheadResult& r) {
  const Prediction* used = r.used();
  if (!used) {
    r.explanations.push_back("The calibration has no " + r.mechanism +
                             " row: there is nothing to compare the measurement with.");
    return;
  }
  if (r.slowdown && r.slowdown->median > 0) {
    r.error_basis = ErrorBasis::Slowdown;
    r.prediction_error_percent = 100 * (used->slowdown / r.slowdown->median - 1);
  } else if (r.m.attached) {
    r.error_basis = ErrorBasis::ExtraCpu;
    if (r.extra_cpu_percent.median > 0) {
      r.prediction_error_percent = 100 * (used->cpu_percent / r.extra_cpu_percent.median - 1);
    } else {
      // /proc/PID/stat counts CPU time in 10 ms ticks, and a busy process that waits at
      // every stop uses no more CPU traced than untraced: the cost is work not done.
      r.explanations.push_back(
          "The process used no more CPU (its own and probecost's) in the traced window than "
          "in the untraced one (" +
          signed_num(r.extra_cpu_percent.median, 1) + "%" +
          "): there is no extra CPU to compare the prediction with.");
    }
  }
  if (!r.prediction_error_percent || std::fabs(*r.prediction_error_percent) > 20) {
    auto why = explain(r);
    r.explanations.insert(r.explanations.end(), why.begin(), why.end());
  }
}

}  // namespace

OverheadResult analyze(const Measurement& m, const Calibration& c) {
  OverheadResult r;
  r.m = m;
  r.calibration = c;
  r.pairs = usable_pairs(m, r.warnings, r.runs_failed);
  if (m.attached && m.reference == Reference::Jump) {
    for (std::size_t i : r.pairs) {
      if (m.untraced[i].reference_hits == 0) {
        r.warnings.push_back("reference window " + std::to_string(i + 1) +
                             ": no event at the reference's probes, so no rate to compare");
      }
    }
  }
  add_notes(r);
  if (r.pairs.empty()) return r;
  PairFigures f(m);
  count_hits(r);
  time_and_cpu(r, f);
  where_time_went(r, f);
  event_rates(r, f);
  predictions(r);
  prediction_error(r);
  return r;
}

}  // namespace probecost
