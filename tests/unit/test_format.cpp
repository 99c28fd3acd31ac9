// The reports' number formats (common/format.hpp), and compare's report on a fixed result:
// the xmarker column is the verdict's ratio, of CPU ns per hit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/format.hpp"
#include "compare/compare.hpp"
#include "compare/mechanism.hpp"
#include "compare/report.hpp"

using namespace probecost;

TEST(Format, NoNegativeZero) {
  EXPECT_EQ(num(-0.0, 1), "0.0");
  EXPECT_EQ(num(-0.04, 1), "0.0");
  EXPECT_EQ(num(-0.4, 0), "0");
  EXPECT_EQ(num(-0.05001, 1), "-0.1");
  EXPECT_EQ(signed_num(-0.004, 2), "+0.00");
  EXPECT_EQ(signed_num(-0.3, 1), "-0.3");
  EXPECT_EQ(signed_num(1.25, 1), "+1.2");
  EXPECT_EQ(group_thousands(-0.2), "0");
  EXPECT_EQ(percent(-0.001), "0.00%");
  EXPECT_EQ(human_ns(-0.0001), "0.00 ns");
  EXPECT_EQ(plain_number(-0.0), "0");
  EXPECT_EQ(json_dump(nlohmann::json(-0.0), 0), "0.0");
}

TEST(Format, LargeValuesGroupThousands) {
  EXPECT_EQ(num(32028.94, 1), "32,028.9");
  EXPECT_EQ(num(1234567.891, 2), "1,234,567.89");
  EXPECT_EQ(num(-1234567, 0), "-1,234,567");
  EXPECT_EQ(num(999.96, 1), "1,000.0");
  EXPECT_EQ(num(1e15, 0), "1,000,000,000,000,000");
  EXPECT_EQ(group_thousands(749994), "749,994");
  EXPECT_EQ(times(3987.6), "3,988");
  EXPECT_EQ(times(42.371), "42.37");
  EXPECT_EQ(times(99.999), "100");
  EXPECT_EQ(num(std::numeric_limits<double>::infinity(), 1), "inf");
}

TEST(Format, PercentagesAboveAThousand) {
  EXPECT_EQ(percent(2325.04), "2,325.0%");
  EXPECT_EQ(percent(2090.0), "2,090.0%");
  EXPECT_EQ(percent(123456.78), "123,456.8%");
  EXPECT_EQ(percent(150.7), "150.7%");
  EXPECT_EQ(percent(16.5), "16.5%");
  EXPECT_EQ(percent(9.999), "10.0%");
  EXPECT_EQ(percent(0.6023), "0.60%");
}

TEST(Format, HumanNsKeepsThreeDigitsAndNoExponent) {
  EXPECT_EQ(human_ns(8.03), "8.03 ns");
  EXPECT_EQ(human_ns(999.4), "999 ns");
  EXPECT_EQ(human_ns(999.6), "1.00 \u00b5s");  // printf's %.3g said "1e+03 ns"
  EXPECT_EQ(human_ns(2424.3), "2.42 \u00b5s");
  EXPECT_EQ(human_ns(32027.9), "32.0 \u00b5s");
  EXPECT_EQ(human_ns(1.5e6), "1.50 ms");
  EXPECT_EQ(human_ns(2e9), "2.00 s");
  EXPECT_EQ(human_ns(-2424.3), "-2.42 \u00b5s");
}

TEST(Format, CsvNumbersAreNeverScientific) {
  EXPECT_EQ(plain_number(1.2e6), "1200000");
  EXPECT_EQ(plain_number(750000), "750000");
  EXPECT_EQ(plain_number(1e21), "1000000000000000000000");
  EXPECT_EQ(plain_number(1.25e-7), "0.000000125");
  EXPECT_EQ(plain_number(0.6), "0.6");
  EXPECT_EQ(plain_number(std::numeric_limits<double>::infinity()), "inf");
  for (double v : {1.2e6, 3.3e-9, 1e-300, 1.7976931348623157e308, -4.5e-12, 123.456}) {
    std::string s = plain_number(v);
    EXPECT_EQ(s.find_first_of("eE"), std::string::npos) << s;
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;  // and it reads back exactly
  }
}

TEST(Format, JsonNumbersAreNeverScientificAndStayNumbers) {
  nlohmann::json j = {{"tiny", 1.1102230246251565e-16},
                      {"huge", 2.5e16},
                      {"neg_zero", -0.0},
                      {"rate", 1.2e6},
                      {"text", "1e+06 -0.0"},
                      {"list", {-3.3e-9, 42, 0.5}}};
  std::string s = json_dump(j);
  EXPECT_EQ(s.find("e-"), std::string::npos) << s;
  EXPECT_EQ(s.find("e+06,"), std::string::npos) << s;
  EXPECT_EQ(s.find("-0.0,"), std::string::npos) << s;
  EXPECT_NE(s.find("\"text\": \"1e+06 -0.0\""), std::string::npos) << s;  // strings untouched
  auto back = nlohmann::json::parse(s);
  EXPECT_TRUE(back["tiny"].is_number());
  EXPECT_EQ(back["tiny"].get<double>(), 1.1102230246251565e-16);
  EXPECT_EQ(back["huge"].get<double>(), 2.5e16);
  EXPECT_EQ(back["rate"].get<double>(), 1.2e6);
  EXPECT_EQ(back["neg_zero"].get<double>(), 0.0);
  EXPECT_FALSE(std::signbit(back["neg_zero"].get<double>()));
  EXPECT_EQ(back["list"][0].get<double>(), -3.3e-9);
  EXPECT_EQ(back["list"][1].get<int>(), 42);
}

