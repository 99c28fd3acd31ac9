// common/: the helpers every module shares (the formatters have test_format.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "common/error.hpp"
#include "common/format.hpp"
#include "common/paths.hpp"
#include "common/phases.hpp"

using namespace probecost;

TEST(Paths, BaseNameIsTheLastComponent) {
  EXPECT_EQ(base_name("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.so.6");
  EXPECT_EQ(base_name("a.out"), "a.out");
  EXPECT_EQ(base_name("/"), "");
  EXPECT_EQ(base_name(""), "");
}

TEST(Format, PadCountsAUtf8SequenceAsOneCharacter) {
  EXPECT_EQ(pad("ns", 5), "   ns");
  EXPECT_EQ(pad("ns", 5, true), "ns   ");
  EXPECT_EQ(pad("2.42 \u00b5s", 9), "  2.42 \u00b5s");  // µs is 2 bytes, 1 character
  EXPECT_EQ(pad("too long", 3), "too long");
}

TEST(Format, ParsedOnceFromItsName) {
  EXPECT_EQ(parse_format("text"), Format::Text);
  EXPECT_EQ(parse_format("json"), Format::Json);
  EXPECT_EQ(parse_format("csv"), Format::Csv);
  EXPECT_THROW(parse_format("JSON"), UsageError);
  EXPECT_THROW(parse_format(""), UsageError);
}

// A phase named again adds to the first one's figures, in the order phases first ended; marks
// before start() or after stop() count nothing; the phases add up to the interval.
TEST(PhaseClock, PhasesAddUpToTheIntervalAndMergeByName) {
  PhaseClock clock;
  clock.mark("before");
  EXPECT_TRUE(clock.phases().empty());
  double t0 = now_s();
  clock.start();
  clock.mark("a");
  clock.mark("b");
  clock.mark("a");
  clock.stop("c");
  double t1 = now_s();
  clock.mark("after");
  ASSERT_EQ(clock.phases().size(), 3u);
  EXPECT_EQ(clock.phases()[0].name, "a");
  EXPECT_EQ(clock.phases()[1].name, "b");
  EXPECT_EQ(clock.phases()[2].name, "c");
  double wall = 0;
  for (const auto& p : clock.phases()) {
    EXPECT_GE(p.wall_s, 0);
    EXPECT_GE(p.cpu_s, 0);
    wall += p.wall_s;
  }
  EXPECT_LE(wall, t1 - t0);
  std::vector<Phase> total;
  add_phase(total, {"a", 1, 0.5});
  add_phase(total, {"b", 2, 1});
  add_phase(total, {"a", 3, 0.25});
  ASSERT_EQ(total.size(), 2u);
  EXPECT_EQ(total[0].wall_s, 4);
  EXPECT_EQ(total[0].cpu_s, 0.75);
  EXPECT_EQ(total[1].wall_s, 2);
}
