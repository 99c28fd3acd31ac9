#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "breakpoint/int3/outline.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "breakpoint/x86/emulate.hpp"

using namespace probecost;

namespace {

// EFLAGS the CPU itself produces for a 64-bit add/sub.
unsigned long long cpu_flags(std::uint64_t a, std::uint64_t b, bool subtract) {
  unsigned long long flags;
  if (subtract) {
    asm volatile("sub %2, %1\n\tpushfq\n\tpop %0" : "=r"(flags), "+r"(a) : "r"(b) : "cc");
  } else {
    asm volatile("add %2, %1\n\tpushfq\n\tpop %0" : "=r"(flags), "+r"(a) : "r"(b) : "cc");
  }
  return flags;
}

constexpr unsigned long long kArith = 0x8d5;  // CF PF AF ZF SF OF

class StackMemory : public TraceeMemory {
 public:
  std::map<std::uint64_t, std::uint8_t> bytes;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes[at.value() + i];
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    for (std::size_t i = 0; i < in.size(); ++i) bytes[at.value() + i] = in[i];
  }
  std::uint64_t word(std::uint64_t at) {
    std::uint64_t v = 0;
    read(RuntimeAddr(at), {reinterpret_cast<std::uint8_t*>(&v), 8});
    return v;
  }
};

Instruction decode_at(std::initializer_list<std::uint8_t> bytes, std::uint64_t at) {
  std::vector<std::uint8_t> v(bytes);
  auto in = decode(v, RuntimeAddr(at));
  EXPECT_TRUE(in.has_value());
  return in.value_or(Instruction{});
}

}  // namespace

TEST(Emulate, AddSubFlagsMatchTheCpu) {
  std::mt19937_64 rng(42);
  std::vector<std::uint64_t> edge = {
      0, 1, 0x18, 0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff, 0x10, 0xf};
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t a = i < 64 ? edge[i % 8] : rng();
    std::uint64_t b = i < 64 ? edge[i / 8] : (i % 3 ? rng() % 0x100 : rng());
    for (bool sub : {false, true}) {
      ASSERT_EQ(flags_after_addsub(0x202, a, b, sub) & kArith, cpu_flags(a, b, sub) & kArith)
          << std::hex << a << (sub ? " - " : " + ") << b;
    }
  }
}

TEST(Emulate, ConditionsFollowTheFlags) {
  constexpr unsigned long long CF = 1, ZF = 0x40, SF = 0x80, OF = 0x800;
  EXPECT_TRUE(condition_holds(0x4, ZF));        // jz
  EXPECT_FALSE(condition_holds(0x5, ZF));       // jnz
  EXPECT_TRUE(condition_holds(0x2, CF));        // jb
  EXPECT_TRUE(condition_holds(0x7, 0));         // ja: !CF && !ZF
  EXPECT_TRUE(condition_holds(0xc, SF));        // jl: SF != OF
  EXPECT_FALSE(condition_holds(0xc, SF | OF));  // jl
  EXPECT_TRUE(condition_holds(0xe, ZF));        // jle
  EXPECT_TRUE(condition_holds(0xf, SF | OF));   // jg
}

TEST(Emulate, PushCallRetMoveTheStack) {
  StackMemory mem;
  user_regs_struct r{};
  r.rsp = 0x7000;
  r.rdi = 0x1234;
  r.rip = 0x400000;
  EXPECT_FALSE(emulate(decode_at({0x57}, 0x400000), r, mem));  // push %rdi
  EXPECT_EQ(r.rsp, 0x6ff8u);
  EXPECT_EQ(mem.word(0x6ff8), 0x1234u);
  EXPECT_EQ(r.rip, 0x400001u);
  emulate(decode_at({0xe8, 0x10, 0, 0, 0}, 0x400001), r, mem);  // call +0x10
  EXPECT_EQ(r.rip, 0x400016u);
  EXPECT_EQ(mem.word(r.rsp), 0x400006u);
  emulate(decode_at({0xc3}, 0x400016), r, mem);  // ret
  EXPECT_EQ(r.rip, 0x400006u);
  emulate(decode_at({0x58}, 0x400006), r, mem);  // pop %rax
  EXPECT_EQ(r.rax, 0x1234u);
  EXPECT_EQ(r.rsp, 0x7000u);
}

TEST(Emulate, LeaAndMov) {
  StackMemory mem;
  user_regs_struct r{};
  r.rdi = 10;
  emulate(decode_at({0x48, 0x8d, 0x44, 0x7f, 0x05}, 0x1000), r, mem);  // lea 5(%rdi,%rdi,2),%rax
  EXPECT_EQ(r.rax, 35u);
  emulate(decode_at({0x48, 0x8d, 0x05, 0x10, 0, 0, 0}, 0x1000), r, mem);  // lea 0x10(%rip),%rax
  EXPECT_EQ(r.rax, 0x1017u);
  r.rsi = 0xffffffff00000005;
  emulate(decode_at({0x89, 0xf1}, 0x1000), r, mem);  // mov %esi,%ecx zero-extends
  EXPECT_EQ(r.rcx, 5u);
}

