// `probecost experiment multi-probe` (seed 003): 1, 2, 4 and 8 handlers on one address, and one
// handler with 1,000 more probes installed elsewhere (never hit), for the ptrace tracer and the
// kernel's uprobe.
#include "compare/uprobe_run.hpp"
#include "experiment/common.hpp"
#include "experiment/seeds.hpp"

namespace probecost {

namespace {

const std::vector<MechanismId> kMechanisms = {MechanismId::Int3PtraceFast, MechanismId::Uprobe,
                                              MechanismId::UprobeNop5};
constexpr unsigned kSpareSites = 1000;  // inferior/spares.S

struct Setup {
  unsigned handlers;
  bool spares;
};
const std::vector<Setup> kSetups = {{1, false}, {2, false}, {4, false}, {8, false}, {1, true}};

struct Row {
  Setup setup;
  MechanismResult r;
  std::uint64_t spares = 0;  // probes installed elsewhere
};
// Each mechanism's rows, under its id and printed name.
struct Series {
  MechanismId id;
  std::string name;
  std::vector<Row> rows;
};
using Rows = std::vector<Series>;

// Files each mechanism's result of `r` under its name.
void record(Rows& all, const CompareResult& r, const Setup& s, std::uint64_t uprobe_spares) {
  for (const auto& m : r.mechanisms) {
    for (auto& [id, name, rows] : all) {
      if (!m.mechanism.is(id)) continue;
      std::uint64_t spares = m.mechanism.uprobe() ? uprobe_spares
                             : m.samples.empty()  ? 0
                                                  : m.samples.front().spare_probes;
      rows.push_back({s, m, spares});
    }
  }
}

std::vector<Mechanism> only(const std::vector<Mechanism>& mechs, bool uprobe) {
  std::vector<Mechanism> out = {mechs.front()};  // the baseline
  for (std::size_t i = 1; i < mechs.size(); ++i) {
    if (mechs[i].uprobe() == uprobe) out.push_back(mechs[i]);
  }
  return out;
}

// One handler, `count` probes elsewhere: int3 on the spare sites for the tracer (each run), and
// system-wide uprobes on them for the kernel (once for all runs, see SpareUprobes).
void run_with_spares(const std::vector<Mechanism>& mechs, CompareConfig c, unsigned count,
                     const Progress& progress, Rows& all, Experiment& e) {
  const Setup setup{1, true};
  c.spare_probes = count;
  CompareResult traced = run_mechanisms(only(mechs, false), c, exp::phase(progress, "spares"));
  record(all, traced, setup, 0);
  exp::collect_problems(traced, "probes elsewhere", e);
  if (only(mechs, true).size() == 1) return;
  c.spare_probes = 0;
  SpareUprobes spares(c.inferior, count);
  CompareResult up = run_mechanisms(only(mechs, true), c, exp::phase(progress, "spare uprobes"));
  for (auto& m : up.mechanisms) {
    if (!spares.skipped().empty() && m.mechanism.uprobe()) m.skipped = spares.skipped();
  }
  record(all, up, setup, spares.size());
  exp::collect_problems(up, "probes elsewhere", e);
  if (spares.hits() != 0) e.problems.push_back("the spare uprobes counted hits");
  if (progress) progress(0, 1, "removing " + std::to_string(spares.size()) + " spare uprobes");
}

nlohmann::json rows_json(const std::string& name, const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    if (!row.r.skipped.empty()) continue;
    out.push_back({{"mechanism", name},
                   {"handlers", row.setup.handlers},
                   {"spare_probes", row.spares},
                   {"per_hit_ns", row.r.per_hit_ns.median},
                   {"cpu_ns_per_hit", row.r.cpu_ns_per_hit.median},
                   {"exact", row.r.problem.empty()}});
  }
  return out;
}

// CPU time per hit: on a machine shared with other work, the tracee's and tracer's own CPU
// time varies far less than the wall clock, which also counts the time others held the CPU.
double cpu(const Row& row) {
  return row.r.cpu_ns_per_hit.median;
}

// Half the min..max range of the row's runs, CPU time: what a difference must beat.
double spread(const MechanismResult& r) {
  return (r.cpu_ns_per_hit.max - r.cpu_ns_per_hit.min) / 2;
}

std::string note_for(const std::string& name, const std::vector<Row>& rows) {
  if (!rows.front().r.skipped.empty()) return name + ": skipped (" + rows.front().r.skipped + ").";
  double one = cpu(rows[0]), eight = cpu(rows[3]), spares = cpu(rows[4]);
  return name + ": " + num(one, 0) + " ns of CPU per hit with one handler (runs within ±" +
         num(spread(rows[0].r), 0) + " ns), " + num(eight, 0) + " with eight (" +
         signed_num((eight - one) / 7, 0) + " ns per handler added, " +
         signed_num(one > 0 ? 100 * (eight - one) / one : 0, 0) + "%), " + num(spares, 0) +
         " with " + group_thousands(static_cast<double>(rows[4].spares)) +
         " probes installed elsewhere (" + signed_num(spares - one, 0) + " ns).";
}

std::vector<std::string> notes(const Rows& all) {
  std::vector<std::string> out;
  for (const auto& [id, name, rows] : all) out.push_back(note_for(name, rows));
  out.push_back(
      "In 2005 a second kprobe on one address cost 0.16 to 0.24 µs more than one (14-21%): the "
      "aggregate handler walked a list of handlers on a 732 MHz PIII. A ptrace tracer runs its "
      "handlers in its own process once the stop has been paid for (a function call each, "
      "against a stop of microseconds) and finds the site by a binary search over its sorted "
      "sites. The kernel's uprobe runs the handler of every consumer on each hit (each perf "
      "event is one: it builds a trace record and adds to the counter) and finds the probe by "
      "(inode, offset) in a tree, so a probe elsewhere adds a tree level at most.");
  return out;
}

}  // namespace

