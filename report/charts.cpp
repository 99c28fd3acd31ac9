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

// The colour of a mechanism named in an experiment's data.
int family_color(const std::string& name) {
  switch (find_mechanism(name).value_or(MechanismId::Custom)) {
    case MechanismId::Marker:
    case MechanismId::MarkerOff:
      return 2;
    case MechanismId::Int3Signal:
      return 1;
    case MechanismId::Uprobe:
    case MechanismId::UprobeNop5:
    case MechanismId::UprobePush:
      return 3;
    case MechanismId::Jump:
      return 4;
    default:
      return 0;  // the ptrace tracer
  }
}

// Mechanisms of int3-vs-marker with a positive cost.
std::vector<nlohmann::json> measured(const Experiment& e) {
  std::vector<nlohmann::json> out;
  for (const auto& m : e.data.at("mechanisms")) {
    if (m.value("skipped", "").empty() && m.at("per_hit_ns").get<double>() > 0) out.push_back(m);
  }
  return out;
}

}  // namespace

std::string cost_chart(const Experiment& e) {
  auto mechs = measured(e);
  if (mechs.empty()) return "";
  svg::BarChart c{"cost-per-hit", "Cost per hit, ns (log scale), " + e.placement, {}, {}, {}, {}};
  double lo = seeds::kLtt2006_ns, hi = seeds::kInt3_2006_ns;
  for (const auto& m : mechs) {
    double v = m.at("per_hit_ns").get<double>();
    lo = std::min(lo, v);
    hi = std::max(hi, m.value("per_hit_ns_max", v));
    c.bars.push_back({m.at("name").get<std::string>(), v,
                      std::max(m.value("per_hit_ns_min", v), v / 100), m.value("per_hit_ns_max", v),
                      family_color(m.at("name").get<std::string>()), ns_label(v)});
  }
  c.x = {"ns per hit, minus the baseline (median; whisker: min .. max of the runs)",
         decade_below(lo),
         decade_above(hi),
         true,
         ns_label,
         {}};
  c.guides = {{true, seeds::kInt3_2006_ns, "2006 int3: 2.01 µs"},
              {true, seeds::kLtt2006_ns, "2006 LTT: 220 ns"}};
  c.legend = {{"static marker", 2},
              {"int3 + signal handler in the process", 1},
              {"ptrace tracer", 0},
              {"jump patched in by the ptrace tracer", 4},
              {"kernel uprobe", 3}};
  return svg::bar_chart(c);
}

std::string cpu_share_chart(const Experiment& e) {
  auto mechs = measured(e);
  if (mechs.empty()) return "";
  svg::LineChart c{"cpu-share", "CPU share against event rate (log-log)", {}, {}, {}, {}};
  c.x = {"events per second", 1e3, 1e8, true, rate_label, {}};
  c.y = {"share of one CPU", 1e-3, 1e5, true, percent_label, {}};
  for (const auto& m : mechs) {
    double cost = m.at("cpu_ns_per_hit").get<double>();
    if (cost <= 0) continue;
    svg::Series s{m.at("name").get<std::string>(), {}};
    for (double r = 1e3; r <= 1e8 * 1.001; r *= std::sqrt(10.0))
      s.points.push_back({r, r * cost / 1e7});
    c.series.push_back(s);
  }
  c.guides = {{true, 750'000, "750,000/s"}, {false, 100, "100% of a CPU"}};
  return svg::line_chart(c);
}

std::string scalability_chart(const Experiment& e) {
  svg::LineChart c{"scalability",
                   "Cost per hit, all threads, as threads hit one probe (" + e.placement + ")",
                   {},
                   {},
                   {},
                   {}};
  double lo = 1e12, hi = 0;
  for (const auto& s : e.data.at("series")) {
    svg::Series series{s.at("mechanism").get<std::string>(), {}};
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
    by_name[name].points.push_back({r.at("handlers").get<double>(), v});
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (order.empty()) return "";
  svg::LineChart c{
      "multi-probe", "Cost per hit with 1 to 8 handlers on one address", {}, {}, {}, {}};
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
