// The report's charts on fixtures: one colour per mechanism on every chart, titles that wrap,
// labels kept apart (issue 19 §4). No browser: tests/cli/report_render.sh renders them.
#include <gtest/gtest.h>

#include <set>

#include "compare/mechanism.hpp"
#include "report/html.hpp"
#include "report/svg.hpp"

using namespace probecost;

TEST(ReportCharts, EveryMechanismHasAColourOfItsOwn) {
  std::set<std::string> colours;
  for (const auto& m : all_mechanisms()) colours.insert(mechanism_color(m.name));
  EXPECT_EQ(colours.size(), all_mechanisms().size());
  EXPECT_EQ(mechanism_color("no-such-mechanism"), mechanism_color("another-one"));
}

TEST(ReportCharts, AMechanismHasTheSameColourInTheBarAndTheLineChart) {
  std::vector<MechanismCost> costs = {{"marker", 8, 7, 9, 8}, {"jump", 10, 9, 12, 11}};
  std::string bars = cost_chart("c", "bars", costs);
  std::string lines = cpu_share_chart("s", "lines", costs);
  for (const char* name : {"marker", "jump"}) {
    std::string colour = mechanism_color(name);
    EXPECT_NE(bars.find("fill=\"" + colour + "\""), std::string::npos) << name;
    EXPECT_NE(lines.find("stroke=\"" + colour + "\""), std::string::npos) << name;
  }
  // Named at the lines' ends, not in a legend of colours.
  EXPECT_NE(lines.find("class=\"end-label\" fill=\"" + mechanism_color("jump") + "\">jump<"),
            std::string::npos)
      << lines;
}

TEST(ReportCharts, TheShareChartsRangeHoldsEveryLineWhole) {
  // 1 ns and 100 µs per hit, from 1,000 to 10^8 events/s: 0.0001% to 1,000,000%, the axis's
  // first and last ticks.
  std::string svg = cpu_share_chart("s", "t", {{"marker", 1, 1, 1, 1}, {"uprobe", 1, 1, 1, 1e5}});
  EXPECT_NE(svg.find(">0.0001%<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">0.00001%<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">1,000,000%<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">10,000,000%<"), std::string::npos) << svg;
}

TEST(ReportCharts, ALongTitleWrapsAtASpace) {
  auto lines = svg::wrap("one two three four", 9);
  EXPECT_EQ(lines, (std::vector<std::string>{"one two", "three", "four"}));
  EXPECT_EQ(svg::wrap("short", 80), std::vector<std::string>{"short"});
}

TEST(ReportCharts, LabelsAreMovedApartAndStayInThePlot) {
  // Three lines ending at one point: the labels go down from it, 16 px apart.
  EXPECT_EQ(svg::spread_apart({100, 100, 101}, 16, 40, 340), (std::vector<double>{100, 116, 132}));
  // At the bottom they are pushed up instead, in their order.
  EXPECT_EQ(svg::spread_apart({338, 335}, 16, 40, 340), (std::vector<double>{340, 324}));
  // Far apart, they stay where they are.
  EXPECT_EQ(svg::spread_apart({300, 50}, 16, 40, 340), (std::vector<double>{300, 50}));
}

TEST(ReportCharts, AValueIsWrittenPastItsWhisker) {
  svg::BarChart c{"b", "t", {"x", 1, 1000, true, nullptr, {}}, {}, {}, {}};
  c.bars.push_back({"m", 10, 5, 500, "#000000", "10 ns"});
  std::string out = svg::bar_chart(c);
  // The whisker ends at 500 (x = 20 + 6.6 + (log 500 / 3) x plot width); the value starts 6 px on.
  auto whisker = out.find("class=\"whisker\"");
  ASSERT_NE(whisker, std::string::npos);
  auto x2 = out.rfind("x2=\"", whisker);
  double end = std::stod(out.substr(x2 + 4));
  auto value = out.find("class=\"value\"");
  auto x = out.rfind("<text x=\"", value);
  EXPECT_DOUBLE_EQ(std::stod(out.substr(x + 9)), std::round((end + 6) * 10) / 10) << out;
}
