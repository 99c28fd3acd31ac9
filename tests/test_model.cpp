#include <gtest/gtest.h>

#include <cmath>

#include "breakpoint/error.hpp"
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
  auto all = select_mechanisms({"all"});
  ASSERT_EQ(all.size(), 8u);
  EXPECT_EQ(all[0].name, "baseline");
  auto some = select_mechanisms({"int3-ptrace"});
  ASSERT_EQ(some.size(), 2u);  // baseline always runs first
  EXPECT_EQ(some[0].name, "baseline");
  EXPECT_EQ(some[1].name, "int3-ptrace");
  EXPECT_THROW(select_mechanisms({"kprobe"}), UsageError);
}

TEST(Report, GroupsThousands) {
  EXPECT_EQ(group_thousands(749994), "749,994");
  EXPECT_EQ(group_thousands(12), "12");
  EXPECT_EQ(group_thousands(-1234567), "-1,234,567");
}