namespace {

// A compare run at split placement (tracer and tracee on different CPUs), where wall time
// and CPU time per hit differ: the figures are made up, in the proportions measured there.
CompareResult split_fixture() {
  CompareResult r;
  r.machine = {"Fixture CPU", "Linux 6.18", 2.6e9, 2};
  r.config.repeat = 3;
  r.config.placement = Placement::Split;
  r.config.rates = {750'000, 1.2e6};
  r.cpus = plan_cpus(Placement::Split, 2);
  struct Row {
    const char* name;
    double wall, cpu;
  };
  for (Row row : {Row{"baseline", 0.0, -0.01}, Row{"marker", 8.0, 10.0},
                  Row{"int3-ptrace", 112'000.0, 40'000.0}}) {
    MechanismResult m;
    m.mechanism = mechanism(*find_mechanism(row.name));
    m.iterations = m.hits = m.expected_hits = 20'000;
    m.per_hit_ns = {row.wall, row.wall - 0.04, row.wall + 0.1, 3};
    m.wall_ns_per_hit = m.per_hit_ns;
    m.cpu_ns_per_hit = {row.cpu, row.cpu, row.cpu, 3};
    m.per_hit_cycles = {row.wall * 2.6, row.wall * 2.6, row.wall * 2.6, 3};
    for (double rate : r.config.rates) m.extrapolation.push_back(extrapolate(row.cpu, rate));
    r.mechanisms.push_back(m);
  }
  relate_to_marker(r);
  return r;
}

std::string report(const CompareResult& r, Format f) {
  std::ostringstream out;
  write_report(out, r, f, false);
  return out.str();
}

}  // namespace

TEST(CompareReport, XmarkerIsTheVerdictsCpuRatio) {
  CompareResult r = split_fixture();
  // CPU: 40,000 / 10 = 4,000 (wall would say 112,000 / 8 = 14,000).
  EXPECT_DOUBLE_EQ(r.mechanisms[2].x_marker, 4000);
  EXPECT_DOUBLE_EQ(r.mechanisms[1].x_marker, 1);
  EXPECT_LT(r.mechanisms[0].x_marker, 0);  // the baseline's -0.01 ns: printed "-", JSON null

  std::string text = report(r, Format::Text);
  EXPECT_NE(text.find("xmarker = CPU ns/hit / the marker's CPU ns/hit"), std::string::npos) << text;
  EXPECT_NE(text.find("int3-ptrace costs 4,000 times the marker"), std::string::npos) << text;
  std::istringstream lines(text);
  std::string line, ptrace_row;
  while (std::getline(lines, line)) {
    if (line.rfind("int3-ptrace ", 0) == 0) ptrace_row = line;
  }
  // mechanism iterations hits ns/hit (min .. max) cycles/hit CPU-ns/hit xmarker ...
  std::istringstream cells(ptrace_row);
  std::vector<std::string> c;
  for (std::string cell; cells >> cell;) c.push_back(cell);
  ASSERT_GE(c.size(), 10u) << ptrace_row;
  EXPECT_EQ(c[3], "112,000.0") << ptrace_row;
  EXPECT_EQ(c[8], "40,000.0") << ptrace_row;
  EXPECT_EQ(c[9], "4,000") << ptrace_row;
  EXPECT_EQ(text.find("-0.0"), std::string::npos) << text;      // the baseline's -0.01
  EXPECT_NE(text.find("3,000.0%"), std::string::npos) << text;  // 750,000/s x 40 µs

  auto j = nlohmann::json::parse(report(r, Format::Json));
  EXPECT_DOUBLE_EQ(j["mechanisms"][2]["x_marker"].get<double>(), 4000);
  EXPECT_TRUE(j["mechanisms"][0]["x_marker"].is_null());

  std::string csv = report(r, Format::Csv);
  EXPECT_EQ(csv.find("e+"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1200000,4800,49,"), std::string::npos) << csv;  // rate, CPU%, slowdown
}

TEST(CompareReport, WarningsUseTheTablesFormat) {
  MechanismResult r;
  r.mechanism = mechanism(MechanismId::Int3Ptrace);
  r.iterations = 20'000;
  r.per_hit_ns = {235173.6, 114276.8, 356070.4, 2};  // the spread is larger than the median
  r.cpu_ns_per_hit = r.per_hit_ns;
  judge_figures(r);
  EXPECT_NE(r.problem.find("(max - min = 241,793.6) is larger than its median (235,173.6)"),
            std::string::npos)
      << r.problem;
  MechanismResult neg = r;
  neg.problem.clear();
  neg.per_hit_ns = {-0.01, -0.02, 0.0, 2};
  judge_figures(neg);
  EXPECT_NE(neg.problem.find("negative ns/hit (median 0.0)"), std::string::npos) << neg.problem;
}
