// The markers experiment's charts: what a disabled and an enabled marker add to a loop, today
// and on the seeds' Pentium 4.
#include <algorithm>
#include <cstdio>

#include "report/html.hpp"
#include "report/svg.hpp"

namespace probecost {

namespace {

// Today's markers in the marker's colour on every chart; the seeds' Pentium 4 figures in grey.
const std::string kToday = "#2ca02c", kThen = "#7f7f7f";

double added(const Experiment& e, const std::string& variant, int args, bool on) {
  for (const auto& r : e.data.at("rows")) {
    if (r.at("variant") == variant && r.at("args") == args && r.at("enabled") == on) {
      return r.at("empty").at("added_cycles").get<double>();
    }
  }
  return 0;
}

std::string cycles(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f", v);
  return buf;
}

svg::Axis linear_axis(const std::vector<svg::Bar>& bars, const std::string& label) {
  double lo = -1, hi = 1;
  for (const auto& b : bars) {
    lo = std::min(lo, b.value);
    hi = std::max(hi, b.value);
  }
  return {label,
          lo * 1.15,
          hi * 1.15,
          false,
          [](double v) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.1f", v);
            return std::string(buf);
          },
          {}};
}

svg::Bar today(const Experiment& e, const std::string& label, const std::string& variant, int args,
               bool on) {
  double v = added(e, variant, args, on);
  return {label, v, 0, 0, kToday, cycles(v)};
}

}  // namespace

std::string markers_disabled_chart(const Experiment& e) {
  svg::BarChart c{"markers-disabled",
                  "A disabled marker: cycles added per loop, empty loop",
                  {},
                  {today(e, "flag: load, test, branch", "flag", 1, false),
                   {"P4 2007: \"generic\" load, test, branch", 1.17, 0, 0, kThen, "+1.17"},
                   today(e, "immediate: movb $0, test, branch", "immediate", 1, false),
                   {"P4 2007: \"optimized\" immediate", 2.50, 0, 0, kThen, "+2.50"},
                   today(e, "static-key: 5-byte NOP", "static-key", 1, false),
                   today(e, "nop-call, 3 arguments set up", "nop-call", 3, false),
                   today(e, "nop-call, 6 arguments set up", "nop-call", 6, false),
                   {"P4 2007: NOP site, 4 arguments (seed 002)", 8.48, 0, 0, kThen, "+8.48"},
                   {"P4 2007: load-immediate site (seed 002)", -2.00, 0, 0, kThen, "-2.00"}},
                  {},
                  {{"today (TSC cycles)", kToday}, {"Pentium 4, 2007 (core cycles)", kThen}}};
  c.x = linear_axis(c.bars, "cycles added per loop over the same site without a marker");
  return svg::bar_chart(c);
}

std::string markers_enabled_chart(const Experiment& e) {
  svg::BarChart c{"markers-enabled",
                  "An enabled marker: cycles added per loop, empty loop",
                  {},
                  {today(e, "flag, 0 arguments", "flag", 0, true),
                   today(e, "flag, 1 argument", "flag", 1, true),
                   today(e, "flag, 3 arguments", "flag", 3, true),
                   today(e, "flag, 6 arguments", "flag", 6, true),
                   today(e, "immediate, 1 argument", "immediate", 1, true),
                   today(e, "static-key, 1 argument", "static-key", 1, true),
                   today(e, "nop-call, 1 argument", "nop-call", 1, true),
                   {"P4 2007: register arguments", 40.08, 0, 0, kThen, "+40.08"},
                   {"P4 2007: variable arguments", 48.11, 0, 0, kThen, "+48.11"},
                   {"P4 2007: format string parsed", 92.22, 0, 0, kThen, "+92.22"}},
                  {},
                  {{"today: record {TSC, id, args} in a ring (TSC cycles)", kToday},
                   {"Pentium 4, 2007: empty probe (core cycles)", kThen}}};
  c.x = linear_axis(
      c.bars, "cycles added per loop (today: over the bare site; 2007: over the disabled loop)");
  return svg::bar_chart(c);
}

}  // namespace probecost
