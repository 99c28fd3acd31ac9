#pragma once
// `probecost report`: one self-contained HTML page (inline CSS, inline SVG, one inline script,
// nothing loaded from anywhere) with the experiments' charts, each experiment's table beside
// its seed's, what changed since, and the machine.
#include <ostream>
#include <string>
#include <vector>

#include "experiment/experiment.hpp"

namespace probecost {

void write_html_report(std::ostream& out, const std::vector<Experiment>& experiments);

// The charts (charts.cpp, markers_chart.cpp): SVG text, or "" without the data.
std::string cost_chart(const Experiment& int3_vs_marker);
std::string cpu_share_chart(const Experiment& int3_vs_marker);
std::string scalability_chart(const Experiment& scalability);
std::string multi_probe_chart(const Experiment& multi_probe);
std::string markers_disabled_chart(const Experiment& markers);
std::string markers_enabled_chart(const Experiment& markers);

}  // namespace probecost
