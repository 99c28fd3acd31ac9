#pragma once
// `probecost report`: one self-contained HTML page (inline CSS, inline SVG, one inline script,
// nothing loaded from anywhere) with the experiments' charts, each experiment's table beside
// its seed's, what changed since, and the machine.
#include <ostream>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"
#include "report/results.hpp"

namespace probecost {

// The experiments' sections, then one per result of the user's own (compare, overhead).
void write_html_report(std::ostream& out, const std::vector<Experiment>& experiments,
                       const std::vector<UserResult>& results = {});

// One mechanism's cost per hit, as a chart draws it.
struct MechanismCost {
  std::string name;
  double per_hit_ns = 0, per_hit_ns_min = 0, per_hit_ns_max = 0;  // wall, minus the baseline
  double cpu_ns_per_hit = 0;
};

// The colour a mechanism has on every chart ("#rrggbb"); one for all it does not know.
std::string mechanism_color(const std::string& name);

// The charts (charts.cpp, markers_chart.cpp): SVG text, or "" without the data.
std::string cost_chart(const std::string& id, const std::string& title,
                       const std::vector<MechanismCost>& costs);
std::string cpu_share_chart(const std::string& id, const std::string& title,
                            const std::vector<MechanismCost>& costs);
std::string cost_chart(const Experiment& int3_vs_marker);
std::string cpu_share_chart(const Experiment& int3_vs_marker);
std::string scalability_chart(const Experiment& scalability);
std::string multi_probe_chart(const Experiment& multi_probe);
std::string markers_disabled_chart(const Experiment& markers);
std::string markers_enabled_chart(const Experiment& markers);

}  // namespace probecost
