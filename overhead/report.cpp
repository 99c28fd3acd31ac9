#include "overhead/report.hpp"

#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/format.hpp"
#include "compare/model.hpp"

namespace probecost {

using nlohmann::json;

namespace {

std::string seconds(double s) {
  return num(s, s >= 10 ? 2 : 3) + " s";
}

std::string age(double s) {
  if (s < 120) return num(s, 0) + " s";
  if (s < 7200) return num(s / 60, 0) + " min";
  if (s < 2 * 86400) return num(s / 3600, 1) + " h";
  return num(s / 86400, 1) + " days";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_of(" \t'\"\\$`*?;&|<>()") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

std::string range(const Summary& s, const std::function<std::string(double)>& f) {
  std::string t = "(";
  t.append(f(s.min)).append(" .. ").append(f(s.max)).append(")");
  return t;
}

void line(std::ostream& out, const std::string& label, const Summary& s,
          const std::function<std::string(double)>& f, const std::string& after = "") {
  out << "  " << pad(label, 20, true) << pad(f(s.median), 12) << "  " << range(s, f)
      << (after.empty() ? "" : "  " + after) << "\n";
}

void write_header(std::ostream& out, const OverheadResult& r) {
  const Measurement& m = r.m;
  unsigned n = static_cast<unsigned>(m.traced.size());
  if (m.attached) {
    bool jumps = m.reference == Reference::Jump;
    std::string s = plain_number(m.duration_s) + " s";
    out << "probecost overhead: process " << m.pid << ", " << n << " x (" << s
        << (jumps ? " with jump probes, the reference" : " untraced") << ", then " << s
        << " traced)\n";
    out << "  reference: "
        << (jumps ? "jump probes at " + join(m.reference_probes) +
                        " (a few ns a hit): its rate of events there, as if untraced"
                  : std::string("no probe; no jump fits any probed site, so only the "
                                "process's CPU is compared"))
        << "; held " << num(m.check_held_s * 1e3, 0)
        << " ms while probecost looked where jumps fit\n";
  } else {
    out << "probecost overhead: " << command_line(m.command) << "\n";
    out << "  " << n << " traced and " << m.untraced.size() << " untraced runs by turns, after "
        << m.warmup << " warm-up run" << (m.warmup == 1 ? "" : "s") << "; stdin " << m.stdin_path
        << ", output " << (m.show_output ? "to probecost's stderr" : "discarded") << "\n";
  }
  out << "  probes: --via " << via_name(m.via) << ", --step-over " << step_over_name(m.step_over)
      << "; mechanism used: " << r.mechanism << "\n";
  out << "  placement " << placement_name(m.placement) << " (" << m.cpus << ")"
      << (m.placement == Placement::Free ? ": nothing pinned, as 'probecost trace' runs" : "")
      << "\n";
  out << "  load average " << num(m.load_before[0], 2) << " before, " << num(m.load_after[0], 2)
      << " after, on " << m.cpus_online << " CPUs; other processes used "
      << num(100 * std::max(0.0, m.others_cpu_share), 0) << "% of the CPUs' time meanwhile\n\n";
  if (m.partial) {
    out << "  PARTIAL: interrupted after " << n << " of " << m.planned
        << (m.attached ? " pairs of windows" : " pairs of runs") << "\n";
  }
  out << pad("probe", 32, true) << pad(m.attached ? "hits/window" : "hits/run", 12) << "  how\n";
  for (std::size_t i = 0; i < m.probes.size(); ++i) {
    const auto& p = m.probes[i];
    out << pad(p.spec, 32, true)
        << pad(group_thousands(i < r.probe_hits.size() ? r.probe_hits[i] : 0), 12) << "  "
        << (p.via == Via::Int3 ? "int3, " : "") << p.how
        << (p.why_not_jump.empty() ? "" : "; no jump: " + p.why_not_jump) << "\n";
  }
}

void write_measured(std::ostream& out, const OverheadResult& r) {
  auto secs = [](double v) { return seconds(v); };
  auto ns = [](double v) { return human_ns(v); };
  // Appended, not "+" + std::string: GCC 12 warns wrongly (-Wrestrict, PR 105651).
  auto pct = [](double v) { return std::string(v >= 0 ? "+" : "").append(percent(v)); };
  auto times = [](double v) { return num(v, 3) + "x"; };
  auto rate = [](double v) { return group_thousands(v) + "/s"; };
  bool attached = r.m.attached;
  bool jumps = attached && r.m.reference == Reference::Jump;
  out << "\n"
      << pad(jumps      ? "reference windows"
             : attached ? "untraced window"
                        : "untraced",
             22, true)
      << pad("median", 12) << "  (min .. max)\n";
  line(out, "wall time", r.untraced_wall, secs);
  line(out, attached ? "CPU time, process" : "CPU time, command", r.untraced_cpu, secs);
  if (r.reference_rate) line(out, "events", *r.reference_rate, rate, "at the reference's probes");
  out << "  " << pad("event rate", 20, true) << pad(group_thousands(r.event_rate_per_s), 12)
      << "  hits per second"
      << (jumps      ? " as untraced, all probes"
          : attached ? " (of the traced window)"
                     : "")
      << ", " << group_thousands(r.event_rate_per_cpu_s) << " per CPU second"
      << (attached ? "" : " (" + group_thousands(static_cast<double>(r.hits)) + " hits per run)")
      << "\n";
  out << "\n"
      << pad(attached ? "traced windows" : "traced", 22, true) << pad("median", 12)
      << "  (min .. max)\n";
  line(out, "wall time", r.traced_wall, secs,
       "held " + num(r.held.median * 1e3, 0) + " ms more while the probes went in");
  line(out, attached ? "CPU time, process" : "CPU time, command", r.traced_cpu, secs);
  line(out, "CPU time, probecost", r.tracer_cpu, secs);
  if (r.traced_rate) line(out, "events", *r.traced_rate, rate, "at the reference's probes");
  if (r.slowdown) {
    line(out, "slowdown", *r.slowdown, times,
         jumps ? "the reference's rate of events over the traced windows'" : "");
  }
  line(out, "extra CPU", r.extra_cpu_percent, pct,
       jumps ? "for the same work (events at the reference's probes)" : "");
  std::string sides = "= probecost " + human_ns(r.tracer_ns_per_hit) + " + the " +
                      (attached ? "process " : "command ") + human_ns(r.command_ns_per_hit);
  const CalibrationRow* row = r.used_row();
  if (row && row->tracer_cpu_ns_per_hit > 0) {
    sides += " (calibration: " + human_ns(row->tracer_cpu_ns_per_hit) + " + " +
             human_ns(row->cpu_ns_per_hit - row->tracer_cpu_ns_per_hit) + ")";
  }
  line(out, "CPU per hit", r.cpu_ns_per_hit, ns, sides);
  if (r.wall_ns_per_hit) line(out, "wall time per hit", *r.wall_ns_per_hit, ns);
  if (r.cpu_samples == 0) return;  // too short a run for a look every 100 ms
  out << "  where: probecost ran on another CPU than the " << (attached ? "process" : "command")
      << " at " << r.cpu_samples_apart << " of " << r.cpu_samples
      << " looks (every 100 ms); it moved between CPUs "
      << num(r.tracer_migrations_per_1000_hits, 1) << " times per 1000 hits";
  if (!attached) {
    out << "; the command switched out " << num(r.command_switches_per_hit, 2)
        << " more times per hit";
  }
  out << "\n";
}

void write_predicted(std::ostream& out, const OverheadResult& r) {
  const Calibration& c = r.calibration;
  out << "\npredicted: the calibration's cost per hit x " << group_thousands(r.event_rate_per_s)
      << " hits/s (" << group_thousands(r.event_rate_per_cpu_s) << " per CPU second)\n";
  out << "calibration: " << c.source << "; " << age(c.age_s) << " old; " << c.machine
      << "; placement " << (c.placement.empty() ? "unknown" : c.placement)
      << (c.load_1min >= 0 ? "; load average " + num(c.load_1min, 2) + " then" : "")
      << (c.others_cpu_share >= 0
              ? ", others used " + num(100 * c.others_cpu_share, 0) + "% of the CPUs"
              : "")
      << "\n";
  out << pad("mechanism", 34, true) << pad("CPU/hit", 12) << pad("wall/hit", 12)
      << pad("extra CPU", 12) << pad("% of a CPU", 12) << pad("slowdown", 10) << "\n";
  for (const auto& p : r.predicted) {
    out << pad(p.mechanism, 34, true) << pad(human_ns(p.cpu_ns_per_hit), 12)
        << pad(human_ns(p.wall_ns_per_hit), 12) << pad(percent(p.cpu_percent), 12)
        << pad(percent(p.cpu_share_percent), 12) << pad(num(p.slowdown, 3), 10)
        << (r.is_used(p) ? "  <- used" : "") << "\n";
  }
  for (const auto& row : c.rows) {
    if (!row.problem.empty())
      out << "calibration WARNING " << row.mechanism << ": " << row.problem << "\n";
  }
  const Prediction* used = r.used();
  if (used && r.prediction_error_percent) {
    double e = *r.prediction_error_percent;
    out << "\nprediction error for " << r.mechanism << ": predicted ";
    if (r.error_basis == ErrorBasis::Slowdown) {
      out << num(used->slowdown, 3) + "x"
          << ", measured " << num(r.slowdown->median, 3) + "x";
    } else {
      out << percent(used->cpu_percent) << " extra CPU, measured "
          << percent(r.extra_cpu_percent.median);
    }
    out << ": " << signed_num(e, 1) << "%"
        << (std::fabs(e) <= 20 ? ", within 20%" : ", more than 20% off") << "\n";
  }
  if (!r.explanations.empty()) {
    out << "why:\n";
    for (const auto& e : r.explanations) out << "  - " << e << "\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
}

void write_text(std::ostream& out, const OverheadResult& r) {
  write_header(out, r);
  if (!r.pairs.empty()) {
    write_measured(out, r);
    write_predicted(out, r);
  }
  if (!r.cannot_know.empty()) {
    out << "\nwhat probecost cannot know here:\n";
    for (const auto& s : r.cannot_know) out << "  - " << s << "\n";
  }
  for (const auto& w : r.warnings) out << "\nWARNING: " << w;
  if (!r.warnings.empty()) out << "\n";
}

}  // namespace

void write_overhead(std::ostream& out, const OverheadResult& r, Format f) {
  if (f == Format::Json) {
    out << json_dump(overhead_json(r)) << "\n";
  } else {
    write_text(out, r);
  }
}

void write_cost_table(std::ostream& out, const std::vector<double>& costs_ns,
                      const std::vector<double>& rates, Format f) {
  if (costs_ns.size() == 1) return write_extrapolation(out, costs_ns[0], rates, f);
  if (f == Format::Json) {
    json costs = json::array();
    for (double c : costs_ns) {
      std::ostringstream one;
      write_extrapolation(one, c, rates, f);
      costs.push_back(json::parse(one.str()));
    }
    out << json_dump(json{{"costs", costs}}) << "\n";
    return;
  }
  for (std::size_t i = 0; i < costs_ns.size(); ++i) {
    std::ostringstream one;
    write_extrapolation(one, costs_ns[i], rates, f);
    std::string text = one.str();
    if (f == Format::Csv && i > 0) text = text.substr(text.find('\n') + 1);  // one header
    out << text;
  }
}

}  // namespace probecost
