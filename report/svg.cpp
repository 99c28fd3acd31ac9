#include "report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace probecost::svg {

namespace {

constexpr double kWidth = 820, kHeight = 400;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string default_format(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Maps a value onto [from, to] pixels along an axis.
struct Scale {
  const Axis& axis;
  double from, to;
  double operator()(double v) const {
    double lo = axis.log ? std::log10(axis.min) : axis.min;
    double hi = axis.log ? std::log10(axis.max) : axis.max;
    double x = axis.log ? std::log10(std::max(v, axis.min)) : v;
    x = std::clamp(x, lo, hi);
    return from + (x - lo) / (hi - lo) * (to - from);
  }
};

std::vector<double> ticks(const Axis& a) {
  if (!a.ticks.empty()) return a.ticks;
  std::vector<double> t;
  if (a.log) {
    for (double d = std::pow(10, std::ceil(std::log10(a.min) - 1e-9)); d <= a.max * (1 + 1e-9);
         d *= 10) {
      t.push_back(d);
    }
  } else {
    // A round step (1, 2 or 5 x 10^k) giving about five ticks, including 0 when in range.
    double raw = (a.max - a.min) / 5, mag = std::pow(10, std::floor(std::log10(raw)));
    double step = raw / mag < 1.5   ? mag
                  : raw / mag < 3.5 ? 2 * mag
                  : raw / mag < 7.5 ? 5 * mag
                                    : 10 * mag;
    for (double v = std::ceil(a.min / step) * step; v <= a.max + step * 1e-9; v += step) {
      t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
    }
  }
  return t;
}

struct Plot {
  double left, right, top, bottom;
};

std::string text(double x, double y, const std::string& s, const char* anchor = "middle",
                 const char* cls = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\" class=\"" +
         cls + "\">" + escape(s) + "</text>\n";
}

std::string line(double x1, double y1, double x2, double y2, const char* cls) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\" class=\"" + cls + "\"/>\n";
}

std::string x_axis(const Axis& a, const Scale& sx, const Plot& p) {
  std::string out = line(p.left, p.bottom, p.right, p.bottom, "axis");
  auto fmt = a.format ? a.format : default_format;
  for (double t : ticks(a)) {
    double x = sx(t);
    out += line(x, p.top, x, p.bottom, "grid") + text(x, p.bottom + 16, fmt(t));
  }
  return out + text((p.left + p.right) / 2, p.bottom + 36, a.label, "middle", "label");
}

std::string y_axis(const Axis& a, const Scale& sy, const Plot& p) {
  std::string out = line(p.left, p.top, p.left, p.bottom, "axis");
  auto fmt = a.format ? a.format : default_format;
  for (double t : ticks(a)) {
    double y = sy(t);
    out += line(p.left, y, p.right, y, "grid") + text(p.left - 6, y + 4, fmt(t), "end");
  }
  return out + "<text transform=\"translate(16," + num((p.top + p.bottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">" + escape(a.label) + "</text>\n";
}

std::string guides(const std::vector<Guide>& gs, const Scale& sx, const Scale& sy, const Plot& p) {
  std::string out;
  for (const auto& g : gs) {
    if (g.vertical) {
      double x = sx(g.value);
      out += line(x, p.top, x, p.bottom, "guide") +
             text(x + 4, p.top + 12, g.label, "start", "guide-label");
    } else {
      double y = sy(g.value);
      // Named at the left: lines rising with x (a share against a rate) end on the right.
      out += line(p.left, y, p.right, y, "guide") +
             text(p.left + 4, y - 5, g.label, "start", "guide-label");
    }
  }
  return out;
}

// A 15 px title fits about this many characters across the chart; a longer one takes two lines.
constexpr std::size_t kTitleChars = 88;
constexpr double kTitleLine = 18;

// The extra height a title's second (third...) line takes.
double title_extra(const std::string& title) {
  return kTitleLine * static_cast<double>(wrap(title, kTitleChars).size() - 1);
}

std::string open_svg(const std::string& id, const std::string& title, double height) {
  std::string out = "<svg class=\"chart\" data-chart=\"" + escape(id) + "\" viewBox=\"0 0 " +
                    num(kWidth) + " " + num(height) + "\" width=\"" + num(kWidth) + "\" height=\"" +
                    num(height) + "\" role=\"img\" aria-label=\"" + escape(title) + "\">\n";
  auto lines = wrap(title, kTitleChars);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out += text(kWidth / 2, 20 + kTitleLine * static_cast<double>(i), lines[i], "middle", "title");
  }
  return out;
}

std::string legend_entry(double x, double y, const std::string& colour, const std::string& name) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y - 9) + "\" width=\"12\" height=\"12\" fill=\"" +
         colour + "\"/>\n" + text(x + 18, y + 1, name, "start");
}

std::string series_colour(const Series& s, std::size_t index) {
  return s.color.empty() ? color(static_cast<int>(index)) : s.color;
}

// Each line's name at its right end, in its colour; a thin leader where the name had to move
// away from the line's end to keep clear of another.
std::string end_labels(const LineChart& c, const Scale& sx, const Scale& sy, const Plot& p) {
  std::vector<double> wanted;
  for (const auto& s : c.series) {
    wanted.push_back(s.points.empty() ? p.bottom : sy(s.points.back().second));
  }
  std::vector<double> at = spread_apart(wanted, 16, p.top, p.bottom);  // a 12 px line is ~15 px
  std::string out;
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    if (s.points.empty()) continue;
    double x = sx(s.points.back().first);
    std::string colour = series_colour(s, i);
    if (std::fabs(at[i] - wanted[i]) > 2) {
      out += "<line x1=\"" + num(x) + "\" y1=\"" + num(wanted[i]) + "\" x2=\"" + num(x + 8) +
             "\" y2=\"" + num(at[i]) + "\" stroke=\"" + colour + "\" class=\"leader\"/>\n";
    }
    out += "<text x=\"" + num(x + 10) + "\" y=\"" + num(at[i] + 4) +
           "\" text-anchor=\"start\" class=\"end-label\" fill=\"" + colour + "\">" +
           escape(s.name) + "</text>\n";
  }
  return out;
}

