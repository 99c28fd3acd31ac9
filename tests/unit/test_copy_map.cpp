// Where relocated copies run (breakpoint/x86/copy_map.hpp): the map itself, the out-of-line
// copies the Outliner registers, and the first copy of a trampoline's displaced block. The fault
// fix-up that uses them (tracer/core/fault_fixup.hpp) is exercised on live programs by the fault
// suite (safefetch, parked-handler) and the torture suite.
#include <gtest/gtest.h>

#include <map>

#include "breakpoint/in_tracee/trampoline.hpp"
#include "breakpoint/int3/outline.hpp"
#include "breakpoint/x86/copy_map.hpp"

using namespace probecost;

namespace {

class FakeMemory : public TraceeMemory {
 public:
  std::map<std::uint64_t, std::uint8_t> bytes;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes[at.value() + i];
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    for (std::size_t i = 0; i < in.size(); ++i) bytes[at.value() + i] = in[i];
  }
};

Instruction decoded(std::vector<std::uint8_t> bytes, std::uint64_t at) {
  auto in = decode(bytes, RuntimeAddr(at));
  EXPECT_TRUE(in);
  return *in;
}

}  // namespace

TEST(CopyMap, MapsACopysStartToItsOriginalAndBack) {
  CopyMap m;
  EXPECT_TRUE(m.empty());
  m.add(RuntimeAddr(0x7000), RuntimeAddr(0x401010));
  m.add(RuntimeAddr(0x7020), RuntimeAddr(0x401020));
  EXPECT_EQ(m.original_of(RuntimeAddr(0x7020)), RuntimeAddr(0x401020));
  EXPECT_EQ(m.copy_of(RuntimeAddr(0x401010)), RuntimeAddr(0x7000));
  // A fault's RIP is where an instruction starts: the middle of a copy, or the jump back after
  // it, is no instruction of the program's.
  EXPECT_FALSE(m.original_of(RuntimeAddr(0x7001)));
  EXPECT_FALSE(m.copy_of(RuntimeAddr(0x401011)));
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_FALSE(m.original_of(RuntimeAddr(0x7000)));
}

TEST(CopyMap, TheNewestCopyOfAnInstructionWins) {
  CopyMap m;
  m.add(RuntimeAddr(0x7000), RuntimeAddr(0x401010));
  m.add(RuntimeAddr(0x8000), RuntimeAddr(0x401010));
  EXPECT_EQ(m.copy_of(RuntimeAddr(0x401010)), RuntimeAddr(0x8000));
  EXPECT_EQ(m.original_of(RuntimeAddr(0x7000)), RuntimeAddr(0x401010));
  EXPECT_EQ(m.original_of(RuntimeAddr(0x8000)), RuntimeAddr(0x401010));
}

TEST(CopyMap, TheOutlinerRegistersEachCopyItPlaces) {
  FakeMemory mem;
  CopyMap m;
  const std::uint64_t page = 0x10000000;
  Outliner out(
      mem, [&](RuntimeAddr) { return std::optional<RuntimeAddr>(RuntimeAddr(page)); }, &m);
  // mov (%rdi),%eax (may fault), then ud2 (faults): each copy knows its original.
  std::string why;
  bool later = false;
  auto a = out.place(decoded({0x8b, 0x07}, 0x401000), why, later);
  auto b = out.place(decoded({0x0f, 0x0b}, 0x401234), why, later);
  ASSERT_TRUE(a && b) << why;
  EXPECT_EQ(m.original_of(*a), RuntimeAddr(0x401000));
  EXPECT_EQ(m.original_of(*b), RuntimeAddr(0x401234));
  EXPECT_EQ(mem.bytes[a->value()], 0x8b);
}

