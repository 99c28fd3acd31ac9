#include "compare/bench.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/format.hpp"
#include "compare/stats.hpp"

namespace probecost {

bool BenchResult::all_correct() const {
  return std::all_of(rows.begin(), rows.end(),
                     [](const BenchRow& r) { return r.same_result && r.hits == r.expected_hits; });
}

std::vector<std::string> all_kinds() {
  return {"nop",  "nop5", "endbr64",   "push",          "pop",       "mov",
          "sub",  "lea",  "lea_rip",   "load_rip",      "store_rip", "jmp32",
          "jmp8", "call", "jcc_taken", "jcc_not_taken", "ret"};
}

namespace {

Mechanism untraced(const std::string& kind, std::uint64_t n) {
  return {MechanismId::Custom,
          "kind:" + kind,
          "",
          {"--site", "kind:" + kind},
          HitSource::SiteCalls,
          "",
          std::nullopt,
          n};
}

Mechanism traced(const std::string& kind, StepOverChoice strategy, std::uint64_t n) {
  return {MechanismId::Custom,
          "kind:" + kind + "/" + step_over_name(strategy),
          "",
          {"--site", "kind:" + kind},
          HitSource::TracerHits,
          "probecost_kind_" + kind,
          strategy,
          n};
}

}  // namespace

BenchResult run_step_over_bench(const BenchConfig& cfg,
                                const std::function<void(int, int, const std::string&)>& progress) {
  BenchResult result;
  result.config = cfg;
  result.machine = describe_machine();
  result.cpus = plan_cpus(cfg.placement, result.machine.cpus);
  std::vector<std::string> kinds = cfg.kinds.empty() ? all_kinds() : cfg.kinds;
  const std::vector<std::string> known = all_kinds();
  for (const auto& k : kinds) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      throw UsageError("unknown instruction kind '" + k + "'");
    }
  }
  RunConfig run;
  run.inferior = cfg.inferior;
  run.iterations = cfg.iterations;
  run.threads = cfg.threads;
  run.cpus = result.cpus;
  int total = static_cast<int>(kinds.size() * (cfg.strategies.size() + 1) * cfg.repeat), done = 0;
  for (const auto& kind : kinds) {
    std::vector<double> base_ns;
    Sample reference;
    for (unsigned rep = 0; rep < cfg.repeat; ++rep) {
      if (progress) progress(done++, total, kind + " untraced");
      reference = run_once(untraced(kind, cfg.iterations), run);
      base_ns.push_back(reference.ns_per_iter);
    }
    double base = summarize(base_ns).median;
    for (const auto& strategy : cfg.strategies) {
      BenchRow row;
      row.kind = kind;
      row.strategy = strategy;
      std::vector<double> ns, stops, syscalls;
      row.same_result = true;
      for (unsigned rep = 0; rep < cfg.repeat; ++rep) {
        if (progress) progress(done++, total, kind + " " + step_over_name(strategy));
        Sample s = run_once(traced(kind, strategy, cfg.iterations), run);
        double events = static_cast<double>(s.iterations) * s.threads;
        ns.push_back(s.ns_per_iter - base);
        stops.push_back(s.tracer_stops / events);
        syscalls.push_back(s.tracer_syscalls / events);
        row.hits = s.hits;
        row.expected_hits = s.iterations * s.threads;
        row.plan = s.step_over_plan;
        row.same_result = row.same_result && s.checksum == reference.checksum &&
                          s.slot == reference.slot && s.site_calls == reference.site_calls;
      }
      row.ns_per_hit = summarize(ns).median;
      row.stops_per_hit = summarize(stops).median;
      row.syscalls_per_hit = summarize(syscalls).median;
      result.rows.push_back(row);
    }
  }
  if (progress) progress(total, total, "done");
  return result;
}

void write_bench(std::ostream& out, const BenchResult& r, Format f) {
  if (f == Format::Json || f == Format::Csv) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& x : r.rows) {
      rows.push_back({{"kind", x.kind},
                      {"strategy", step_over_name(x.strategy)},
                      {"plan", x.plan},
                      {"ns_per_hit", x.ns_per_hit},
                      {"stops_per_hit", x.stops_per_hit},
                      {"syscalls_per_hit", x.syscalls_per_hit},
                      {"hits", x.hits},
                      {"expected_hits", x.expected_hits},
                      {"same_result", x.same_result}});
    }
    if (f == Format::Json) {
      out << json_text(nlohmann::json{{"machine",
                                       {{"cpu_model", r.machine.cpu_model},
                                        {"kernel", r.machine.kernel},
                                        {"cpus", r.machine.cpus}}},
                                      {"placement", placement_name(r.config.placement)},
                                      {"threads", r.config.threads},
                                      {"iterations", r.config.iterations},
                                      {"rows", rows}},
                       2)
          << "\n";
      return;
    }
    out << "kind,strategy,ns_per_hit,stops_per_hit,syscalls_per_hit,hits,expected_hits,"
           "same_result\n";
    for (const auto& x : r.rows) {
      out << x.kind << ',' << step_over_name(x.strategy) << ',' << x.ns_per_hit << ','
          << x.stops_per_hit << ',' << x.syscalls_per_hit << ',' << x.hits << ',' << x.expected_hits
          << ',' << (x.same_result ? "yes" : "no") << "\n";
    }
    return;
  }
  out << "probecost bench step-over: " << r.config.iterations << " hits x " << r.config.threads
      << (r.config.threads == 1 ? " thread" : " threads") << ", median of " << r.config.repeat
      << " runs\nmachine:   " << r.machine.cpu_model << ", " << r.machine.kernel << ", "
      << r.machine.cpus << " CPUs\nplacement: " << placement_name(r.config.placement) << " ("
      << r.cpus.describe() << ")\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-11s %10s %6s %9s %7s  %s\n", "kind", "strategy",
                "ns/hit", "stops", "syscalls", "result", "how");
  out << line;
  for (const auto& x : r.rows) {
    bool ok = x.same_result && x.hits == x.expected_hits;
    std::snprintf(line, sizeof line, "%-14s %-11s %10.0f %6.1f %9.1f %7s  %s\n", x.kind.c_str(),
                  step_over_name(x.strategy), x.ns_per_hit, x.stops_per_hit, x.syscalls_per_hit,
                  ok ? "same" : "WRONG", x.plan.c_str());
    out << line;
  }
}

}  // namespace probecost
