#pragma once
// Charts as inline SVG, written out as text: a line chart and a horizontal bar chart, each on a
// linear or a log axis. Every drawn datum (a line, a point, a bar) has class "mark", so a
// browser can check after layout that the chart was really drawn (see html.cpp).
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace probecost::svg {

struct Axis {
  std::string label;
  double min = 1, max = 10;
  bool log = true;
  std::function<std::string(double)> format;  // tick labels; default: %g
  std::vector<double> ticks;                  // empty: decades (log) or 5 steps (linear)
};

// A reference line across the plot: at x = value (vertical) or y = value.
struct Guide {
  bool vertical = true;
  double value = 0;
  std::string label;
};

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn joined in order
  std::string color;                              // "#rrggbb"; empty: the palette's, by index
};

struct LineChart {
  std::string id, title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<Guide> guides;
  // Each line named at its right end (moved apart where lines end close together) instead of
  // in a legend: for lines that lie near each other, a legend's colours alone do not tell them
  // apart.
  bool end_labels = false;
};

struct Bar {
  std::string label;
  double value = 0;
  double lo = 0, hi = 0;  // a whisker from lo to hi when lo < hi
  std::string color;      // "#rrggbb"
  std::string text;       // printed past the bar's end and its whisker; default: the axis format
};

struct BarChart {
  std::string id, title;
  Axis x;
  std::vector<Bar> bars;
  std::vector<Guide> guides;
  std::vector<std::pair<std::string, std::string>> legend;  // (name, colour)
};

std::string line_chart(const LineChart& c);
std::string bar_chart(const BarChart& c);
std::string escape(const std::string& text);
const char* color(int index);
// A title as lines of at most `width` characters, broken at spaces.
std::vector<std::string> wrap(const std::string& text, std::size_t width);
// Label positions (y, in pixels) as close to `wanted` as they can be while at least `gap`
// apart, in the order given by `wanted` and within [top, bottom] when they fit.
std::vector<double> spread_apart(const std::vector<double>& wanted, double gap, double top,
                                 double bottom);

}  // namespace probecost::svg
