// The user's compare and overhead results as sections of the report: compare's cost per hit and
// CPU share charts (the int3-vs-marker experiment's, with the same colours) and its table;
// overhead's predictions against what it measured.
#include "report/results.hpp"

#include <algorithm>
#include <cmath>

#include "common/format.hpp"
#include "compare/mechanism.hpp"
#include "report/html.hpp"
#include "report/svg.hpp"

namespace probecost {

using nlohmann::json;

JsonKind json_kind(const json& j) {
  if (!j.is_object()) return JsonKind::Unknown;
  if (j.contains("experiments")) return JsonKind::Experiments;
  if (j.contains("today") && j.contains("name")) return JsonKind::Experiment;
  if (j.contains("predicted") && j.contains("measured")) return JsonKind::Overhead;
  if (j.contains("mechanisms") && j.contains("config")) return JsonKind::Compare;
  return JsonKind::Unknown;
}

namespace {

using svg::escape;

std::string row(const std::vector<std::string>& cells, const char* tag = "td") {
  std::string out = "<tr>";
  for (const auto& c : cells) out += std::string("<") + tag + ">" + escape(c) + "</" + tag + ">";
  return out + "</tr>\n";
}

std::string table(const std::string& caption, const std::vector<std::string>& columns,
                  const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table class=\"today\"><caption>" + escape(caption) + "</caption>\n";
  out += row(columns, "th");
  for (const auto& r : rows) out += row(r);
  return out + "</table>\n";
}

std::string range(const json& s, double scale = 1) {
  return num(s.at("min").get<double>() * scale, 1) + " .. " +
         num(s.at("max").get<double>() * scale, 1);
}

std::vector<MechanismCost> compare_costs(const json& doc) {
  std::vector<MechanismCost> out;
  for (const auto& m : doc.at("mechanisms")) {
    bool baseline = find_mechanism(m.at("name").get<std::string>()) == MechanismId::Baseline;
    if (baseline || !m.value("skipped", json()).is_null()) continue;
    const json& ns = m.at("per_hit_ns");
    out.push_back({m.at("name").get<std::string>(), ns.at("median").get<double>(),
                   ns.at("min").get<double>(), ns.at("max").get<double>(),
                   m.at("cpu_ns_per_hit").at("median").get<double>()});
  }
  return out;
}

std::string compare_section(const UserResult& r, std::size_t index) {
  const json& d = r.doc;
  const json& config = d.at("config");
  const json& machine = d.at("machine");
  std::string id = "compare-" + std::to_string(index);
  std::string placement = config.value("placement", "?");
  auto costs = compare_costs(d);
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : d.at("mechanisms")) {
    if (!m.value("skipped", json()).is_null()) {
      rows.push_back({m.at("name"), "skipped", m.at("skipped"), "", ""});
      continue;
    }
    rows.push_back({m.at("name"), group_thousands(m.at("hits").get<double>()),
                    num(m.at("per_hit_ns").at("median").get<double>(), 1),
                    range(m.at("per_hit_ns")),
                    num(m.at("cpu_ns_per_hit").at("median").get<double>(), 1)});
  }
  return "<section id=\"" + id + "\">\n<h2>Your compare: " + escape(r.source) +
         "</h2>\n<p class=\"meta\">" + escape(machine.value("cpu_model", "")) + ", " +
         escape(machine.value("kernel", "")) + " &mdash; placement " + escape(placement) +
         " &mdash; " + std::to_string(config.value("repeat", 0)) + " runs of each, " +
         std::to_string(config.value("threads", 1)) + " thread(s)</p>\n" +
         cost_chart(id + "-cost", "Your compare: cost per hit, ns (log scale), " + placement,
                    costs) +
         cpu_share_chart(id + "-share", "Your compare: CPU share against event rate (log-log)",
                         costs) +
         table("ns per hit minus the baseline's, median of the runs; CPU = tracee + tracer",
               {"mechanism", "hits", "ns/hit", "(min .. max)", "CPU ns/hit"}, rows) +
         "</section>\n";
}

// What the workload's rate makes of each mechanism: the slowdown predicted, as the time it
// adds (log scale), and the measured one as a guide; attached with no count of the work, the
// extra CPU instead.
std::string overhead_chart(const json& d, const std::string& id) {
  bool slowdown = !d.at("measured").at("slowdown").is_null();
  auto added = [&](const json& p) {
    return slowdown ? 100 * (p.at("slowdown").get<double>() - 1)
                    : p.at("cpu_percent").get<double>();
  };
  svg::BarChart c{id, "", {}, {}, {}, {}};
  c.title = std::string(slowdown ? "Time added" : "Extra CPU") + " at this workload's " +
            group_thousands(d.at("event_rate_per_s").get<double>()) +
            " events/s, predicted for each mechanism (log scale)";
  double lo = 0, hi = 0;
  for (const auto& p : d.at("predicted")) {
    double v = added(p);
    if (v <= 0) continue;
    std::string name = p.at("mechanism");
    lo = lo > 0 ? std::min(lo, v) : v;
    hi = std::max(hi, v);
    c.bars.push_back({name, v, 0, 0, mechanism_color(name), percent(v)});
  }
  if (c.bars.empty()) return "";
  double measured = slowdown
                        ? 100 * (d.at("measured").at("slowdown").at("median").get<double>() - 1)
                        : d.at("measured").at("extra_cpu_percent").at("median").get<double>();
  if (measured > 0) {
    lo = std::min(lo, measured);
    hi = std::max(hi, measured);
    c.guides.push_back(
        {true, measured, "measured (" + d.value("mechanism", "") + "): " + percent(measured)});
  }
  c.x = {slowdown ? "time added: (slowdown - 1) x 100%" : "extra CPU over the untraced CPU",
         std::pow(10, std::floor(std::log10(lo))),
         std::pow(10, std::ceil(std::log10(hi))),
         true,
         [](double v) { return percent(v); },
         {}};
  return svg::bar_chart(c);
}

std::string overhead_section(const UserResult& r, std::size_t index) {
  const json& d = r.doc;
  const json& m = d.at("measured");
  std::string id = "overhead-" + std::to_string(index);
  std::string what = d.at("pid").is_null() ? "the command" : "process " + d.at("pid").dump();
  std::vector<std::vector<std::string>> measured = {
      {"event rate", group_thousands(d.at("event_rate_per_s").get<double>()) + "/s", ""},
      {"extra CPU", num(m.at("extra_cpu_percent").at("median").get<double>(), 1) + "%",
       range(m.at("extra_cpu_percent"))},
      {"CPU per hit", human_ns(m.at("cpu_ns_per_hit").at("median").get<double>()), ""}};
  if (!m.at("slowdown").is_null()) {
    measured.insert(measured.begin() + 1, {"slowdown", num(m.at("slowdown").at("median"), 3) + "x",
                                           range(m.at("slowdown"))});
  }
  std::vector<std::vector<std::string>> predicted;
  for (const auto& p : d.at("predicted")) {
    predicted.push_back({p.at("mechanism"), human_ns(p.at("cpu_ns_per_hit")),
                         percent(p.at("cpu_percent")),
                         num(p.at("slowdown").get<double>(), 3) + "x"});
  }
  std::string error = d.at("prediction_error_percent").is_null()
                          ? "no prediction error: nothing to compare"
                          : "prediction error for " + d.value("mechanism", "") + ": " +
                                signed_num(d.at("prediction_error_percent").get<double>(), 1) +
                                "% (" + d.value("prediction_error_basis", "") + ")";
  return "<section id=\"" + id + "\">\n<h2>Your overhead: " + escape(r.source) +
         "</h2>\n<p class=\"meta\">" + escape(what) + " &mdash; probes via " +
         escape(d.value("via", "")) + ", mechanism used " + escape(d.value("mechanism", "")) +
         " &mdash; " + escape(error) + "</p>\n" + overhead_chart(d, id + "-chart") +
         "<div class=\"pair\"><div>\n" +
         table("measured: median (min .. max) over the pairs", {"figure", "median", "(min .. max)"},
               measured) +
         "</div><div>\n" +
         table("predicted: the calibration's cost per hit x the rate",
               {"mechanism", "CPU/hit", "extra CPU", "slowdown"}, predicted) +
         "</div></div>\n</section>\n";
}

}  // namespace

std::string user_result_section(const UserResult& r, std::size_t index) {
  if (r.kind == JsonKind::Compare) return compare_section(r, index);
  if (r.kind == JsonKind::Overhead) return overhead_section(r, index);
  return "";
}

}  // namespace probecost
