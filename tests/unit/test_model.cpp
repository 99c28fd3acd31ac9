#include <gtest/gtest.h>

#include <cmath>

#include "common/error.hpp"
#include "compare/compare.hpp"
#include "compare/mechanism.hpp"
#include "compare/model.hpp"
#include "compare/report.hpp"
#include "compare/stats.hpp"

using namespace probecost;

// The 2006 mail: int3 2.01 us, LTT 0.220 us, 749,994 events/s -> 150% and 16.5% of a CPU.
TEST(Model, ReproducesThe2006Arithmetic) {
  Extrapolation int3 = extrapolate(2010.0, 749'994);
  EXPECT_NEAR(int3.cpu_percent, 150.7, 0.05);
  EXPECT_NEAR(int3.slowdown, 2.507, 0.001);
  EXPECT_NEAR(int3.saturation_rate_per_s, 497'512.4, 0.1);
  Extrapolation ltt = extrapolate(220.0, 749'994);
  EXPECT_NEAR(ltt.cpu_percent, 16.5, 0.01);
}

TEST(Model, ZeroCostNeverSaturates) {
  Extrapolation e = extrapolate(0.0, 1e6);
  EXPECT_EQ(e.cpu_percent, 0);
  EXPECT_EQ(e.slowdown, 1);
  EXPECT_TRUE(std::isinf(e.saturation_rate_per_s));
}

TEST(Model, ParsesRates) {
  EXPECT_DOUBLE_EQ(parse_rate("750000"), 750000);
  EXPECT_DOUBLE_EQ(parse_rate("750k"), 750000);
  EXPECT_DOUBLE_EQ(parse_rate("1.2M"), 1.2e6);
  EXPECT_DOUBLE_EQ(parse_rate("7.5e5"), 750000);
  for (const char* bad : {"", "k", "12x", "-5", "0", "1.2Q", "nan"}) {
    EXPECT_THROW(parse_rate(bad), UsageError) << bad;
  }
}

TEST(Model, ParsesDurations) {
  EXPECT_DOUBLE_EQ(parse_duration_ns("2.01us"), 2010);
  EXPECT_DOUBLE_EQ(parse_duration_ns("2.01\u00b5s"), 2010);
  EXPECT_DOUBLE_EQ(parse_duration_ns("220ns"), 220);
  EXPECT_DOUBLE_EQ(parse_duration_ns("1ms"), 1e6);
  EXPECT_DOUBLE_EQ(parse_duration_ns("15ns"), 15);
  EXPECT_THROW(parse_duration_ns("15"), UsageError);  // no unit: "-c 15 us" must not be 15 ns
  EXPECT_THROW(parse_duration_ns("2 parsecs"), UsageError);
  EXPECT_THROW(parse_duration_ns("2.01 us"), UsageError);
  EXPECT_THROW(parse_duration_ns("-1us"), UsageError);
}

TEST(Stats, MedianMinMax) {
  Summary s = summarize({5, 1, 3});
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(summarize({1, 2, 3, 10}).median, 2.5);
  EXPECT_EQ(summarize({}).n, 0u);
}

TEST(Mechanisms, NamesAndSelection) {
  auto all = select_mechanisms(parse_mechanisms({"all"}));
  ASSERT_EQ(all.size(), 12u);
  EXPECT_EQ(all[0].name, "baseline");
  auto some = select_mechanisms(parse_mechanisms({"int3-ptrace"}));
  ASSERT_EQ(some.size(), 2u);  // baseline always runs first
  EXPECT_EQ(some[0].name, "baseline");
  EXPECT_EQ(some[1].name, "int3-ptrace");
  EXPECT_TRUE(some[1].is(probecost::MechanismId::Int3Ptrace));
  EXPECT_THROW(parse_mechanisms({"kprobe"}), UsageError);
}

TEST(Mechanisms, EveryNameParsesBackToItsMechanism) {
  for (const auto& m : probecost::all_mechanisms()) {
    ASSERT_EQ(probecost::find_mechanism(m.name), m.id) << m.name;
    EXPECT_EQ(probecost::mechanism(m.id).name, m.name);
  }
  EXPECT_EQ(probecost::find_mechanism("kind:nop/emulate"), std::nullopt);
  // Given twice, or with "all": once each, in the order first given.
  auto twice = select_mechanisms(parse_mechanisms({"jump", "marker", "jump", "all"}));
  ASSERT_EQ(twice.size(), 12u);
  EXPECT_EQ(twice[1].name, "jump");
  EXPECT_EQ(twice[2].name, "marker");
}

TEST(Report, GroupsThousands) {
  EXPECT_EQ(group_thousands(749994), "749,994");
  EXPECT_EQ(group_thousands(12), "12");
  EXPECT_EQ(group_thousands(-1234567), "-1,234,567");
}

namespace {

probecost::MechanismResult row(const char* name, double median, double min, double max) {
  probecost::MechanismResult r;
  r.mechanism = probecost::mechanism(*probecost::find_mechanism(name));
  r.iterations = 50'000;
  r.per_hit_ns = {median, min, max, 5};
  r.cpu_ns_per_hit = {median, min, max, 5};
  r.per_hit_cycles = {median * 2, min * 2, max * 2, 5};
  return r;
}

}  // namespace

TEST(JudgeFigures, NegativeOrWiderThanItsMedianIsUntrustworthy) {
  auto fine = row("marker", 8.1, 8.0, 8.3);
  probecost::judge_figures(fine);
  EXPECT_EQ(fine.problem, "");
  auto negative = row("marker", -3.0, -4.0, -2.5);
  probecost::judge_figures(negative);
  EXPECT_NE(negative.problem.find("negative ns/hit"), std::string::npos) << negative.problem;
  auto wide = row("int3-signal", 2400, 1000, 3500);  // spread 2500 > median 2400
  probecost::judge_figures(wide);
  EXPECT_NE(wide.problem.find("spread"), std::string::npos) << wide.problem;
  auto cpu_negative = row("int3-ptrace", 30000, 29000, 31000);
  cpu_negative.cpu_ns_per_hit = {-5, -6, -4, 5};
  probecost::judge_figures(cpu_negative);
  EXPECT_NE(cpu_negative.problem.find("negative CPU ns/hit"), std::string::npos);
}

TEST(JudgeFigures, TooFewIterationsIsUntrustworthy) {
  auto r = row("marker", 8.1, 8.0, 8.3);
  r.iterations = 1;
  probecost::judge_figures(r);
  EXPECT_NE(r.problem.find("only 1 iterations"), std::string::npos) << r.problem;
}

TEST(JudgeFigures, RowsThatAreZeroByDesignAreNotJudgedAndEarlierProblemsStay) {
  for (const char* name : {"baseline", "marker-off"}) {
    auto r = row(name, -0.1, -0.3, 2.1);
    r.iterations = 1;
    probecost::judge_figures(r);
    EXPECT_EQ(r.problem, "") << name;
  }
  auto r = row("marker", -3, -4, 2);
  r.problem = "hit counts differ between runs";
  probecost::judge_figures(r);
  EXPECT_EQ(r.problem, "hit counts differ between runs");
}

TEST(CheckWork, EmptyOrMemcpyOfAPositiveWholeNumber) {
  EXPECT_NO_THROW(probecost::check_work("empty"));
  EXPECT_NO_THROW(probecost::check_work("memcpy:1"));
  EXPECT_NO_THROW(probecost::check_work("memcpy:100000000"));
  for (const char* bad : {"memcpy:0", "memcpy:-1", "memcpy:abc", "memcpy:", "memcpy:1e3",
                          "memcpy: 5", "memcpy:99999999999999999999", "", "Empty"}) {
    EXPECT_THROW(probecost::check_work(bad), probecost::UsageError) << bad;
  }
}
