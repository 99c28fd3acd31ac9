// The report's charts, from the experiments' data.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "common/format.hpp"
#include "compare/mechanism.hpp"
#include "experiment/seeds.hpp"
#include "report/html.hpp"
#include "report/svg.hpp"

namespace probecost {

namespace {

std::string ns_label(double ns) {
  return human_ns(ns);
}

std::string percent_label(double p) {
  if (p >= 1) return group_thousands(p) + "%";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", p);
  return buf;
}

std::string rate_label(double r) {
  if (r >= 1e6) return group_thousands(r / 1e6) + "M/s";
  if (r >= 1e3) return group_thousands(r / 1e3) + "k/s";
  return group_thousands(r) + "/s";
}

double decade_below(double v) {
  return std::pow(10, std::floor(std::log10(v)));
}

double decade_above(double v) {
  return std::pow(10, std::ceil(std::log10(v)));
}

// Mechanisms of int3-vs-marker with a positive cost.
std::vector<MechanismCost> measured(const Experiment& e) {
  std::vector<MechanismCost> out;
  for (const auto& m : e.data.at("mechanisms")) {
    if (!m.value("skipped", "").empty()) continue;
    double v = m.at("per_hit_ns").get<double>();
    out.push_back({m.at("name").get<std::string>(), v, m.value("per_hit_ns_min", v),
                   m.value("per_hit_ns_max", v), m.at("cpu_ns_per_hit").get<double>()});
  }
  return out;
}

}  // namespace

std::string mechanism_color(const std::string& name) {
  switch (find_mechanism(name).value_or(MechanismId::Custom)) {
    case MechanismId::Baseline:
      return "#7f7f7f";
    case MechanismId::MarkerOff:
      return "#98df8a";
    case MechanismId::Marker:
      return "#2ca02c";
    case MechanismId::Int3Signal:
      return "#d62728";
    case MechanismId::Int3Ptrace:
      return "#08306b";
    case MechanismId::Int3PtraceFast:
      return "#1f77b4";
    case MechanismId::PtraceFloor:
      return "#17becf";
    case MechanismId::Jump:
      return "#9467bd";
    case MechanismId::Record:
      return "#c5b0d5";
    case MechanismId::Uprobe:
      return "#ff7f0e";
    case MechanismId::UprobeNop5:
      return "#bcbd22";
    case MechanismId::UprobePush:
      return "#8c564b";
    case MechanismId::Custom:
      break;
  }
  return "#e377c2";
}

std::string cost_chart(const std::string& id, const std::string& title,
                       const std::vector<MechanismCost>& costs) {
  svg::BarChart c{id, title, {}, {}, {}, {}};
  double lo = seeds::kLtt2006_ns, hi = seeds::kInt3_2006_ns;
  for (const auto& m : costs) {
    if (m.per_hit_ns <= 0) continue;
    lo = std::min(lo, m.per_hit_ns);
    hi = std::max(hi, m.per_hit_ns_max);
    c.bars.push_back({m.name, m.per_hit_ns, std::max(m.per_hit_ns_min, m.per_hit_ns / 100),
                      m.per_hit_ns_max, mechanism_color(m.name), ns_label(m.per_hit_ns)});
  }
  if (c.bars.empty()) return "";
  c.x = {"ns per hit, minus the baseline (median; whisker: min .. max of the runs)",
         decade_below(lo),
         decade_above(hi),
         true,
         ns_label,
         {}};
  c.guides = {{true, seeds::kInt3_2006_ns, "2006 int3: 2.01 µs"},
              {true, seeds::kLtt2006_ns, "2006 LTT: 220 ns"}};
  return svg::bar_chart(c);
}

std::string cpu_share_chart(const std::string& id, const std::string& title,
                            const std::vector<MechanismCost>& costs) {
  svg::LineChart c{id, title, {}, {}, {}, {}, true};
  constexpr double kFrom = 1e3, kTo = 1e8;
  double lo = 0, hi = 0;
  for (const auto& m : costs) {
    if (m.cpu_ns_per_hit <= 0) continue;
    svg::Series s{m.name, {}, mechanism_color(m.name)};
    for (double r = kFrom; r <= kTo * 1.001; r *= std::sqrt(10.0)) {
      s.points.push_back({r, r * m.cpu_ns_per_hit / 1e7});
    }
    lo = lo > 0 ? std::min(lo, s.points.front().second) : s.points.front().second;
    hi = std::max(hi, s.points.back().second);
    c.series.push_back(s);
  }
  if (c.series.empty()) return "";
  c.x = {"events per second", kFrom, kTo, true, rate_label, {}};
  // Every line whole: from the cheapest at the lowest rate to the dearest at the highest.
  c.y = {"share of one CPU",
         decade_below(std::min(lo, 1.0)),
         decade_above(std::max(hi, 100.0)),
         true,
         percent_label,
         {}};
  c.guides = {{true, 750'000, "750,000/s"}, {false, 100, "100% of a CPU"}};
  return svg::line_chart(c);
}

std::string cost_chart(const Experiment& e) {
  return cost_chart("cost-per-hit", "Cost per hit, ns (log scale), " + e.placement, measured(e));
}

std::string cpu_share_chart(const Experiment& e) {
  return cpu_share_chart("cpu-share", "CPU share against event rate (log-log)", measured(e));
}

std::string scalability_chart(const Experiment& e) {
  svg::LineChart c{
      "scalability",
      "Cost per hit as 1 to 8 threads hit one probe, all threads' hits, placement " + e.placement,
      {},
      {},
      {},
      {},
      true};
  double lo = 1e12, hi = 0;
  for (const auto& s : e.data.at("series")) {
    std::string name = s.at("mechanism").get<std::string>();
    svg::Series series{name, {}, mechanism_color(name)};
    for (const auto& p : s.at("points")) {
      double v = p.at("wall_ns_per_hit").get<double>();
      if (v <= 0) continue;
      series.points.push_back({p.at("threads").get<double>(), v});
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (!series.points.empty()) c.series.push_back(series);
  }
  if (c.series.empty()) return "";
  c.x = {"threads hitting the probe",
         1,
         8,
         true,
         [](double v) { return group_thousands(v); },
         {1, 2, 4, 8}};
  c.y = {"ns per hit (wall / all hits)", decade_below(lo), decade_above(hi), true, ns_label, {}};
  double cpus = e.data.value("cpus", 2);
  c.guides = {{true, cpus, "time-sliced beyond " + group_thousands(cpus) + " threads"}};
  return svg::line_chart(c);
}

std::string multi_probe_chart(const Experiment& e) {
  std::map<std::string, svg::Series> by_name;
  std::vector<std::string> order;
  double lo = 1e12, hi = 0;
  for (const auto& r : e.data.at("rows")) {
    if (r.at("spare_probes").get<double>() > 0) continue;
    std::string name = r.at("mechanism");
    double v = r.at("per_hit_ns").get<double>();
    if (v <= 0) continue;
    if (!by_name.count(name)) order.push_back(name);
    by_name[name].name = name;
    by_name[name].color = mechanism_color(name);
    by_name[name].points.push_back({r.at("handlers").get<double>(), v});
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (order.empty()) return "";
  svg::LineChart c{
      "multi-probe", "Cost per hit with 1 to 8 handlers on one address", {}, {}, {}, {}, true};
  for (const auto& n : order) c.series.push_back(by_name[n]);
  c.x = {"handlers on the probed address",
         1,
         8,
         true,
         [](double v) { return group_thousands(v); },
         {1, 2, 4, 8}};
  c.y = {"ns per hit", decade_below(lo), decade_above(hi), true, ns_label, {}};
  return svg::line_chart(c);
}

}  // namespace probecost
