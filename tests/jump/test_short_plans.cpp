// Issue 23 item 1: functions shorter than a jump. plan_calls() gives them no patch (an int3
// serves the entry and the exit, as `trace` gives them one), and a plan that cannot become
// bytes is an Error wherever it would (JumpPatch::make, build_trampoline, AreaWriter::add_site,
// PatchSite, restore), never a write past the patch. On bytes given here; nothing runs.
#include <gtest/gtest.h>

#include "breakpoint/in_tracee/jump_area.hpp"
#include "breakpoint/in_tracee/trampoline.hpp"
#include "breakpoint/jump/exit_plan.hpp"
#include "breakpoint/jump/patch_site.hpp"
#include "common/error.hpp"
#include "self_patch.hpp"

using namespace probecost;

namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::uint64_t kArea = 0x7f0000000000;
constexpr std::uint64_t kFn = 0x7f0000400000;

struct Shape {
  const char* what;
  Bytes code;
};

// Every shape of 1 to 4 bytes whose only instruction or last one leaves the function.
const Shape kShort[] = {
    {"ret", {0xc3}},
    {"rep ret", {0xf3, 0xc3}},
    {"xchg %edi,%eax; ret", {0x97, 0xc3}},
    {"jmp rel8 (a tail call)", {0xeb, 0x40}},
    {"mov %edi,%eax; ret", {0x89, 0xf8, 0xc3}},
    {"lea 1(%rdi),%eax; ret", {0x8d, 0x47, 0x01, 0xc3}},
    {"mov %rdi,%rax; ret", {0x48, 0x89, 0xf8, 0xc3}},
};

CallPlans plans_of(const Bytes& code) {
  return plan_calls(RuntimeAddr(kFn), code);
}

// Every patch planned can become bytes, within the function.
void expect_well_formed(const CallPlans& p, const Bytes& code, const char* what) {
  std::vector<JumpPlan> all = p.exits;
  if (p.entry) all.push_back(*p.entry);
  for (const auto& plan : all) {
    EXPECT_EQ(why_malformed(plan), "") << what;
    EXPECT_LE(plan.end(), RuntimeAddr(kFn + code.size())) << what;
  }
}

// A plan of `code` at kFn by hand, as no planner makes it: its instructions, `length` bytes.
JumpPlan by_hand(const Bytes& code, std::size_t length, PlanRole role = PlanRole::Entry) {
  std::string why;
  auto insns = decode_function(RuntimeAddr(kFn), code, why);
  EXPECT_TRUE(insns) << why;
  JumpPlan p;
  p.role = role;
  p.function = p.site = RuntimeAddr(kFn);
  p.covered = *insns;
  p.length = length;
  std::copy(code.begin(), code.end(), p.original.begin());
  return p;
}

// Memory that must never be touched.
class Untouchable final : public TraceeMemory {
 public:
  void read(RuntimeAddr at, std::span<std::uint8_t>) override { ADD_FAILURE() << at.hex(); }
  void write(RuntimeAddr at, std::span<const std::uint8_t>) override { ADD_FAILURE() << at.hex(); }
};

}  // namespace

TEST(ShortFunction, GetsAnInt3ForItsEntryAndItsExit) {
  for (const auto& [what, code] : kShort) {
    CallPlans p = plans_of(code);
    EXPECT_TRUE(p.undecodable.empty()) << what;
    EXPECT_FALSE(p.entry) << what << ": a patch of " << p.entry->length << " bytes";
    EXPECT_NE(p.why_no_entry.find("a jump needs 5"), std::string::npos) << what << p.why_no_entry;
    EXPECT_TRUE(p.exits.empty()) << what;
    ASSERT_EQ(p.int3_exits.size(), 1u) << what;
    EXPECT_EQ(p.int3_exits[0].exit.next(), RuntimeAddr(kFn + code.size())) << what;
    EXPECT_NE(p.int3_exits[0].why_not_jump.find("a jump needs 5"), std::string::npos)
        << what << ": " << p.int3_exits[0].why_not_jump;
  }
}

