#include "compare/report.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "compare/verdict.hpp"

namespace probecost {

namespace {

// Built by appending: GCC 12 warns wrongly (-Wrestrict, PR 105651) on "(" + std::string.
std::string range_text(const Summary& s) {
  std::string t = "(";
  t.append(num(s.min, 1)).append(" .. ").append(num(s.max, 1)).append(")");
  return t;
}

std::string rate_label(double rate) {
  return group_thousands(rate) + "/s";
}

nlohmann::json summary_json(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

nlohmann::json extrapolation_json(const Extrapolation& e) {
  nlohmann::json j = {
      {"rate_per_s", e.rate_per_s}, {"cpu_percent", e.cpu_percent}, {"slowdown", e.slowdown}};
  j["saturation_rate_per_s"] =
      std::isfinite(e.saturation_rate_per_s) ? nlohmann::json(e.saturation_rate_per_s) : nullptr;
  return j;
}

nlohmann::json to_json(const CompareResult& r) {
  const auto& c = r.config;
  nlohmann::json mechs = nlohmann::json::array();
  for (const auto& m : r.mechanisms) {
    nlohmann::json ex = nlohmann::json::array();
    for (const auto& e : m.extrapolation) ex.push_back(extrapolation_json(e));
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& s : m.samples) {
      runs.push_back({{"ns_per_iteration", s.ns_per_iter},
                      {"cycles_per_iteration", s.cycles_per_iter},
                      {"tracee_cpu_ns", s.tracee_cpu_ns},
                      {"tracer_cpu_ns", s.tracer_cpu_ns},
                      {"hits", s.hits},
                      {"tracee_cpus", s.tracee_cpus_seen}});
    }
    mechs.push_back(
        {{"name", m.mechanism.name},
         {"description", m.mechanism.description},
         {"iterations", m.iterations},
         {"hits", m.hits},
         {"expected_hits", m.expected_hits},
         {"hits_exact", m.skipped.empty() && (!m.mechanism.probing() || m.hits == m.expected_hits)},
         {"ns_per_iteration", summary_json(m.ns_per_iter)},
         {"per_hit_ns", summary_json(m.per_hit_ns)},
         {"per_hit_cycles", summary_json(m.per_hit_cycles)},
         {"cpu_ns_per_hit", summary_json(m.cpu_ns_per_hit)},
         {"tracee_cpu_ns_per_hit", m.tracee_cpu_ns_per_hit},
         {"tracer_cpu_ns_per_hit", m.tracer_cpu_ns_per_hit},
         {"syscalls_per_hit", m.syscalls_per_hit},
         {"stops_per_hit", m.stops_per_hit},
         {"tracee_minor_faults", m.tracee_minflt},
         {"step_over", m.step_over_plan.empty() ? nullptr : nlohmann::json(m.step_over_plan)},
         {"x_marker", m.x_marker > 0 ? nlohmann::json(m.x_marker) : nullptr},
         {"extrapolation", ex},
         {"problem", m.problem.empty() ? nullptr : nlohmann::json(m.problem)},
         {"noisy", m.noisy},
         {"skipped", m.skipped.empty() ? nullptr : nlohmann::json(m.skipped)},
         {"wall_ns_per_hit", summary_json(m.wall_ns_per_hit)},
         {"runs", runs}});
  }
  return {{"machine",
           {{"cpu_model", r.machine.cpu_model},
            {"kernel", r.machine.kernel},
            {"tsc_hz", r.machine.tsc_hz},
            {"cpus", r.machine.cpus}}},
          {"config",
           {{"repeat", c.repeat},
            {"threads", c.threads},
            {"work", c.work},
            {"iterations", c.iterations ? nlohmann::json(c.iterations) : "auto"},
            {"placement", placement_name(c.placement)},
            {"tracer_cpu", r.cpus.tracer_cpu},
            {"tracee_cpu", r.cpus.tracee_cpu},
            {"rates_per_s", c.rates},
            {"inferior", c.inferior}}},
          {"mechanisms", mechs},
          {"verdict", verdict_json(r)}};
}

void write_csv(std::ostream& out, const CompareResult& r) {
  out << "mechanism,iterations,threads,hits,expected_hits,per_hit_ns_median,per_hit_ns_min,"
         "per_hit_ns_max,per_hit_cycles_median,cpu_ns_per_hit_median,syscalls_per_hit,"
         "rate_per_s,cpu_percent,slowdown,saturation_rate_per_s,placement,cpu_model\n";
  for (const auto& m : r.mechanisms) {
    for (const auto& e : m.extrapolation) {
      out << m.mechanism.name << ',' << m.iterations << ',' << r.config.threads << ',' << m.hits
          << ',' << m.expected_hits << ',' << plain_number(m.per_hit_ns.median) << ','
          << plain_number(m.per_hit_ns.min) << ',' << plain_number(m.per_hit_ns.max) << ','
          << plain_number(m.per_hit_cycles.median) << ',' << plain_number(m.cpu_ns_per_hit.median)
          << ',' << plain_number(m.syscalls_per_hit) << ',' << plain_number(e.rate_per_s) << ','
          << plain_number(e.cpu_percent) << ',' << plain_number(e.slowdown) << ','
          << plain_number(e.saturation_rate_per_s) << ',' << placement_name(r.config.placement)
          << ",\"" << r.machine.cpu_model << "\"\n";
    }
  }
}

void write_text(std::ostream& out, const CompareResult& r, bool verbose) {
  const auto& c = r.config;
  out << "probecost compare: " << r.mechanisms.size() << " mechanisms x " << c.repeat << " runs, "
      << c.threads << (c.threads == 1 ? " thread" : " threads") << ", work " << c.work << "\n";
  out << "machine:   " << r.machine.cpu_model << ", " << r.machine.kernel << ", TSC "
      << num(r.machine.tsc_hz / 1e9, 3) << " GHz, " << r.machine.cpus << " CPUs\n";
  out << "placement: " << placement_name(c.placement) << " (" << r.cpus.describe() << ")\n";
  out << "cost per hit = (ns per iteration) - (baseline's median); CPU = tracee + tracer, from "
         "the kernel's accounting\n";
  out << "xmarker = CPU ns/hit / the marker's CPU ns/hit (the verdict's ratio)\n\n";

  std::string head = pad("mechanism", 17, true) + pad("iterations", 11) + pad("hits", 11) +
                     pad("ns/hit", 10) + pad("(min .. max)", 25) + pad("cycles/hit", 11) +
                     pad("CPU ns/hit", 11) + pad("xmarker", 9);
  for (double rate : c.rates) head += pad("CPU%@" + rate_label(rate), 18) + pad("slowdown", 9);
  if (verbose) head += pad("syscalls/hit", 13) + pad("stops/hit", 10);
  out << head << "\n";
  for (const auto& m : r.mechanisms) {
    if (!m.skipped.empty()) {
      out << pad(m.mechanism.name, 17, true) << "skipped: " << m.skipped << "\n";
      continue;
    }
    std::string row = pad(m.mechanism.name, 17, true) + pad(group_thousands(m.iterations), 11) +
                      pad(group_thousands(m.hits), 11) + pad(num(m.per_hit_ns.median, 1), 10) +
                      pad(range_text(m.per_hit_ns), 25) + pad(num(m.per_hit_cycles.median, 0), 11) +
                      pad(num(m.cpu_ns_per_hit.median, 1), 11) +
                      pad(m.x_marker > 0 ? times(m.x_marker) : "-", 9);
    for (const auto& e : m.extrapolation) {
      row += pad(percent(e.cpu_percent), 18) + pad(num(e.slowdown, 3), 9);
    }
    if (verbose) row += pad(num(m.syscalls_per_hit, 1), 13) + pad(num(m.stops_per_hit, 1), 10);
    out << row << "\n";
  }
  std::string zero_rows;
  for (const auto& m : r.mechanisms) {
    if (m.mechanism.zero_by_design) zero_rows += (zero_rows.empty() ? "" : ", ") + m.mechanism.name;
  }
  if (!zero_rows.empty()) {
    out << "\n"
        << zero_rows
        << ": ~0 by design; their (min .. max) is the resolution of the measurement, not a cost\n";
  }
  // Issue 24 item 6: a ring's page faulted in by a record would be charged to the hits.
  std::string faults;
  for (const auto& m : r.mechanisms) {
    if (m.skipped.empty() && (m.mechanism.jump() || m.mechanism.is(MechanismId::Record) ||
                              m.mechanism.is(MechanismId::Baseline)))
      faults +=
          (faults.empty() ? "" : ", ") + m.mechanism.name + " " + std::to_string(m.tracee_minflt);
  }
  if (!faults.empty())
    out << "\nthe program's minor page faults in its timed loop (the most of any run): " << faults
        << "\n";
  for (const auto& m : r.mechanisms) {
    if (!m.problem.empty()) out << "\nWARNING " << m.mechanism.name << ": " << m.problem << "\n";
  }
  if (verbose) {
    out << "\n";
    for (const auto& m : r.mechanisms) {
      if (!m.skipped.empty()) continue;
      std::string how = m.mechanism.uprobe() ? "; " : "; step-over: ";
      out << m.mechanism.name << ": " << m.mechanism.description << "; tracee CPU "
          << num(m.tracee_cpu_ns_per_hit, 1) << " ns/hit, tracer CPU "
          << num(m.tracer_cpu_ns_per_hit, 1) << " ns/hit"
          << (m.step_over_plan.empty() ? "" : how + m.step_over_plan) << "\n";
    }
  } else {
    // How the kernel runs each uprobe'd site decides its cost: always say.
    bool first = true;
    for (const auto& m : r.mechanisms) {
      if (!m.mechanism.uprobe() || m.step_over_plan.empty()) continue;
      out << (first ? "\n" : "") << m.mechanism.name << ": " << m.step_over_plan << "\n";
      first = false;
    }
  }
  write_verdict(out, r);
}

}  // namespace

void write_report(std::ostream& out, const CompareResult& r, Format f, bool verbose) {
  switch (f) {
    case Format::Text:
      return write_text(out, r, verbose);
    case Format::Json:
      out << json_dump(to_json(r)) << "\n";
      return;
    case Format::Csv:
      return write_csv(out, r);
  }
}

void write_extrapolation(std::ostream& out, double cost_ns, const std::vector<double>& rates,
                         Format f) {
  if (f == Format::Json) {
    nlohmann::json ex = nlohmann::json::array();
    for (double rate : rates) ex.push_back(extrapolation_json(extrapolate(cost_ns, rate)));
    out << json_dump(nlohmann::json{{"cost_ns", cost_ns}, {"extrapolation", ex}}) << "\n";
    return;
  }
  if (f == Format::Csv) {
    out << "cost_ns,rate_per_s,cpu_percent,slowdown,saturation_rate_per_s\n";
    for (double rate : rates) {
      auto e = extrapolate(cost_ns, rate);
      out << plain_number(cost_ns) << ',' << plain_number(rate) << ','
          << plain_number(e.cpu_percent) << ',' << plain_number(e.slowdown) << ','
          << plain_number(e.saturation_rate_per_s) << "\n";
    }
    return;
  }
  for (double rate : rates) {
    auto e = extrapolate(cost_ns, rate);
    out << group_thousands(rate) << " events/s x " << human_ns(cost_ns)
        << "/event = " << percent(e.cpu_percent) << " of a CPU; the traced work takes "
        << num(e.slowdown, 3) << "x as long; probes alone fill a CPU at "
        << group_thousands(e.saturation_rate_per_s) << " events/s\n";
  }
}

}  // namespace probecost