Experiment run_multi_probe(const ExperimentConfig& cfg, const Progress& progress) {
  Rows all;
  Experiment e;
  std::vector<Mechanism> mechs;
  for (const auto& m : select_mechanisms(exp::mechanism_list(cfg, kMechanisms))) {
    if (!m.is(MechanismId::Baseline)) all.push_back({m.id, m.name, {}});
    mechs.push_back(exp::scaled(m, cfg.quick ? 0.01 : 0.4));
  }
  CompareConfig c = exp::base_config(cfg);
  for (const Setup& s : kSetups) {
    c.handlers = s.handlers;
    if (s.spares) {
      run_with_spares(mechs, c, cfg.quick ? 20 : kSpareSites, progress, all, e);
      continue;
    }
    std::string what = std::to_string(s.handlers) + " handlers";
    CompareResult r = run_mechanisms(mechs, c, exp::phase(progress, what));
    e.machine = r.machine;
    e.placement = "same-cpu (" + r.cpus.describe() + ")";
    record(all, r, s, 0);
    exp::collect_problems(r, what, e);
  }
  e.title = "one handler against several on one address, and against 1,000 probes elsewhere";
  e.seeds = "003";
  e.today = {
      "Today: ns per hit minus the baseline's (median of the runs); every handler counts "
      "every hit",
      {"mechanism", "handlers", "probes elsewhere", "hits", "ns/hit", "vs 1 handler", "CPU ns/hit",
       "CPU vs 1 handler"},
      {}};
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [id, name, list] : all) {
    double one = list.front().r.per_hit_ns.median, one_cpu = cpu(list.front());
    for (const auto& row : list) {
      bool skip = !row.r.skipped.empty();
      e.today.rows.push_back(
          {name, std::to_string(row.setup.handlers), group_thousands(double(row.spares)),
           exp::hits_cell(row.r), skip ? "-" : num(row.r.per_hit_ns.median, 0),
           skip ? "-" : signed_num(row.r.per_hit_ns.median - one, 0), skip ? "-" : num(cpu(row), 0),
           skip ? "-" : signed_num(cpu(row) - one_cpu, 0)});
    }
    for (auto& j : rows_json(name, list)) rows.push_back(j);
  }
  e.then = {seeds::multi_probe_003()};
  e.data = {{"rows", rows}};
  e.notes = notes(all);
  return e;
}

}  // namespace probecost
