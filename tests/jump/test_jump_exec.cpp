// Jump-patched probes run in-process: functions of this test (inferior/kinds.S) are patched
// through /proc/self/mem with a jump to a trampoline in a shared area mapped twice, called, and
// their results compared with the untouched run; hit counts and event records are checked
// exactly. See self_patch.hpp for the in-process stand-in of the tracer. Many threads through
// a site: test_jump_threads.cpp; counting per CPU: test_jump_percpu.cpp.
#include <gtest/gtest.h>

#include <map>

#include "jump_exec.hpp"

using namespace probecost;
using namespace probecost::selftest;

namespace {

const std::vector<std::string> kRunnable = {
    "nop",  "nop5",      "endbr64", "push",          "pop",       "mov",
    "sub",  "lea",       "lea_rip", "load_rip",      "store_rip", "jmp32",
    "jmp8", "jcc_taken", "frame",   "jcc_not_taken", "flags",     "redzone"};

class KindTest : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {};

}  // namespace

TEST_P(KindTest, SameResultAndExactHits) {
  const auto& [kind, mode] = GetParam();
  if (mode == Mode::PerCpu && !have_rseq()) GTEST_SKIP() << "no rseq";
  const bool events = mode == Mode::Events;
  KindFn fn = inferior::kind_entry(kind.c_str());
  ASSERT_NE(fn, nullptr);
  constexpr std::uint64_t kCalls = 1000;
  Result untouched = run(fn, kCalls);
  std::string why;
  auto plan = plan_kind(kind, why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, mode);
  auto original = bytes_at(plan->site, plan->length);
  p.site->install();
  EXPECT_EQ(run(fn, kCalls), untouched);
  EXPECT_EQ(p.area->writer().hits(0), kCalls);
  if (events) {
    std::uint64_t cursor = 0;
    auto d = jump::drain(p.area->writer().ring(0), cursor, true);
    EXPECT_EQ(d.lost, 0u);
    ASSERT_EQ(d.records.size(), kCalls);
    for (std::uint64_t i = 0; i < kCalls; ++i) {
      EXPECT_EQ(d.records[i].id, 7u);
      EXPECT_EQ(d.records[i].arg, arg_of(i)) << i;
      if (i) {
        EXPECT_GE(d.records[i].tsc, d.records[i - 1].tsc);
      }
    }
  }
  p.site->remove();
  EXPECT_EQ(bytes_at(plan->site, plan->length), original);
  EXPECT_EQ(run(fn, kCalls), untouched);
  EXPECT_EQ(p.area->writer().hits(0), kCalls);  // no hits once removed
}

INSTANTIATE_TEST_SUITE_P(AllKinds, KindTest,
                         ::testing::Combine(::testing::ValuesIn(kRunnable),
                                            ::testing::Values(Mode::Count, Mode::PerCpu,
                                                              Mode::Events)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + name_of(std::get<1>(info.param));
                         });

TEST(JumpExec, RefusedKindsSayWhy) {
  const std::map<std::string, std::string> reasons = {
      {"call", "a call pushes its own address"},
      {"ret", "the function ends 1 bytes after the site"},
      {"branch_in", "branches to"},
      {"short", "the function ends 4 bytes after the site"},
      {"syscall", "is a system call"},
      {"indirect", "indirect jump"},
  };
  for (const auto& [kind, reason] : reasons) {
    std::string why;
    EXPECT_FALSE(plan_kind(kind, why)) << kind;
    EXPECT_NE(why.find(reason), std::string::npos) << kind << ": " << why;
  }
}

TEST(JumpExec, FlagsArePreservedAndTheTestWouldSeeThemLost) {
  KindFn fn = inferior::kind_entry("flags");
  Result untouched = run(fn, 200);
  std::string why;
  auto plan = plan_kind("flags", why);
  ASSERT_TRUE(plan) << why;
  for (Mode mode : {Mode::Count, Mode::PerCpu, Mode::Events}) {
    if (mode == Mode::PerCpu && !have_rseq()) continue;
    auto p = place(*plan, mode);
    p.site->install();
    EXPECT_EQ(run(fn, 200), untouched) << name_of(mode);
    p.site->remove();
  }
  // Control: the same trampoline without keeping the flags gives another result, so the test
  // sees the flags a lock inc changes.
  auto p = place(*plan, Mode::Count, 1 << 12, 0, FlagSave::None);
  p.site->install();
  EXPECT_NE(run(fn, 200), untouched);
  p.site->remove();
}

TEST(JumpExec, RedZoneIsLeftAlone) {
  std::string why;
  auto plan = plan_kind("redzone", why);
  ASSERT_TRUE(plan) << why;
  KindFn fn = inferior::kind_entry("redzone");
  Result untouched = run(fn, 100);
  ASSERT_NE(untouched.checksum, 0u);  // the canary held untouched
  for (Mode mode : {Mode::Count, Mode::PerCpu, Mode::Events}) {
    if (mode == Mode::PerCpu && !have_rseq()) continue;
    auto p = place(*plan, mode);
    p.site->install();
    EXPECT_EQ(run(fn, 100), untouched) << name_of(mode);
    p.site->remove();
  }
}

// As if a thread had run the frame kind's first instruction (push %rbp), or its first two, when
// the jump went in: it continues at `pc`, the copy Trampoline::moved_pc gives.
asm(R"(
  .text
  .globl probecost_test_after_push
  .type probecost_test_after_push, @function
probecost_test_after_push:
  push %rbp
  jmp *%rsi
  .globl probecost_test_after_push_mov
  .type probecost_test_after_push_mov, @function
probecost_test_after_push_mov:
  push %rbp
  mov %rsp, %rbp
  jmp *%rsi
)");
extern "C" void probecost_test_after_push(std::uint64_t arg, std::uint64_t pc);
extern "C" void probecost_test_after_push_mov(std::uint64_t arg, std::uint64_t pc);

TEST(JumpExec, AThreadBetweenDisplacedInstructionsContinuesInTheCopy) {
  std::string why;
  auto plan = plan_kind("frame", why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, Mode::Count);
  const auto& t = p.placed.trampoline;
  ASSERT_EQ(t.copies.size(), 2u);  // after push (site+1) and after mov (site+4)
  auto after_push = t.moved_pc(plan->site + 1), after_mov = t.moved_pc(plan->site + 4);
  ASSERT_TRUE(after_push && after_mov);
  p.site->install();
  probecost_kinds_checksum = 0;
  probecost_test_after_push(40, after_push->value());
  probecost_test_after_push_mov(2, after_mov->value());
  EXPECT_EQ(probecost_kinds_checksum, 42u);  // both finished the function's work
  EXPECT_EQ(p.area->writer().hits(0), 0u);   // neither counts: they had passed the site
  p.site->remove();
}
