#include "report/html.hpp"

#include <ctime>

#include "report/svg.hpp"

namespace probecost {

namespace {

using svg::escape;

const char* kStyle = R"(
body { font: 15px/1.45 system-ui, sans-serif; color: #222; margin: 2em auto; max-width: 1500px;
       padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 2.2em; border-bottom: 1px solid #ccc; }
.meta { color: #555; font-size: 0.9em; }
.pair { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
.pair > div { flex: 0 1 auto; overflow-x: auto; }
table.kv td { text-align: left; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.6em 0; }
caption { text-align: left; font-weight: 600; padding-bottom: 0.3em; caption-side: top; }
th, td { border: 1px solid #ddd; padding: 2px 7px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.then caption { color: #7a5c00; }
.problems { color: #b00; }
svg.chart { max-width: 100%; height: auto; display: block; margin: 1em 0; }
svg.chart text { font: 12px system-ui, sans-serif; fill: #333; }
svg.chart text.title { font-size: 15px; font-weight: 600; }
svg.chart text.label { font-size: 13px; }
svg.chart text.guide-label { fill: #a00; }
svg.chart .axis { stroke: #333; }
svg.chart .grid { stroke: #e8e8e8; }
svg.chart .guide { stroke: #a00; stroke-dasharray: 6 4; }
svg.chart .whisker { stroke: #000; stroke-width: 1.5; }
svg.chart path.series { fill: none; stroke-width: 2.2; }
)";

// After layout, each chart says how many of its marks the browser drew with a size, how many
// of its texts stick out of it (a title or a label cut off), how many line labels overlap one
// another and how many value labels a whisker crosses: the test (tests/cli/report_render.sh)
// reads these attributes from the rendered DOM.
const char* kCheckScript = R"(
function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}
// Each element's box on the page (rotated labels included), in the chart's own units.
function boxes(svg, selector) {
  var page = svg.getBoundingClientRect(), scale = svg.viewBox.baseVal.width / page.width;
  return Array.prototype.map.call(svg.querySelectorAll(selector), function (el) {
    var r = el.getBoundingClientRect();
    return {x: (r.left - page.left) * scale, y: (r.top - page.top) * scale,
            width: r.width * scale, height: r.height * scale};
  });
}
function pairs(a, b, same) {
  var n = 0;
  a.forEach(function (x, i) {
    b.forEach(function (y, j) { if ((!same || i < j) && overlaps(x, y)) n++; });
  });
  return n;
}
document.addEventListener('DOMContentLoaded', function () {
  var drawn = 0;
  document.querySelectorAll('svg.chart').forEach(function (svg) {
    var marks = 0;
    svg.querySelectorAll('.mark').forEach(function (el) {
      var b = el.getBBox();
      if (b.width > 0 || b.height > 0) marks++;
    });
    svg.setAttribute('data-marks-drawn', marks);
    if (marks > 0) { svg.setAttribute('data-drawn', 'yes'); drawn++; }
    var view = svg.viewBox.baseVal, outside = 0;
    boxes(svg, 'text').forEach(function (b) {
      if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > view.width + 0.5 ||
          b.y + b.height > view.height + 0.5) outside++;
    });
    svg.setAttribute('data-text-outside', outside);
    var labels = boxes(svg, 'text.end-label');
    svg.setAttribute('data-labels-overlapping', pairs(labels, labels, true));
    svg.setAttribute('data-whiskers-through-values',
                     pairs(boxes(svg, 'line.whisker'), boxes(svg, 'text.value'), false));
  });
  document.body.setAttribute('data-charts-drawn', drawn);
});
)";

std::string table_html(const Table& t, const char* cls) {
  std::string out = "<table class=\"" + std::string(cls) + "\"><caption>" + escape(t.caption) +
                    "</caption>\n<tr>";
  for (const auto& c : t.columns) out += "<th>" + escape(c) + "</th>";
  out += "</tr>\n";
  for (const auto& row : t.rows) {
    out += "<tr>";
    for (const auto& cell : row) out += "<td>" + escape(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

const Experiment* find(const std::vector<Experiment>& list, ExperimentId id) {
  for (const auto& e : list) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

std::vector<std::string> charts_of(const Experiment& e) {
  if (!e.id) return {};  // an experiment this version does not know: its table alone
  switch (*e.id) {
    case ExperimentId::Int3VsMarker:
      return {cost_chart(e), cpu_share_chart(e)};
    case ExperimentId::Scalability:
      return {scalability_chart(e)};
    case ExperimentId::MultiProbe:
      return {multi_probe_chart(e)};
    case ExperimentId::Markers:
      return {markers_disabled_chart(e), markers_enabled_chart(e)};
  }
  return {};
}

void section(std::ostream& out, const Experiment& e) {
  out << "<section id=\"" << escape(e.name) << "\">\n<h2>Seed " << escape(e.seeds) << ": "
      << escape(e.title) << "</h2>\n<p class=\"meta\">" << escape(e.command) << " &mdash; "
      << escape(e.when) << " &mdash; placement " << escape(e.placement)
      << " &mdash; 1-minute load average " << escape(e.load) << "</p>\n";
  for (const auto& chart : charts_of(e)) out << chart;
  out << "<div class=\"pair\"><div>\n" << table_html(e.today, "today") << "</div><div>\n";
  for (const auto& t : e.then) out << table_html(t, "then");
  out << "</div></div>\n<h3>What changed since, and why</h3>\n<ul>\n";
  for (const auto& n : e.notes) out << "<li>" << escape(n) << "</li>\n";
  out << "</ul>\n";
  for (const auto& p : e.problems)
    out << "<p class=\"problems\">WARNING: " << escape(p) << "</p>\n";
  out << "</section>\n";
}

void machine_section(std::ostream& out, const std::vector<Experiment>& list) {
  const Machine& m = list.front().machine;
  char tsc[32];
  std::snprintf(tsc, sizeof tsc, "%.3f GHz", m.tsc_hz / 1e9);
  out << "<section id=\"machine\"><h2>The machine</h2>\n<table class=\"kv\"><tr><th>CPU</th><td>"
      << escape(m.cpu_model) << "</td></tr><tr><th>kernel</th><td>" << escape(m.kernel)
      << "</td></tr><tr><th>TSC</th><td>" << tsc << "</td></tr><tr><th>CPUs</th><td>" << m.cpus
      << "</td></tr>\n";
  for (const auto& e : list) {
    out << "<tr><th>" << escape(e.name) << "</th><td>" << escape(e.when) << ", load "
        << escape(e.load) << ", " << escape(e.placement) << "</td></tr>\n";
  }
  out << "</table></section>\n";
}

}  // namespace

void write_html_report(std::ostream& out, const std::vector<Experiment>& list,
                       const std::vector<UserResult>& results) {
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      << "<title>probecost: the seeds' measurements on today's machine</title>\n<style>" << kStyle
      << "</style></head>\n<body>\n"
      << "<h1>What instrumenting a program costs: the seeds' measurements on today's "
         "machine</h1>\n<p>Each section redoes one of the measurements probecost grew from, "
         "with the seed's own figures beside today's and what changed since. Costs are per hit "
         "of a probe site, minus the same site unprobed.</p>\n";
  if (list.empty() && results.empty()) {
    out << "<p>No experiments.</p></body></html>\n";
    return;
  }
  if (!list.empty()) machine_section(out, list);
  for (ExperimentId id : {ExperimentId::Int3VsMarker, ExperimentId::Markers,
                          ExperimentId::Scalability, ExperimentId::MultiProbe}) {
    if (const Experiment* e = find(list, id)) section(out, *e);
  }
  for (std::size_t i = 0; i < results.size(); ++i) out << user_result_section(results[i], i + 1);
  out << "<script>" << kCheckScript << "</script>\n</body></html>\n";
}

}  // namespace probecost
