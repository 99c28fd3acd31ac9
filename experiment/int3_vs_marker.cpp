// `probecost experiment int3-vs-marker` (seed 004): today's `compare` verdict, every mechanism
// at the 2006 event rate, with the 2006 figures beside it.
#include <fstream>

#include "compare/report.hpp"
#include "experiment/common.hpp"
#include "experiment/seeds.hpp"

namespace probecost {

namespace {

std::string then_cell(MechanismId id) {
  if (id == MechanismId::Int3Signal) return "int3 + empty handler: 2.01 µs, 150%";
  if (id == MechanismId::Marker) return "LTT event: 0.220 µs, 16.5%";
  return "";
}

const MechanismResult* find(const CompareResult& r, MechanismId id) {
  for (const auto& m : r.mechanisms) {
    if (m.mechanism.is(id) && m.skipped.empty()) return &m;
  }
  return nullptr;
}

std::string share(const MechanismResult& m) {
  double p = seeds::kRate2006 * m.cpu_ns_per_hit.median / 1e7;
  return percent(p);
}

std::string verdict(const CompareResult& r) {
  std::string s = "Verdict at 749,994 events/s:";
  for (MechanismId id : {MechanismId::Int3Ptrace, MechanismId::Int3PtraceFast, MechanismId::Uprobe,
                         MechanismId::Int3Signal, MechanismId::Jump, MechanismId::Marker}) {
    if (const auto* m = find(r, id)) {
      s += " " + m->mechanism.name + " " + human_ns(m->cpu_ns_per_hit.median) + " = " + share(*m) +
           " of a CPU;";
    }
  }
  const auto* sig = find(r, MechanismId::Int3Signal);
  const auto* mk = find(r, MechanismId::Marker);
  if (sig && mk && mk->cpu_ns_per_hit.median > 0) {
    s += " the in-process breakpoint costs " +
         times(sig->cpu_ns_per_hit.median / mk->cpu_ns_per_hit.median) +
         " times the marker (2006: 9.1 times).";
  }
  return s;
}

bool pti_on() {
  std::ifstream in("/sys/devices/system/cpu/vulnerabilities/meltdown");
  std::string line;
  std::getline(in, line);
  return line.find("PTI") != std::string::npos;
}

std::vector<std::string> notes(const CompareResult& r) {
  std::vector<std::string> out = {verdict(r)};
  const auto* sig = find(r, MechanismId::Int3Signal);
  const auto* mk = find(r, MechanismId::Marker);
  if (sig) {
    out.push_back(
        "int3 with an in-process handler: " + human_ns(sig->per_hit_ns.median) +
        " per hit, against 2.01 µs on the 2006 Pentium 4: a trap, a signal frame and "
        "sigreturn still take two kernel entries and exits" +
        (pti_on() ? ", each paying page-table isolation's CR3 switch here (PTI on)" : "") +
        ", so the breakpoint has not become cheaper with the CPUs.");
  }
  if (mk) {
    out.push_back("The marker: " + human_ns(mk->per_hit_ns.median) +
                  " per event, against 0.220 µs for LTT in 2006: probecost's marker writes a "
                  "record into a ring of the calling thread's own, with no lock, no atomic "
                  "operation and no system call.");
  }
  const auto* jump = find(r, MechanismId::Jump);
  if (jump && mk) {
    out.push_back("The jump-patched probe: " + human_ns(jump->per_hit_ns.median) +
                  " per hit, against " + human_ns(mk->per_hit_ns.median) +
                  " for the marker compiled in: the ptrace tracer patches the site into a jmp to "
                  "a trampoline once, and no hit stops the program; the trampoline writes the "
                  "marker's record into a ring shared with the tracer.");
  }
  const auto* up = find(r, MechanismId::Uprobe);
  const auto* fast = find(r, MechanismId::Int3PtraceFast);
  if (up && fast) {
    out.push_back(
        "The kernel's uprobe, what bpftrace and perf use: " + human_ns(up->per_hit_ns.median) +
        " on the probe site, whose first instruction "
        "it single-steps, against " +
        human_ns(fast->per_hit_ns.median) +
        " for probecost's one-stop ptrace tracer; see uprobe-nop5 and uprobe-push for "
        "sites the kernel need not single-step.");
  }
  return out;
}

nlohmann::json data_json(const CompareResult& r) {
  nlohmann::json mechs = nlohmann::json::array();
  for (const auto& m : r.mechanisms) {
    if (m.mechanism.is(MechanismId::Baseline)) continue;
    mechs.push_back({{"name", m.mechanism.name},
                     {"skipped", m.skipped},
                     {"per_hit_ns", m.per_hit_ns.median},
                     {"per_hit_ns_min", m.per_hit_ns.min},
                     {"per_hit_ns_max", m.per_hit_ns.max},
                     {"cpu_ns_per_hit", m.cpu_ns_per_hit.median},
                     {"how", m.step_over_plan},
                     {"exact", m.problem.empty()}});
  }
  return {{"mechanisms", mechs},
          {"reference_2006",
           {{"int3_ns", seeds::kInt3_2006_ns},
            {"ltt_ns", seeds::kLtt2006_ns},
            {"rate_per_s", seeds::kRate2006}}}};
}

}  // namespace

Experiment run_int3_vs_marker(const ExperimentConfig& cfg, const Progress& progress) {
  CompareConfig c = exp::base_config(cfg);
  c.rates = {seeds::kRate2006};
  std::vector<Mechanism> mechs;
  for (const auto& m : select_mechanisms(exp::mechanism_list(cfg, all_mechanism_ids()))) {
    if (!m.is(MechanismId::MarkerOff)) mechs.push_back(exp::scaled(m, cfg.quick ? 0.01 : 1.0));
  }
  CompareResult r = run_mechanisms(mechs, c, progress);
  Experiment e;
  e.title = "a breakpoint against a marker, and the CPU share at 749,994 events/s";
  e.seeds = "004";
  e.machine = r.machine;
  e.placement = "same-cpu (" + r.cpus.describe() + ")";
  e.today = {"Today: ns per hit minus the baseline's, median of the runs; CPU = tracee + tracer",
             {"mechanism", "hits", "ns/hit", "(min .. max)", "CPU ns/hit", "CPU% @ 749,994/s",
              "2006, Pentium 4 3 GHz"},
             {}};
  for (const auto& m : r.mechanisms) {
    if (m.mechanism.is(MechanismId::Baseline)) continue;
    bool skip = !m.skipped.empty();
    e.today.rows.push_back(
        {m.mechanism.name, exp::hits_cell(m), skip ? "-" : num(m.per_hit_ns.median, 1),
         skip ? "-" : num(m.per_hit_ns.min, 1) + " .. " + num(m.per_hit_ns.max, 1),
         skip ? "-" : num(m.cpu_ns_per_hit.median, 1), skip ? "-" : share(m),
         then_cell(m.mechanism.id)});
  }
  e.then = {seeds::int3_004()};
  e.data = data_json(r);
  e.notes = notes(r);
  exp::collect_problems(r, "compare", e);
  return e;
}

}  // namespace probecost
