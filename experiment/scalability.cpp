// `probecost experiment scalability` (seed 001): cost per hit as 1, 2, 4 and 8 threads of the
// inferior hit one probe at once, each thread on a CPU of its own where the machine has them.
#include "experiment/common.hpp"
#include "experiment/seeds.hpp"

namespace probecost {

namespace {

// The mechanisms measured by default. Any of all_mechanisms() works with -m.
const std::vector<MechanismId> kMechanisms = {MechanismId::Marker,         MechanismId::Int3Signal,
                                              MechanismId::Int3PtraceFast, MechanismId::Jump,
                                              MechanismId::Uprobe,         MechanismId::UprobeNop5};
const std::vector<unsigned> kThreads = {1, 2, 4, 8};

std::string cpus_cell(unsigned threads, int cpus) {
  if (static_cast<int>(threads) <= cpus)
    return std::to_string(threads) + " of " + std::to_string(cpus);
  return std::to_string(cpus) + " of " + std::to_string(cpus) + ", time-sliced (" +
         num(static_cast<double>(threads) / cpus, 0) + " threads each)";
}

struct Point {
  unsigned threads = 0;
  MechanismResult r;
};

nlohmann::json series_json(const std::string& name, const std::vector<Point>& points, int cpus) {
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : points) {
    if (!p.r.skipped.empty()) continue;
    pts.push_back({{"threads", p.threads},
                   {"per_thread_ns", p.r.per_hit_ns.median},
                   {"wall_ns_per_hit", p.r.wall_ns_per_hit.median},
                   {"cpu_ns_per_hit", p.r.cpu_ns_per_hit.median},
                   {"time_sliced", static_cast<int>(p.threads) > cpus},
                   {"exact", p.r.problem.empty()}});
  }
  return {{"mechanism", name}, {"points", pts}};
}

std::string note_for(const std::string& name, const std::vector<Point>& pts, int cpus) {
  const MechanismResult& one = pts.front().r;
  if (!one.skipped.empty()) return name + ": skipped (" + one.skipped + ").";
  const MechanismResult& two = pts[1].r;
  const MechanismResult& eight = pts.back().r;
  double w1 = one.wall_ns_per_hit.median, w2 = two.wall_ns_per_hit.median;
  double w8 = eight.wall_ns_per_hit.median;
  std::string s = name + ": " + num(w1, 0) + " ns per hit with 1 thread, " + num(w2, 0) +
                  " with 2 on " + std::to_string(std::min(2, cpus)) + " CPUs (" +
                  num(w1 > 0 ? w2 / w1 : 0, 2) + "x), " + num(w8, 0) + " with 8 (" +
                  num(w1 > 0 ? w8 / w1 : 0, 2) + "x); at 8 a thread's own loop took " +
                  num(eight.per_hit_ns.median, 0) + " ns per hit, turns waited included.";
  return s;
}

std::vector<std::string> notes(const std::vector<std::pair<std::string, std::vector<Point>>>& all,
                               int cpus) {
  std::vector<std::string> out = {
      "Cost per hit, all threads = the time from the first thread's loop start to the last one's "
      "end / every thread's hits, minus "
      "the baseline's at the same thread count: seed 001's \"total time / total probe hits\". "
      "With more CPUs than threads it falls as threads are added, if nothing is shared; on this "
      "machine's " +
      std::to_string(cpus) + " CPUs it can fall to 1/" + std::to_string(cpus) +
      " at best, and above " + std::to_string(cpus) +
      " threads the threads only take turns (time-sliced)."};
  for (const auto& [name, pts] : all) out.push_back(note_for(name, pts, cpus));
  out.push_back(
      "Why: the marker shares nothing (one ring per thread). int3-signal takes the process's "
      "signal lock on each delivery. int3-ptrace-fast has one tracer that handles every stop of "
      "every thread in turn, and a thread on another CPU than the tracer's pays a cross-CPU "
      "wake-up per hit. The jump-patched probe runs in the thread that hits it, like the marker, "
      "but all threads write one ring (a locked add on its position), so its cache line moves "
      "between CPUs. The kernel's uprobe looks its probe up under RCU/SRCU in recent kernels, "
      "what seed 001's RCU change did for kprobes, and single-steps from a per-thread slot.");
  return out;
}

}  // namespace

Experiment run_scalability(const ExperimentConfig& cfg, const Progress& progress) {
  CompareConfig c = exp::base_config(cfg);
  c.placement = Placement::Spread;
  // Each mechanism once, in the order given: select_mechanisms() runs them so, after the baseline.
  std::vector<Mechanism> selected = select_mechanisms(exp::mechanism_list(cfg, kMechanisms));
  std::vector<std::pair<std::string, std::vector<Point>>> all;
  for (std::size_t i = 1; i < selected.size(); ++i) all.push_back({selected[i].name, {}});
  Experiment e;
  for (unsigned t : kThreads) {
    c.threads = t;
    std::vector<Mechanism> mechs;
    double scale = (cfg.quick ? 0.01 : 0.5) / t;  // the same hits in all, whatever the threads
    for (const auto& m : selected) mechs.push_back(exp::scaled(m, scale));
    CompareResult r =
        run_mechanisms(mechs, c, exp::phase(progress, std::to_string(t) + " threads"));
    e.machine = r.machine;
    e.placement = "spread (" + r.cpus.describe() + ")";
    for (std::size_t i = 0; i < all.size(); ++i) all[i].second.push_back({t, r.mechanisms[i + 1]});
    exp::collect_problems(r, std::to_string(t) + " threads", e);
  }
  e.title = "cost per hit as 1, 2, 4 and 8 threads hit one probe at once";
  e.seeds = "001";
  e.today = {
      "Today: ns per hit minus the baseline's; all threads = wall time / all hits (seed "
      "001's figure), per thread = each thread's loop time / its hits (median thread)",
      {"mechanism", "threads", "CPUs used", "hits", "ns/hit, all threads", "ns/hit, per thread",
       "CPU ns/hit"},
      {}};
  nlohmann::json series = nlohmann::json::array();
  for (const auto& [name, pts] : all) {
    for (const auto& p : pts) {
      const auto& m = p.r;
      bool skip = !m.skipped.empty();
      e.today.rows.push_back({name, std::to_string(p.threads), cpus_cell(p.threads, e.machine.cpus),
                              exp::hits_cell(m), skip ? "-" : num(m.wall_ns_per_hit.median, 1),
                              skip ? "-" : num(m.per_hit_ns.median, 1),
                              skip ? "-" : num(m.cpu_ns_per_hit.median, 1)});
    }
    series.push_back(series_json(name, pts, e.machine.cpus));
  }
  e.then = {seeds::scalability_001()};
  e.data = {{"series", series}, {"cpus", e.machine.cpus}};
  e.notes = notes(all, e.machine.cpus);
  return e;
}

}  // namespace probecost
