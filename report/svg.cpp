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
      out += line(p.left, y, p.right, y, "guide") +
             text(p.right - 4, y - 5, g.label, "end", "guide-label");
    }
  }
  return out;
}

std::string open_svg(const std::string& id, const std::string& title, double height = kHeight) {
  return "<svg class=\"chart\" data-chart=\"" + escape(id) + "\" viewBox=\"0 0 " + num(kWidth) +
         " " + num(height) + "\" width=\"" + num(kWidth) + "\" height=\"" + num(height) +
         "\" role=\"img\" aria-label=\"" + escape(title) + "\">\n" +
         text(kWidth / 2, 20, title, "middle", "title");
}

std::string legend_entry(double x, double y, int index, const std::string& name) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y - 9) + "\" width=\"12\" height=\"12\" fill=\"" +
         color(index) + "\"/>\n" + text(x + 18, y + 1, name, "start");
}

}  // namespace

const char* color(int index) {
  static const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return palette[static_cast<unsigned>(index) % 10];
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
  Plot p{80, kWidth - 190, 40, kHeight - 60};
  Scale sx{c.x, p.left, p.right}, sy{c.y, p.bottom, p.top};
  std::string clip = "clip-" + c.id;
  std::ostringstream out;
  out << open_svg(c.id, c.title) << "<defs><clipPath id=\"" << escape(clip) << "\"><rect x=\""
      << num(p.left) << "\" y=\"" << num(p.top) << "\" width=\"" << num(p.right - p.left)
      << "\" height=\"" << num(p.bottom - p.top) << "\"/></clipPath></defs>\n"
      << x_axis(c.x, sx, p) << y_axis(c.y, sy, p) << guides(c.guides, sx, sy, p);
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    std::string d;
    for (const auto& [x, y] : s.points)
      d += (d.empty() ? "M" : " L") + num(sx(x)) + " " + num(sy(y));
    out << "<g clip-path=\"url(#" << escape(clip) << ")\"><path class=\"mark series\" d=\"" << d
        << "\" stroke=\"" << color(static_cast<int>(i)) << "\"/>\n";
    for (const auto& [x, y] : s.points) {
      out << "<circle class=\"mark\" cx=\"" << num(sx(x)) << "\" cy=\"" << num(sy(y))
          << "\" r=\"3.5\" fill=\"" << color(static_cast<int>(i)) << "\"/>\n";
    }
    out << "</g>\n" << legend_entry(p.right + 16, p.top + 10 + 20 * i, static_cast<int>(i), s.name);
  }
  out << "</svg>\n";
  return out.str();
}

std::string bar_chart(const BarChart& c) {
  double row = c.bars.size() > 12 ? 17 : 24;
  std::size_t longest = 0;
  for (const auto& b : c.bars) longest = std::max(longest, b.label.size());
  Plot p{std::min(420.0, 20 + 6.6 * longest), kWidth - 90, 40, 40 + row * c.bars.size()};
  double height = p.bottom + 50 + 20 * c.legend.size();
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
        << color(b.color) << "\"/>\n";
    if (b.lo < b.hi) out << line(sx(b.lo), y + h / 2, sx(b.hi), y + h / 2, "whisker");
    out << text(std::max(zero, x) + 6, y + h / 2 + 4, b.text.empty() ? fmt(b.value) : b.text,
                "start", "value");
  }
  for (std::size_t i = 0; i < c.legend.size(); ++i) {
    out << legend_entry(p.left, p.bottom + 50 + 20 * i, c.legend[i].second, c.legend[i].first);
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace probecost::svg