TEST(Decode, KindsAndLengths) {
  EXPECT_EQ(decode_at({0xf3, 0x0f, 0x1e, 0xfa}, 0).kind, Instruction::Kind::Nop);  // endbr64
  EXPECT_EQ(decode_at({0x0f, 0x1f, 0x44, 0, 0}, 0).length, 5);
  auto jz = decode_at({0x74, 0x10}, 0x100);
  EXPECT_EQ(jz.kind, Instruction::Kind::Jcc);
  EXPECT_EQ(jz.target.value(), 0x112u);
  auto tls = decode_at({0x64, 0x48, 0x83, 0x04, 0x25, 0xf0, 0xff, 0xff, 0xff, 0x01}, 0);
  EXPECT_EQ(tls.kind, Instruction::Kind::Other);
  EXPECT_TRUE(tls.uses_segment_fs_gs);
  std::vector<std::uint8_t> junk = {0x0f, 0xff};
  EXPECT_FALSE(decode(junk, RuntimeAddr(0)).has_value());
}

TEST(Emulate, IndirectJumpTargets) {
  StackMemory mem;
  user_regs_struct r{};
  r.r11 = 0x7000;
  EXPECT_EQ(jump_target(decode_at({0x41, 0xff, 0xe3}, 0x1000), r, mem), RuntimeAddr(0x7000));
  // jmp *(%rax,%rdx,8): the second slot of a table at 0x2000
  r.rax = 0x2000;
  r.rdx = 1;
  mem.write(RuntimeAddr(0x2008), {reinterpret_cast<const std::uint8_t*>(&r.r11), 8});
  EXPECT_EQ(jump_target(decode_at({0xff, 0x24, 0xd0}, 0x1000), r, mem), RuntimeAddr(0x7000));
  // jmp *0x10(%rip) at 0x1ff2 (6 bytes): the slot at 0x2008
  EXPECT_EQ(jump_target(decode_at({0xff, 0x25, 0x10, 0, 0, 0}, 0x1ff2), r, mem),
            RuntimeAddr(0x7000));
  // jmp *%fs:0x10: its operand is not one the tracer reads; nor is a direct jmp's
  auto tls = decode_at({0x64, 0xff, 0x24, 0x25, 0x10, 0, 0, 0}, 0x1000);
  EXPECT_EQ(tls.flow, Instruction::Flow::IndirectJump);
  EXPECT_FALSE(tls.target_operand);
  EXPECT_FALSE(jump_target(tls, r, mem));
  EXPECT_FALSE(jump_target(decode_at({0xeb, 0x10}, 0x1000), r, mem));
}

TEST(Relocate, RipRelativeOperandKeepsItsTarget) {
  // mov 0x100(%rip),%rax at 0x401000: reads 0x401107.
  auto in = decode_at({0x48, 0x8b, 0x05, 0x00, 0x01, 0, 0}, 0x401000);
  std::string why;
  auto copy = relocate(in, RuntimeAddr(0x500000), why);
  ASSERT_FALSE(copy.empty()) << why;
  auto moved = decode(copy, RuntimeAddr(0x500000));
  ASSERT_TRUE(moved);
  std::int32_t disp;
  std::memcpy(&disp, copy.data() + 3, 4);
  EXPECT_EQ(0x500000 + 7 + static_cast<std::int64_t>(disp), 0x401107);
  // Followed by a jmp back to the next instruction, 0x401007.
  auto back = decode(std::span(copy).subspan(7), RuntimeAddr(0x500007));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, Instruction::Kind::JmpRel);
  EXPECT_EQ(back->target.value(), 0x401007u);
}

TEST(Relocate, ShortBranchBecomesRel32AndFarJumpBackIsAbsolute) {
  auto jz = decode_at({0x74, 0x10}, 0x401000);  // jz 0x401012
  std::string why;
  auto copy = relocate(jz, RuntimeAddr(0x7f0000000000), why);
  EXPECT_TRUE(copy.empty());  // a rel32 cannot reach the target from 2^46 away: refused
  EXPECT_NE(why.find("out of reach"), std::string::npos) << why;
  copy = relocate(jz, RuntimeAddr(0x402000), why);
  auto moved = decode(copy, RuntimeAddr(0x402000));
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->length, 6);
  EXPECT_EQ(moved->target.value(), 0x401012u);
  auto nop = decode_at({0x90}, 0x401000);
  copy = relocate(nop, RuntimeAddr(0x7f0000000000), why);
  ASSERT_EQ(copy.size(), 1u + 14u);  // nop + jmp *0(%rip) + 8-byte address
  EXPECT_EQ(copy[1], 0xff);
}

TEST(Relocate, RefusesACall) {
  std::string why;
  EXPECT_TRUE(relocate(decode_at({0xe8, 0, 0, 0, 0}, 0x1000), RuntimeAddr(0x2000), why).empty());
  EXPECT_NE(why.find("call"), std::string::npos);
}
