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
};

struct LineChart {
  std::string id, title;
  Axis x, y;
  std::vector<Series> series;
  std::vector<Guide> guides;
};

struct Bar {
  std::string label;
  double value = 0;
  double lo = 0, hi = 0;  // a whisker from lo to hi when lo < hi
  int color = 0;          // index into the palette
  std::string text;       // printed at the bar's end; default: the axis format of value
};

struct BarChart {
  std::string id, title;
  Axis x;
  std::vector<Bar> bars;
  std::vector<Guide> guides;
  std::vector<std::pair<std::string, int>> legend;  // (name, color)
};

std::string line_chart(const LineChart& c);
std::string bar_chart(const BarChart& c);
std::string escape(const std::string& text);
const char* color(int index);

}  // namespace probecost::svg