TEST(CopyMap, ATrampolinesBlockStartsWithTheFirstDisplacedInstruction) {
  // mov (%rdi),%eax; add $1,%eax; nop; ret: a jump at the load displaces the first two.
  std::vector<std::uint8_t> code = {0x8b, 0x07, 0x83, 0xc0, 0x01, 0x90, 0xc3};
  std::string why;
  auto plan = plan_jump(RuntimeAddr(0x401000), code, RuntimeAddr(0x401000), why);
  ASSERT_TRUE(plan) << why;
  TrampolineSpec spec;
  spec.address = RuntimeAddr(0x402000);
  spec.hit_counter = RuntimeAddr(0x403000);
  auto t = build_trampoline(*plan, spec, why);
  ASSERT_TRUE(t) << why;
  ASSERT_TRUE(t->block);
  std::int64_t at = *t->block - t->address;
  ASSERT_GT(at, 0);
  EXPECT_EQ(t->code[at], 0x8b);
  EXPECT_EQ(t->code[at + 1], 0x07);
  ASSERT_EQ(t->copies.size(), 1u);
  EXPECT_EQ(t->copies[0].first, RuntimeAddr(0x401002));
  EXPECT_EQ(t->copies[0].second, *t->block + 2);
  // Then the jump back to the instruction after the displaced ones (the plan's end).
  ASSERT_TRUE(t->jump_back);
  EXPECT_EQ(*t->jump_back, *t->block + 5);
  auto back =
      decode(std::span(t->code).subspan(static_cast<std::size_t>(*t->jump_back - t->address)),
             *t->jump_back);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->flow, Instruction::Flow::RelJump);
  EXPECT_EQ(back->target, plan->end());
}

// Detach (tracer/core/copy_exits.hpp) moves a thread, or a signal frame's saved RIP, from a copy to
// where the program's own code does the same: the copy's start is the original instruction,
// the copy's jump back the instruction after it.
TEST(CopyMap, AThreadInACopyGoesOnInTheOriginalCode) {
  CopyMap m;
  m.add(RuntimeAddr(0x7000), RuntimeAddr(0x401010));
  m.add_jump_back(RuntimeAddr(0x7001), RuntimeAddr(0x401011));
  EXPECT_EQ(m.in_original(RuntimeAddr(0x7000)), RuntimeAddr(0x401010));
  EXPECT_EQ(m.in_original(RuntimeAddr(0x7001)), RuntimeAddr(0x401011));
  EXPECT_FALSE(m.in_original(RuntimeAddr(0x7002)));    // inside the jump back's bytes
  EXPECT_FALSE(m.in_original(RuntimeAddr(0x401010)));  // the original itself: nothing to do
  // A jump back raises no fault: the fault fix-up knows only the copies' starts.
  EXPECT_FALSE(m.original_of(RuntimeAddr(0x7001)));
  EXPECT_FALSE(m.copy_of(RuntimeAddr(0x401011)));
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_FALSE(m.in_original(RuntimeAddr(0x7001)));
}

TEST(CopyMap, TheOutlinerRegistersEachCopysJumpBack) {
  FakeMemory mem;
  CopyMap m;
  const std::uint64_t page = 0x10000000;
  Outliner out(
      mem, [&](RuntimeAddr) { return std::optional<RuntimeAddr>(RuntimeAddr(page)); }, &m);
  std::string why;
  bool later = false;
  // push %rbx (1 byte), then a 3-byte mov: each copy is the instruction, then its jump back.
  auto a = out.place(decoded({0x53}, 0x401000), why, later);
  auto b = out.place(decoded({0x48, 0x89, 0xe5}, 0x401100), why, later);
  ASSERT_TRUE(a && b) << why;
  EXPECT_EQ(m.in_original(*a), RuntimeAddr(0x401000));
  EXPECT_EQ(m.in_original(*a + 1), RuntimeAddr(0x401001));
  EXPECT_EQ(m.in_original(*b), RuntimeAddr(0x401100));
  EXPECT_EQ(m.in_original(*b + 3), RuntimeAddr(0x401103));
  EXPECT_FALSE(m.in_original(*b + 1));
}