double longest(const std::vector<Series>& series) {
  std::size_t n = 0;
  for (const auto& s : series) n = std::max(n, s.name.size());
  return static_cast<double>(n);
}

}  // namespace

const char* color(int index) {
  static const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return palette[static_cast<unsigned>(index) % 10];
}

std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string line;
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::vector<double> spread_apart(const std::vector<double>& wanted, double gap, double top,
                                 double bottom) {
  std::vector<std::size_t> order(wanted.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return wanted[a] < wanted[b]; });
  std::vector<double> at(wanted.size());
  // Down the page: each at least `gap` below the one above; then up from the bottom: each at
  // least `gap` above the one below, so the last stays within the plot.
  double last = top - gap;
  for (std::size_t i : order) last = at[i] = std::max(wanted[i], last + gap);
  double next = bottom + gap;
  for (auto i = order.rbegin(); i != order.rend(); ++i) {
    next = at[*i] = std::min(at[*i], next - gap);
  }
  return at;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string line_chart(const LineChart& c) {
  double extra = title_extra(c.title);
  // Room on the right for the legend, or for the names at the lines' ends (~7 px a character).
  double right = c.end_labels ? kWidth - 30 - 7 * longest(c.series) : kWidth - 190;
  Plot p{80, right, 40 + extra, kHeight - 60 + extra};
  Scale sx{c.x, p.left, p.right}, sy{c.y, p.bottom, p.top};
  std::string clip = "clip-" + c.id;
  std::ostringstream out;
  out << open_svg(c.id, c.title, kHeight + extra) << "<defs><clipPath id=\"" << escape(clip)
      << "\"><rect x=\"" << num(p.left) << "\" y=\"" << num(p.top) << "\" width=\""
      << num(p.right - p.left) << "\" height=\"" << num(p.bottom - p.top)
      << "\"/></clipPath></defs>\n"
      << x_axis(c.x, sx, p) << y_axis(c.y, sy, p) << guides(c.guides, sx, sy, p);
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    std::string colour = series_colour(s, i);
    std::string d;
    for (const auto& [x, y] : s.points)
      d += (d.empty() ? "M" : " L") + num(sx(x)) + " " + num(sy(y));
    out << "<g clip-path=\"url(#" << escape(clip) << ")\"><path class=\"mark series\" d=\"" << d
        << "\" stroke=\"" << colour << "\"/>\n";
    for (const auto& [x, y] : s.points) {
      out << "<circle class=\"mark\" cx=\"" << num(sx(x)) << "\" cy=\"" << num(sy(y))
          << "\" r=\"3.5\" fill=\"" << colour << "\"/>\n";
    }
    out << "</g>\n";
    if (!c.end_labels) {
      out << legend_entry(p.right + 16, p.top + 10 + 20 * static_cast<double>(i), colour, s.name);
    }
  }
  if (c.end_labels) out << end_labels(c, sx, sy, p);
  out << "</svg>\n";
  return out.str();
}

std::string bar_chart(const BarChart& c) {
  double row = c.bars.size() > 12 ? 17 : 24;
  std::size_t longest = 0;
  for (const auto& b : c.bars) longest = std::max(longest, b.label.size());
  double extra = title_extra(c.title);
  Plot p{std::min(420.0, 20 + 6.6 * static_cast<double>(longest)), kWidth - 90, 40 + extra,
         40 + extra + row * static_cast<double>(c.bars.size())};
  double height = p.bottom + 50 + 20 * static_cast<double>(c.legend.size());
  Scale sx{c.x, p.left, p.right};
  Scale sy{Axis{"", 0, 1, false, nullptr, {}}, p.bottom, p.top};
  auto fmt = c.x.format ? c.x.format : default_format;
  std::ostringstream out;
  out << open_svg(c.id, c.title, height) << x_axis(c.x, sx, p) << guides(c.guides, sx, sy, p);
  double zero = sx(c.x.log ? c.x.min : std::clamp(0.0, c.x.min, c.x.max));
  for (std::size_t i = 0; i < c.bars.size(); ++i) {
    const Bar& b = c.bars[i];
    double y = p.top + row * i + 3, h = row - 6, x = sx(b.value);
    out << text(p.left - 8, y + h / 2 + 4, b.label, "end") << "<rect class=\"mark bar\" x=\""
        << num(std::min(zero, x)) << "\" y=\"" << num(y) << "\" width=\""
        << num(std::max(1.0, std::fabs(x - zero))) << "\" height=\"" << num(h) << "\" fill=\""
        << b.color << "\"/>\n";
    double end = std::max(zero, x);
    if (b.lo < b.hi) {
      out << line(sx(b.lo), y + h / 2, sx(b.hi), y + h / 2, "whisker");
      end = std::max(end, sx(b.hi));  // the value is written past the whisker, not through it
    }
    out << text(end + 6, y + h / 2 + 4, b.text.empty() ? fmt(b.value) : b.text, "start", "value");
  }
  for (std::size_t i = 0; i < c.legend.size(); ++i) {
    out << legend_entry(p.left, p.bottom + 50 + 20 * static_cast<double>(i), c.legend[i].second,
                        c.legend[i].first);
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace probecost::svg
