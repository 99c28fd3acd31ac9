#include "compare/compare.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/format.hpp"

namespace probecost {

bool CompareResult::trustworthy() const {
  return std::all_of(mechanisms.begin(), mechanisms.end(),
                     [](const MechanismResult& m) { return m.problem.empty(); });
}

bool CompareResult::failed() const {
  return std::any_of(mechanisms.begin(), mechanisms.end(),
                     [](const MechanismResult& m) { return !m.problem.empty() && !m.noisy; });
}

void check_work(const std::string& work) {
  if (work == "empty") return;
  std::string bytes = work.rfind("memcpy:", 0) == 0 ? work.substr(7) : "";
  if (!bytes.empty() && bytes.size() <= 12 &&
      bytes.find_first_not_of("0123456789") == std::string::npos && std::stoull(bytes) > 0) {
    return;
  }
  throw UsageError("bad --work '" + work +
                   "': want empty or memcpy:BYTES with BYTES a whole number > 0");
}

namespace {

std::string ns_text(double v) {
  return num(v, 1);
}

// "spread (max - min) 12.3 ns/hit is larger than the median 4.5" or empty.
std::string judge(const Summary& s, const char* what) {
  if (s.median < 0) {
    return std::string("negative ") + what + " (median " + ns_text(s.median) + ")";
  }
  if (s.max - s.min > s.median) {
    return std::string("the spread of ") + what + " (max - min = " + ns_text(s.max - s.min) +
           ") is larger than its median (" + ns_text(s.median) + ")";
  }
  return {};
}

}  // namespace

void judge_figures(MechanismResult& r) {
  if (!r.problem.empty() || r.mechanism.zero_by_design) return;
  if (r.iterations < kMinTrustedIterations) {
    r.problem = "only " + std::to_string(r.iterations) +
                " iterations per run: the first calls' page faults and cache misses, not the "
                "mechanism, make the figure; run at least " +
                std::to_string(kMinTrustedIterations);
    r.noisy = true;
    return;
  }
  std::string why = judge(r.per_hit_ns, "ns/hit");
  if (why.empty()) why = judge(r.cpu_ns_per_hit, "CPU ns/hit");
  if (why.empty() && r.per_hit_cycles.median < 0) why = "negative cycles/hit";
  if (!why.empty()) {
    r.problem = why + ": the figure is noise, not a cost; run more --iterations or --repeat";
    r.noisy = true;
  }
}

namespace {

std::vector<double> field(const std::vector<Sample>& samples, double Sample::*f) {
  std::vector<double> v;
  for (const auto& s : samples) v.push_back(s.*f);
  return v;
}

std::vector<double> minus(std::vector<double> v, double base) {
  for (auto& x : v) x -= base;
  return v;
}

std::vector<double> wall_per_hit(const std::vector<Sample>& samples) {
  std::vector<double> v;
  for (const auto& s : samples) v.push_back(s.wall_ns / (double(s.iterations) * s.threads));
  return v;
}

void summarize_mechanism(MechanismResult& r, const MechanismResult& baseline,
                         const std::vector<double>& rates, bool judge_noise) {
  const auto& s = r.samples;
  if (!r.skipped.empty()) return;
  double events = static_cast<double>(r.iterations) * s.front().threads;
  r.expected_hits = r.iterations * s.front().threads;
  r.hits = s.front().hits;
  r.step_over_plan = s.front().step_over_plan;
  for (const auto& x : s) {
    r.tracee_minflt = std::max(r.tracee_minflt, x.tracee_minflt);
    if (!x.problem.empty() && r.problem.empty()) r.problem = x.problem;
    if (x.hits != r.hits && r.problem.empty()) r.problem = "hit counts differ between runs";
  }
  r.ns_per_iter = summarize(field(s, &Sample::ns_per_iter));
  r.per_hit_ns = summarize(minus(field(s, &Sample::ns_per_iter), baseline.ns_per_iter.median));
  r.per_hit_cycles =
      summarize(minus(field(s, &Sample::cycles_per_iter),
                      summarize(field(baseline.samples, &Sample::cycles_per_iter)).median));
  r.cpu_ns_per_hit =
      summarize(minus(field(s, &Sample::cpu_ns_per_iter),
                      summarize(field(baseline.samples, &Sample::cpu_ns_per_iter)).median));
  r.wall_ns_per_hit =
      summarize(minus(wall_per_hit(s), summarize(wall_per_hit(baseline.samples)).median));
  r.tracee_cpu_ns_per_hit = summarize(field(s, &Sample::tracee_cpu_ns)).median / events;
  r.tracer_cpu_ns_per_hit = summarize(field(s, &Sample::tracer_cpu_ns)).median / events;
  std::vector<double> syscalls, stops;
  for (const auto& x : s) {
    syscalls.push_back(static_cast<double>(x.tracer_syscalls) / events);
    stops.push_back(static_cast<double>(x.tracer_stops) / events);
  }
  r.syscalls_per_hit = summarize(syscalls).median;
  r.stops_per_hit = summarize(stops).median;
  for (double rate : rates) r.extrapolation.push_back(extrapolate(r.cpu_ns_per_hit.median, rate));
  if (judge_noise) judge_figures(r);
}

std::uint64_t scaled_iterations(const Mechanism& m, double scale) {
  constexpr double kAtLeast = 1000;
  return static_cast<std::uint64_t>(std::max(kAtLeast, m.default_iterations * scale));
}

}  // namespace

CompareResult run_compare(const CompareConfig& cfg,
                          const std::function<void(int, int, const std::string&)>& progress) {
  return run_mechanisms(select_mechanisms(cfg.mechanisms), cfg, progress);
}

CompareResult run_mechanisms(const std::vector<Mechanism>& mechs, const CompareConfig& cfg,
                             const std::function<void(int, int, const std::string&)>& progress) {
  CompareResult result;
  result.config = cfg;
  result.machine = describe_machine();
  result.cpus = plan_cpus(cfg.placement, result.machine.cpus);

  RunConfig run;
  run.inferior = cfg.inferior;
  run.iterations = cfg.iterations;
  run.threads = cfg.threads;
  run.work = cfg.work;
  run.cpus = result.cpus;
  run.step_over = cfg.step_over;
  run.handlers = cfg.handlers;
  run.spare_probes = cfg.spare_probes;

  for (const auto& m : mechs) {
    MechanismResult r;
    r.mechanism = m;
    r.iterations = cfg.iterations ? cfg.iterations : scaled_iterations(m, cfg.iteration_scale);
    result.mechanisms.push_back(r);
  }
  // Round-robin over the repetitions: a slow drift of the machine (another tenant, frequency)
  // spreads over every mechanism instead of landing on one.
  int total = static_cast<int>(cfg.repeat * mechs.size()), done = 0;
  for (unsigned rep = 0; rep < cfg.repeat; ++rep) {
    for (auto& r : result.mechanisms) {
      if (!r.skipped.empty()) {
        ++done;
        continue;
      }
      if (progress) {
        progress(done, total,
                 r.mechanism.name + " run " + std::to_string(rep + 1) + "/" +
                     std::to_string(cfg.repeat));
      }
      run.iterations = r.iterations;
      Sample sample = run_once(r.mechanism, run);
      if (sample.skipped.empty()) {
        r.samples.push_back(sample);
      } else {
        r.skipped = sample.skipped;
      }
      ++done;
    }
  }
  if (progress) progress(total, total, "done");

  MechanismResult& baseline = result.mechanisms.front();
  baseline.ns_per_iter = summarize(field(baseline.samples, &Sample::ns_per_iter));
  MechanismResult base_copy = baseline;
  for (auto& r : result.mechanisms) summarize_mechanism(r, base_copy, cfg.rates, cfg.judge_noise);
  relate_to_marker(result);
  return result;
}

void relate_to_marker(CompareResult& result) {
  auto marker =
      std::find_if(result.mechanisms.begin(), result.mechanisms.end(),
                   [](const MechanismResult& r) { return r.mechanism.is(MechanismId::Marker); });
  double base = marker != result.mechanisms.end() && marker->skipped.empty()
                    ? marker->cpu_ns_per_hit.median
                    : 0;
  for (auto& r : result.mechanisms) {
    r.x_marker = base > 0 && r.skipped.empty() ? r.cpu_ns_per_hit.median / base : 0;
  }
}

}  // namespace probecost
