#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "common/format.hpp"
#include "overhead/overhead.hpp"

namespace probecost {

const Prediction* OverheadResult::used() const {
  for (const auto& p : predicted) {
    if (p.mechanism == mechanism) return &p;
  }
  return nullptr;
}

bool OverheadResult::uses(MechanismId id) const {
  return std::find(mechanisms_used.begin(), mechanisms_used.end(), id) != mechanisms_used.end();
}

std::string mechanism_of(const ProbeUse& probe, const std::string& step_over) {
  auto id = mechanism_id_of(probe, step_over);
  return id ? mechanism(*id).name : probe.via;
}

std::optional<MechanismId> mechanism_id_of(const ProbeUse& probe, const std::string& step_over) {
  // Any other --via is named as compare names its mechanism (jump; a uprobe would be "uprobe").
  if (probe.via != "int3") return find_mechanism(probe.via);
  return step_over == "singlestep" ? MechanismId::Int3Ptrace : MechanismId::Int3PtraceFast;
}

namespace {

double ratio_spread(const Summary& s) {
  return s.median != 0 ? (s.max - s.min) / std::fabs(s.median) : 0;
}

// The pairs whose two runs both ended well; every pair when none did (and a warning either way).
std::vector<std::size_t> usable_pairs(const Measurement& m, std::vector<std::string>& warnings) {
  std::size_t n = std::min(m.untraced.size(), m.traced.size());
  std::vector<std::size_t> good, all;
  for (std::size_t i = 0; i < n; ++i) {
    all.push_back(i);
    if (m.untraced[i].ok && m.traced[i].ok) good.push_back(i);
    for (const auto* run : {&m.untraced[i], &m.traced[i]}) {
      if (run->ok) continue;
      warnings.push_back(std::string(run == &m.traced[i] ? "traced" : "untraced") + " run " +
                         std::to_string(i + 1) + ": the command " + run->end);
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
  double hits = 0;
  for (std::size_t i = 0; i < r.m.probes.size() && i < r.probe_hits.size(); ++i) {
    const CalibrationRow* row = r.calibration.find(mechanism_of(r.m.probes[i], r.m.step_over));
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

std::string mechanism_used(const Measurement& m) {
  std::set<std::string> names;
  for (const auto& p : m.probes) names.insert(mechanism_of(p, m.step_over));
  if (names.size() == 1) return *names.begin();
  std::string mixed = "mixed";
  for (const auto& n : names) mixed += (mixed == "mixed" ? ": " : " + ") + n;
  return mixed;
}

std::string first_word(const std::string& s) {
  return s.substr(0, s.find(' '));
}

// Why the prediction for the mechanism used is off, from what the runs and the calibration
// show. Each line names its evidence.
std::vector<std::string> explain(const OverheadResult& r) {
  std::vector<std::string> why;
  const Measurement& m = r.m;
  const Calibration& c = r.calibration;
  const CalibrationRow* row = c.find(r.mechanism);
  bool int3 = r.uses_int3();
  std::string here = placement_name(m.placement);
  std::string looks = r.cpu_samples ? "probecost ran on another CPU than the command at " +
                                          std::to_string(r.cpu_samples_apart) + " of " +
                                          std::to_string(r.cpu_samples) + " looks (every 100 ms)"
                                    : "";
  if (int3 && !c.placement.empty() && c.placement != here) {
    std::string cost =
        row ? " Here a hit cost " + human_ns(r.cpu_ns_per_hit.median) + " of CPU" +
                  (r.wall_ns_per_hit
                       ? " and " + human_ns(r.wall_ns_per_hit->median) + " of wall time"
                       : std::string()) +
                  ", in the calibration " + human_ns(row->cpu_ns_per_hit) + " and " +
                  human_ns(row->wall_ns_per_hit)
            : std::string();
    why.push_back("The calibration was measured at placement " + c.placement + ", this run at " +
                  here +
                  ": for int3 probes where the tracer and the command run decides the cost (a "
                  "wake-up across CPUs costs µs to tens of µs in a virtual machine, in CPU time "
                  "as well as in waiting)." +
                  cost + (looks.empty() ? "" : "; " + looks) + ". Calibrate at placement " + here +
                  " (the built-in calibration does).");
  }
  if (int3 && r.wall_ns_per_hit && r.cpu_ns_per_hit.median > 0) {
    double wall = r.wall_ns_per_hit->median, cpu = r.cpu_ns_per_hit.median;
    double cal_ratio =
        row && row->cpu_ns_per_hit > 0 ? row->wall_ns_per_hit / row->cpu_ns_per_hit : 0;
    double per_k = r.tracer_migrations_per_1000_hits;
    if (wall > 1.25 * cpu && wall - cpu > 1000) {
      why.push_back("A hit took " + human_ns(wall) + " of wall time here but " + human_ns(cpu) +
                    " of CPU: " + human_ns(wall - cpu) +
                    " per hit ran on no CPU, which is what "
                    "waiting for wake-ups across CPUs looks like (" +
                    looks + "; probecost moved between CPUs " + num(per_k, 1) +
                    " times per 1000 hits)" +
                    (cal_ratio > 0 ? "; the calibration's hits took " + num(cal_ratio, 2) +
                                         " times their CPU in wall time"
                                   : "") +
                    ".");
    } else if (cal_ratio > 1.25 && wall < 1.1 * cpu) {
      why.push_back("The calibration's hits waited on wake-ups across CPUs (wall " +
                    human_ns(row->wall_ns_per_hit) + " for " + human_ns(row->cpu_ns_per_hit) +
                    " of CPU) and this run's did not (wall " + human_ns(wall) + " for " +
                    human_ns(cpu) + "): " + (looks.empty() ? "the scheduler" : looks) + ".");
    }
  }
  if (int3 && row && row->tracer_cpu_ns_per_hit > 0 && r.hits) {
    double cal_tracer = row->tracer_cpu_ns_per_hit;
    double cal_command = row->cpu_ns_per_hit - cal_tracer;
    double tracer_ratio = r.tracer_ns_per_hit / cal_tracer;
    double command_ratio = cal_command > 0 ? r.command_ns_per_hit / cal_command : 0;
    bool both_up = tracer_ratio > 1.15 && command_ratio > 1.15;
    bool both_down = tracer_ratio < 1 / 1.15 && command_ratio < 1 / 1.15;
    std::string sides = "probecost " + human_ns(r.tracer_ns_per_hit) + " here against " +
                        human_ns(cal_tracer) + " in the calibration, the command " +
                        human_ns(r.command_ns_per_hit) + " against " + human_ns(cal_command);
    if (c.placement == here && (both_up || both_down)) {
      why.push_back(std::string("Both sides of a hit cost ") + (both_up ? "more" : "less") +
                    " here than in the calibration (" + sides +
                    "), at the same placement: the "
                    "same trap, stop and step-over ran at another speed, so the machine itself "
                    "was faster or slower at one of the two times. Trap costs in a virtual "
                    "machine drift with what else runs on the host and here; the calibration is " +
                    num(c.age_s / 60, 0) + " min old" +
                    (c.load_1min >= 0 ? " (load average " + num(c.load_1min, 2) + " then)" : "") +
                    ". --recalibrate measures it again.");
    } else {
      if (command_ratio > 1.5 && r.command_ns_per_hit - cal_command > 1000) {
        why.push_back("The command's side of a hit cost more than in the calibration (" + sides +
                      "): besides the trap itself, every stop puts the kernel and probecost on "
                      "the CPU, which evicts the command's caches and TLB entries, so its own "
                      "work between hits runs slower (the calibration's loop has almost no "
                      "working set).");
      }
      if (tracer_ratio > 1.5 || tracer_ratio < 1 / 1.5) {
        why.push_back("probecost's side of a hit cost " + human_ns(r.tracer_ns_per_hit) +
                      " of CPU against " + human_ns(cal_tracer) + " in the calibration.");
      }
    }
  }
  if (int3 && row && !row->step_over.empty()) {
    for (const auto& p : m.probes) {
      if (p.via == "int3" && first_word(p.how) != first_word(row->step_over)) {
        why.push_back(p.spec + " is stepped over by '" + p.how + "', the calibration's site by '" +
                      row->step_over + "': the two cost differently (probecost bench step-over).");
      }
    }
  }
  // compare's jump row writes a record per hit and has it read (as the marker does); a trace's
  // jump probes only count, unless --events.
  bool jump_only = r.mechanisms_used == std::vector<MechanismId>{MechanismId::Jump};
  if (jump_only && row && r.cpu_ns_per_hit.median < row->cpu_ns_per_hit) {
    why.push_back("A jump hit cost " + human_ns(r.cpu_ns_per_hit.median) + " of CPU here against " +
                  human_ns(row->cpu_ns_per_hit) +
                  " in the calibration, whose jump probe writes a {TSC, id, arg} record per hit "
                  "and has it read; these only count hits, so the prediction is an upper bound" +
                  (row->wall_ns_per_hit > 1.25 * row->cpu_ns_per_hit
                       ? ", and its slowdown carries the calibration's wall time per hit (" +
                             human_ns(row->wall_ns_per_hit) + ", " +
                             num(row->wall_ns_per_hit / row->cpu_ns_per_hit, 1) +
                             " times its CPU: waits for a CPU)"
                       : std::string()) +
                  ".");
  }
  // The load average counts probecost and the command themselves; what other processes used
  // is the machine's busy time (/proc/stat) minus ours.
  if (m.others_cpu_share > 0.1) {
    why.push_back("Other processes used " + num(100 * m.others_cpu_share, 0) + "% of the " +
                  std::to_string(m.cpus_online) + " CPUs' time during the runs (load average " +
                  num(std::max(m.load_before[0], m.load_after[0]), 2) +
                  "), so they took turns with probecost and the command" +
                  (c.others_cpu_share >= 0
                       ? " (during the calibration: " + num(100 * c.others_cpu_share, 0) + "%)"
                       : std::string()) +
                  ".");
  } else if (c.others_cpu_share > 0.1) {
    why.push_back("Other processes used " + num(100 * c.others_cpu_share, 0) +
                  "% of the CPUs' time during the calibration (" +
                  num(100 * std::max(0.0, m.others_cpu_share), 0) +
                  "% during these runs): --recalibrate when the machine is quiet.");
  }
  if (r.slowdown && ratio_spread(*r.slowdown) > 0.2) {
    why.push_back("The runs themselves differ: the slowdown went from " + num(r.slowdown->min, 2) +
                  " to " + num(r.slowdown->max, 2) + ".");
  }
  if (int3 && r.untraced_wall.median > 0 && r.untraced_cpu.median > 1.2 * r.untraced_wall.median) {
    why.push_back("The command keeps " + num(r.untraced_cpu.median / r.untraced_wall.median, 1) +
                  " CPUs busy: hits in its threads queue for the one tracer, while the "
                  "calibration's single thread never waits for it.");
  }
  if (const Prediction* p = r.used(); p && r.slowdown) {
    if (r.slowdown->median < 1.1 && p->slowdown < 1.1) {
      why.push_back("Both are within 10% of no slowdown at all: the error is the runs' own noise.");
    }
  }
  double busy_untraced =
      r.untraced_wall.median > 0 ? r.untraced_cpu.median / r.untraced_wall.median : 0;
  double busy_traced = r.traced_wall.median > 0 ? r.traced_cpu.median / r.traced_wall.median : 0;
  if (m.attached && busy_untraced >= 0.9 && busy_traced < 0.9 * busy_untraced) {
    why.push_back("The process was busy untraced (" + num(busy_untraced, 2) +
                  " CPUs) and used less while traced (" + num(busy_traced, 2) +
                  "): it waited at every stop, so it did less of its work in the traced window. "
                  "Its events then come slower when traced, the rate above is lower than its "
                  "untraced rate, and the extra CPU understates the cost: for such a process the "
                  "cost shows as work not done, which a watcher cannot measure.");
  }
  if (why.empty()) {
    why.push_back(
        "None of the causes probecost looks for shows (placement, waits across CPUs, "
        "the command's side of a hit, step-over, load, noise, threads).");
  }
  return why;
}

std::vector<std::string> what_cannot_be_known(const Measurement& m) {
  std::string pid = std::to_string(m.pid);
  return {
      "probecost did not start process " + pid +
          ": it cannot know what the process would "
          "have done in the traced seconds without probes, whether its work changed by itself "
          "between the two windows, or what it will do next.",
      "Its progress is only its CPU time and the hits: the untraced window has no hits to count, "
      "so the event rate is the traced window's. That is the untraced rate only when events "
      "come at a pace tracing does not change (a server under a steady load); a process busy "
      "all the time makes fewer events per second when traced, and then its untraced rate and "
      "the predictions are higher than shown.",
      "A running process has no end to time: no slowdown is measured, and the prediction error "
      "is that of the extra CPU."};
}

}  // namespace

OverheadResult analyze(const Measurement& m, const Calibration& c) {
  OverheadResult r;
  r.m = m;
  r.calibration = c;
  r.pairs = usable_pairs(m, r.warnings);
  const auto& U = m.untraced;
  const auto& T = m.traced;
  const auto& pairs = r.pairs;
  if (pairs.empty()) return r;

  Summary hits = over(pairs, [&](std::size_t i) { return static_cast<double>(T[i].hits); });
  r.hits = static_cast<std::uint64_t>(std::llround(hits.median));
  if (hits.min != hits.max) {
    r.warnings.push_back("the traced runs counted different numbers of hits (" +
                         group_thousands(hits.min) + " to " + group_thousands(hits.max) +
                         "): the runs did not do the same work");
  }
  for (std::size_t p = 0; p < m.probes.size(); ++p) {
    r.probe_hits.push_back(static_cast<std::uint64_t>(std::llround(
        over(pairs, [&](std::size_t i) {
          return p < T[i].probe_hits.size() ? static_cast<double>(T[i].probe_hits[p]) : 0.0;
        }).median)));
  }
  r.untraced_wall = over(pairs, [&](std::size_t i) { return U[i].wall_s; });
  r.untraced_cpu = over(pairs, [&](std::size_t i) { return U[i].cpu_s; });
  r.traced_wall = over(pairs, [&](std::size_t i) { return T[i].wall_s; });
  r.traced_cpu = over(pairs, [&](std::size_t i) { return T[i].cpu_s; });
  r.tracer_cpu = over(pairs, [&](std::size_t i) { return T[i].tracer_cpu_s; });
  r.held = over(pairs, [&](std::size_t i) { return T[i].held_s; });

  // The untraced CPU of the same work: the whole run launched; attached, the untraced
  // window's CPU rate over the traced window's length.
  auto base_cpu = [&](std::size_t i) {
    if (!m.attached) return U[i].cpu_s;
    return U[i].wall_s > 0 ? U[i].cpu_s * T[i].wall_s / U[i].wall_s : 0.0;
  };
  auto extra_cpu = [&](std::size_t i) { return T[i].cpu_s + T[i].tracer_cpu_s - base_cpu(i); };
  auto per_hit = [&](std::size_t i, double seconds) {
    return T[i].hits ? seconds * 1e9 / static_cast<double>(T[i].hits) : 0.0;
  };
  r.extra_cpu_percent = over(pairs, [&](std::size_t i) {
    return base_cpu(i) > 0 ? 100 * extra_cpu(i) / base_cpu(i) : 0.0;
  });
  r.cpu_ns_per_hit = over(pairs, [&](std::size_t i) { return per_hit(i, extra_cpu(i)); });
  r.tracer_ns_per_hit =
      over(pairs, [&](std::size_t i) { return per_hit(i, T[i].tracer_cpu_s); }).median;
  r.command_ns_per_hit =
      over(pairs, [&](std::size_t i) { return per_hit(i, T[i].cpu_s - base_cpu(i)); }).median;

  for (std::size_t i : pairs) {
    r.cpu_samples += T[i].cpu_samples;
    r.cpu_samples_apart += T[i].cpu_samples_apart;
  }
  r.tracer_migrations_per_1000_hits =
      over(pairs, [&](std::size_t i) { return per_hit(i, T[i].tracer_migrations) / 1e6; }).median;
  r.command_switches_per_hit =
      over(pairs, [&](std::size_t i) {
        return per_hit(i, T[i].voluntary_switches - U[i].voluntary_switches) / 1e9;
      }).median;

  double hits_d = static_cast<double>(r.hits);
  if (m.attached) {
    r.event_rate_per_s = r.traced_wall.median > 0 ? hits_d / r.traced_wall.median : 0;
    double cpus_busy =
        r.untraced_wall.median > 0 ? r.untraced_cpu.median / r.untraced_wall.median : 0;
    r.event_rate_per_cpu_s = cpus_busy > 0 ? r.event_rate_per_s / cpus_busy : 0;
    r.cannot_know = what_cannot_be_known(m);
  } else {
    r.event_rate_per_s = r.untraced_wall.median > 0 ? hits_d / r.untraced_wall.median : 0;
    r.event_rate_per_cpu_s = r.untraced_cpu.median > 0 ? hits_d / r.untraced_cpu.median : 0;
    r.slowdown = over(
        pairs, [&](std::size_t i) { return U[i].wall_s > 0 ? T[i].wall_s / U[i].wall_s : 0.0; });
    r.wall_ns_per_hit =
        over(pairs, [&](std::size_t i) { return per_hit(i, T[i].wall_s - U[i].wall_s); });
  }

  for (const auto& row : c.rows) {
    r.predicted.push_back(predict(row, r.event_rate_per_s, r.event_rate_per_cpu_s));
  }
  r.mechanism = mechanism_used(m);
  for (const auto& p : m.probes) {
    auto id = mechanism_id_of(p, m.step_over);
    if (id && !r.uses(*id)) r.mechanisms_used.push_back(*id);
  }
  if (!c.find(r.mechanism)) {
    if (auto mix = mixed_row(r, r.mechanism); mix && r.mechanism.rfind("mixed", 0) == 0) {
      r.calibration.rows.push_back(*mix);
      r.predicted.push_back(predict(*mix, r.event_rate_per_s, r.event_rate_per_cpu_s));
    }
  }
  if (r.uses_int3() && !c.placement.empty() && c.placement != placement_name(m.placement)) {
    r.notes.push_back("The calibration was made at placement " + c.placement +
                      ", this measurement at " + placement_name(m.placement) +
                      ": an int3 probe's cost depends on where the tracer and the command run.");
  }
  if (r.uses(MechanismId::Jump) && c.find(mechanism(MechanismId::Jump).name)) {
    r.notes.push_back(
        "The calibration's jump row is compare's: a jump probe that writes the "
        "marker's record {TSC, id, arg} per hit, with the reading of the records in "
        "its CPU. The jump probes here only count hits (trace without --events), "
        "which costs less: the prediction for jump is an upper bound.");
  }
  const Prediction* used = r.used();
  if (!used) {
    r.explanations.push_back("The calibration has no " + r.mechanism +
                             " row: there is nothing to compare the measurement with.");
    return r;
  }
  if (r.slowdown && r.slowdown->median > 0) {
    r.error_basis = "slowdown";
    r.prediction_error_percent = 100 * (used->slowdown / r.slowdown->median - 1);
  } else if (m.attached) {
    r.error_basis = "extra CPU";
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
  return r;
}

}  // namespace probecost