TEST(ShortFunction, FiveBytesArePatchedWhole) {
  Bytes code = {0x48, 0x8d, 0x04, 0x37, 0xc3};  // lea (%rdi,%rsi),%rax; ret
  CallPlans p = plans_of(code);
  ASSERT_TRUE(p.entry) << p.why_no_entry;
  EXPECT_EQ(p.entry->role, PlanRole::Call);
  EXPECT_EQ(p.entry->length, 5u);
  EXPECT_TRUE(p.int3_exits.empty());
  expect_well_formed(p, code, "5 bytes");
}

// A conditional tail call in the first bytes of a longer function: its patch would be the
// function's first 2 bytes, shared with the entry's. Both are int3; the ret keeps its patch.
TEST(ShortFunction, AnExitInTheFirstBytesIsNoShortPatch) {
  Bytes code = {0x78, 0x40, 0x48, 0x8d, 0x47, 0x01, 0xc3};  // js +0x40; lea 1(%rdi),%rax; ret
  CallPlans p = plans_of(code);
  EXPECT_FALSE(p.entry) << "a patch of " << p.entry->length << " bytes";
  ASSERT_EQ(p.int3_exits.size(), 1u);
  EXPECT_EQ(p.int3_exits[0].exit.address, RuntimeAddr(kFn));
  ASSERT_EQ(p.exits.size(), 1u);
  EXPECT_EQ(p.exits[0].site, RuntimeAddr(kFn + 2));
  expect_well_formed(p, code, "js; lea; ret");
}

TEST(MalformedPlan, SaysWhy) {
  Bytes lea_ret = {0x8d, 0x47, 0x01, 0xc3};
  EXPECT_NE(why_malformed(by_hand(lea_ret, 4)).find("patches 4 bytes"), std::string::npos);
  Bytes nop5_ret = {0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3};
  EXPECT_NE(why_malformed(by_hand(nop5_ret, 5)).find("is not the next of its bytes"),
            std::string::npos);  // its ret is past the 5 bytes
  JumpPlan gap = by_hand(nop5_ret, 6);
  gap.covered.pop_back();
  EXPECT_NE(why_malformed(gap).find("cover 5 bytes, not its 6"), std::string::npos);
  JumpPlan other = by_hand(nop5_ret, 6);
  other.original[5] = 0xcc;
  EXPECT_NE(why_malformed(other).find("saved bytes"), std::string::npos);
  JumpPlan none = by_hand(nop5_ret, 6);
  none.covered.clear();
  EXPECT_NE(why_malformed(none), "");
  EXPECT_EQ(why_malformed(by_hand(nop5_ret, 6)), "");
}

TEST(MalformedPlan, IsAnErrorWhereItWouldBecomeBytes) {
  Bytes code = {0x8d, 0x47, 0x01, 0xc3};
  for (PlanRole role : {PlanRole::Entry, PlanRole::Call}) {
    JumpPlan bad = by_hand(code, 4, role);
    EXPECT_THROW(JumpPatch::make(bad, RuntimeAddr(kFn + 0x1000)), Error);
    TrampolineSpec spec;
    spec.address = RuntimeAddr(kFn + 0x1000);
    spec.hit_counter = RuntimeAddr(kFn + 0x2000);
    std::string why;
    EXPECT_THROW(build_trampoline(bad, spec, why), Error);

    auto layout = jump::AreaLayout::of({4, 4096, 0, 0});
    Bytes area(layout.size, 0);
    jump::AreaWriter w(area, RuntimeAddr(kArea), layout, 1);
    EXPECT_THROW(w.add_site(bad, selftest::site_options(1), why), Error);
    // Nothing written: no site, no trampoline.
    EXPECT_EQ(reinterpret_cast<const jump::AreaHeader*>(area.data())->site_count, 0u);
    EXPECT_EQ(
        std::count(area.begin() + static_cast<std::ptrdiff_t>(layout.code_offset), area.end(), 0),
        static_cast<std::ptrdiff_t>(layout.size - layout.code_offset));
  }
}

TEST(MalformedPlan, APatchOfNoJumpsLengthIsRefused) {
  Untouchable mem;
  for (std::size_t length :
       {std::size_t{0}, std::size_t{4}, kMaxPatchLength + 1, std::size_t{200}}) {
    JumpPatch p;
    p.site = RuntimeAddr(kFn);
    p.length = length;
    EXPECT_THROW(PatchSite(mem, p), Error) << length;
    EXPECT_THROW(restore(mem, p), Error) << length;
  }
}
