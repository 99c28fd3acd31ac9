// compare's verdict on fixtures: for each purpose of a probe the cheapest mechanism that serves
// it, compiled in or put into a running program (issue 19 §3).
#include <gtest/gtest.h>

#include <sstream>

#include "compare/verdict.hpp"

using namespace probecost;

namespace {

CompareResult fixture(const std::vector<std::pair<MechanismId, double>>& costs) {
  CompareResult r;
  r.config.rates = {750'000};
  for (auto [id, ns] : costs) {
    MechanismResult m;
    m.mechanism = mechanism(id);
    m.cpu_ns_per_hit.median = ns;
    r.mechanisms.push_back(m);
  }
  return r;
}

}  // namespace

TEST(Verdict, TheCheapestForEachPurposeAndInARunningProgram) {
  CompareResult r = fixture({{MechanismId::Baseline, 0},
                             {MechanismId::Marker, 8},
                             {MechanismId::Int3Signal, 2400},
                             {MechanismId::Int3Ptrace, 32000},
                             {MechanismId::Int3PtraceFast, 9900},
                             {MechanismId::Jump, 10},
                             {MechanismId::Uprobe, 9500},
                             {MechanismId::UprobeNop5, 180},
                             {MechanismId::PtraceFloor, 8300}});
  auto c = cheapest_per_use(r);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].overall->mechanism.name, "marker");  // counting
  EXPECT_EQ(c[0].running->mechanism.name, "jump");
  EXPECT_EQ(c[1].overall->mechanism.name, "marker");  // recording events
  EXPECT_EQ(c[1].running->mechanism.name, "jump");
  EXPECT_EQ(c[2].overall->mechanism.name, "int3-signal");  // stacks: the thread must stop
  EXPECT_EQ(c[2].running->mechanism.name, "int3-ptrace-fast");
  std::ostringstream out;
  write_verdict(out, r);
  EXPECT_NE(out.str().find("Verdict: int3-ptrace: 750,000 events/s x 32.0 µs/event = 2,400.0% of "
                           "a CPU"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  counting:         marker 0.60% of a CPU (compiled into the "
                           "program); in a running program, jump 0.75% of a CPU\n"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  stacks:           int3-signal 180.0% of a CPU (compiled into the "
                           "program); in a running program, int3-ptrace-fast 742.5% of a CPU; "
                           "unwinding each stack costs more on top\n"),
            std::string::npos)
      << out.str();
  auto j = verdict_json(r);
  EXPECT_EQ(j["cheapest"]["counting"]["running_program"]["mechanism"], "jump");
  EXPECT_EQ(j["cheapest"]["stacks"]["overall"]["compiled_in"], true);
}

TEST(Verdict, APurposeNoMechanismRunServesIsSaidSo) {
  CompareResult r = fixture({{MechanismId::Baseline, 0}, {MechanismId::Uprobe, 9500}});
  std::ostringstream out;
  write_verdict(out, r);
  EXPECT_NE(out.str().find("  counting:         uprobe 712.5% of a CPU\n"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("  recording events: none of the mechanisms run serves it\n"),
            std::string::npos)
      << out.str();
  EXPECT_TRUE(verdict_json(r)["cheapest"]["stacks"]["overall"].is_null());
}
