// Every step-over strategy on a probe site of every instruction kind (inferior/kinds.S), with
// 1 and 4 threads: the traced program's result equals the untraced one's, and every hit is
// counted.
#include <gtest/gtest.h>

#include "compare/bench.hpp"
#include "compare/runner.hpp"

using namespace probecost;

namespace {

struct Case {
  std::string kind;
  unsigned threads;
};

class StepOverKinds : public ::testing::TestWithParam<Case> {};

RunConfig config(unsigned threads) {
  RunConfig cfg;
  cfg.inferior = INFERIOR_BIN;
  cfg.iterations = 400;
  cfg.threads = threads;
  return cfg;
}

}  // namespace

TEST_P(StepOverKinds, SameResultAndExactHitsWithEveryStrategy) {
  const Case& c = GetParam();
  RunConfig cfg = config(c.threads);
  Mechanism plain{"untraced", "", {"--site", "kind:" + c.kind}, HitSource::SiteCalls, "", "", 0};
  Sample reference = run_once(plain, cfg);
  ASSERT_EQ(reference.site_calls, 400u * c.threads);
  for (const char* strategy : {"singlestep", "emulate", "outline", "auto"}) {
    Mechanism m{"traced",
                "",
                {"--site", "kind:" + c.kind},
                HitSource::TracerHits,
                "probecost_kind_" + c.kind,
                strategy,
                0};
    Sample s = run_once(m, cfg);
    EXPECT_EQ(s.hits, 400u * c.threads) << strategy << ": " << s.step_over_plan;
    EXPECT_EQ(s.site_calls, reference.site_calls) << strategy;
    EXPECT_EQ(s.checksum, reference.checksum) << strategy << ": " << s.step_over_plan;
    EXPECT_EQ(s.slot, reference.slot) << strategy << ": " << s.step_over_plan;
    EXPECT_TRUE(s.problem.empty()) << strategy << ": " << s.problem;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (unsigned threads : {1u, 4u}) {
    for (const auto& k : all_kinds()) out.push_back({k, threads});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, StepOverKinds, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.kind + "_" + std::to_string(info.param.threads) +
                                  "threads";
                         });

TEST(StepOverPlans, AutoPicksOneStopForEverythingHere) {
  // auto must never fall back to the two-stop single-step on these kinds.
  RunConfig cfg = config(1);
  for (const auto& kind : all_kinds()) {
    Mechanism m{
        "traced", "", {"--site", "kind:" + kind}, HitSource::TracerHits, "probecost_kind_" + kind,
        "auto",   0};
    Sample s = run_once(m, cfg);
    EXPECT_EQ(s.tracer_stops, 400u) << kind << ": " << s.step_over_plan;
    EXPECT_EQ(s.step_over_plan.rfind("singlestep", 0), std::string::npos) << s.step_over_plan;
  }
}
