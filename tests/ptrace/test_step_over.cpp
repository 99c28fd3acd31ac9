// Every step-over strategy on a probe site of every instruction kind (inferior/kinds.S), with
// 1 and 4 threads: the traced program's result equals the untraced one's, and every hit is
// counted.
#include <gtest/gtest.h>

#include <map>

#include "common/error.hpp"
#include "compare/bench.hpp"
#include "compare/runner.hpp"

using namespace probecost;

namespace {

struct Case {
  std::string kind;
  unsigned threads;
};

class StepOverKinds : public ::testing::TestWithParam<Case> {};
class JumpKinds : public ::testing::TestWithParam<Case> {};

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
  Mechanism plain{MechanismId::Custom,  "untraced", "", {"--site", "kind:" + c.kind},
                  HitSource::SiteCalls, "",         {}, 0};
  Sample reference = run_once(plain, cfg);
  ASSERT_EQ(reference.site_calls, 400u * c.threads);
  for (StepOverChoice choice : {StepOverChoice::SingleStep, StepOverChoice::Emulate,
                                StepOverChoice::Outline, StepOverChoice::Auto}) {
    const char* strategy = step_over_name(choice);
    Mechanism m{MechanismId::Custom,
                "traced",
                "",
                {"--site", "kind:" + c.kind},
                HitSource::TracerHits,
                "probecost_kind_" + c.kind,
                choice,
                0};
    Sample s = run_once(m, cfg);
    EXPECT_EQ(s.hits, 400u * c.threads) << strategy << ": " << s.step_over_plan;
    EXPECT_EQ(s.site_calls, reference.site_calls) << strategy;
    EXPECT_EQ(s.checksum, reference.checksum) << strategy << ": " << s.step_over_plan;
    EXPECT_EQ(s.slot, reference.slot) << strategy << ": " << s.step_over_plan;
    EXPECT_TRUE(s.problem.empty()) << strategy << ": " << s.problem;
  }
}

// The same kinds patched with a jump to a trampoline by the tracer (the compare mechanism
// `jump`, with an event record per hit): the program's result is the untraced one's and every
// hit is counted; or, where a jump cannot go, the site is refused with the reason.
TEST_P(JumpKinds, SameResultAndExactHitsThroughAJumpOrARefusal) {
  const Case& c = GetParam();
  RunConfig cfg = config(c.threads);
  Mechanism plain{MechanismId::Custom,  "untraced", "", {"--site", "kind:" + c.kind},
                  HitSource::SiteCalls, "",         {}, 0};
  Sample reference = run_once(plain, cfg);
  // compare's jump mechanism on this kind's site.
  Mechanism m{
      MechanismId::Jump,          "jump", "", {"--site", "kind:" + c.kind}, HitSource::TracerHits,
      "probecost_kind_" + c.kind, {},     0};
  static const std::map<std::string, std::string> refused = {
      {"call", "call"},
      {"ret", "a jump needs 5"},
      {"short", "a jump needs 5"},
      {"branch_in", "branch"},
      {"syscall", "syscall"},
      {"indirect", "indirect"},
      {"outside_in", "outside the function"}};
  if (auto r = refused.find(c.kind); r != refused.end()) {
    try {
      run_once(m, cfg);
      ADD_FAILURE() << c.kind << " was patched";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(r->second), std::string::npos) << e.what();
    }
    return;
  }
  Sample s = run_once(m, cfg);
  EXPECT_EQ(s.hits, 400u * c.threads) << s.step_over_plan;
  EXPECT_EQ(s.checksum, reference.checksum) << s.step_over_plan;
  EXPECT_EQ(s.slot, reference.slot) << s.step_over_plan;
  EXPECT_TRUE(s.problem.empty()) << s.problem;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (unsigned threads : {1u, 4u}) {
    for (const auto& k : all_kinds()) out.push_back({k, threads});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.kind + "_" + std::to_string(info.param.threads) + "threads";
}

INSTANTIATE_TEST_SUITE_P(AllKinds, StepOverKinds, ::testing::ValuesIn(cases()), case_name);

// The step-over kinds, and the shapes kinds.S has for jump plans: a frame set-up spanning
// several instructions, live flags, a red-zone canary, and sites a jump must refuse.
std::vector<Case> jump_cases() {
  std::vector<Case> out = cases();
  for (unsigned threads : {1u, 4u}) {
    for (const char* k :
         {"frame", "flags", "redzone", "branch_in", "short", "syscall", "indirect", "outside_in"})
      out.push_back({k, threads});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, JumpKinds, ::testing::ValuesIn(jump_cases()), case_name);

TEST(StepOverPlans, AutoPicksOneStopForEverythingHere) {
  // auto must never fall back to the two-stop single-step on these kinds.
  RunConfig cfg = config(1);
  for (const auto& kind : all_kinds()) {
    Mechanism m{MechanismId::Custom,
                "traced",
                "",
                {"--site", "kind:" + kind},
                HitSource::TracerHits,
                "probecost_kind_" + kind,
                StepOverChoice::Auto,
                0};
    Sample s = run_once(m, cfg);
    EXPECT_EQ(s.tracer_stops, 400u) << kind << ": " << s.step_over_plan;
    EXPECT_EQ(s.step_over_plan.rfind("singlestep", 0), std::string::npos) << s.step_over_plan;
  }
}
