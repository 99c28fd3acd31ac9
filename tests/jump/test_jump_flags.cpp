// Issue 15 item 5: a jump at a function's entry keeps the status flags its caller set. A
// hand-written routine that returns them (a carry-in convention, as bignum and checksum code
// use) is patched in this very process, and called with each of the 64 combinations of the six
// status flags.
#include <gtest/gtest.h>

#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::selftest;

// probecost_test_read_flags: the flags it finds, masked to the six status flags. Its first
// instructions (pushfq; pop %rax; and $0x8d5,%eax: 7 bytes) are what the jump displaces.
// probecost_test_call_with_flags(flags): sets exactly those flags, then calls it.
asm(R"(
  .text
  .globl probecost_test_read_flags
  .type probecost_test_read_flags, @function
probecost_test_read_flags:
  pushfq
  pop %rax
  and $0x8d5, %eax
  ret
  .size probecost_test_read_flags, .-probecost_test_read_flags

  .globl probecost_test_call_with_flags
  .type probecost_test_call_with_flags, @function
probecost_test_call_with_flags:
  push %rdi
  popfq
  call probecost_test_read_flags
  ret
  .size probecost_test_call_with_flags, .-probecost_test_call_with_flags
)");
extern "C" std::uint64_t probecost_test_call_with_flags(std::uint64_t flags);

namespace {

// CF PF AF ZF SF OF, their bits in RFLAGS.
constexpr std::uint64_t kStatusBits[] = {0x1, 0x4, 0x10, 0x40, 0x80, 0x800};

std::uint64_t combination(unsigned n) {
  std::uint64_t flags = 0;
  for (unsigned b = 0; b < 6; ++b) {
    if (n & (1u << b)) flags |= kStatusBits[b];
  }
  return flags;
}

// How many of the 64 combinations come back as they were set.
unsigned right_results() {
  unsigned right = 0;
  for (unsigned n = 0; n < 64; ++n)
    right += probecost_test_call_with_flags(combination(n)) == combination(n);
  return right;
}

struct PatchedEntry {
  explicit PatchedEntry(FlagSave save, bool events) {
    Function f = function_named("probecost_test_read_flags");
    std::string why;
    auto plan = plan_jump(f.start, f.code, f.start, why);
    if (!plan) throw std::runtime_error("cannot plan: " + why);
    area = std::make_unique<LocalArea>(f.start, jump::AreaConfig{1, 4096, 1, 1 << 12});
    auto placed = area->writer().add_site(*plan, site_options(1, events, save), why);
    if (!placed) throw std::runtime_error("cannot place: " + why);
    site = std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch);
    site->install();
  }
  ~PatchedEntry() { site->remove(); }
  std::unique_ptr<LocalArea> area;
  std::unique_ptr<PatchSite> site;
};

}  // namespace

TEST(JumpFlags, ARoutineThatReadsItsCallersFlagsAtAProbedEntryGetsThemAll) {
  ASSERT_EQ(right_results(), 64u);  // untouched
  for (bool events : {false, true}) {
    PatchedEntry patched(FlagSave::Lahf, events);
    EXPECT_EQ(right_results(), 64u) << (events ? "events" : "count");
    EXPECT_EQ(patched.area->writer().hits(0), 64u);
  }
}

TEST(JumpFlags, WithoutKeepingThemTheRoutineWouldSeeTheCountersFlags) {
  // The control: lock inc writes OF SF ZF AF PF, so most combinations come back wrong.
  PatchedEntry patched(FlagSave::None, false);
  EXPECT_LT(right_results(), 64u);
  EXPECT_EQ(patched.area->writer().hits(0), 64u);
}
