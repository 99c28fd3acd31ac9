// Issue 27 item 4: a USDT note's argument specs decoded (sizes, signs, registers and their
// parts, constants, OFFSET(%reg) memory), read against registers and a fake memory, strings
// copied to a bound with the truncation marked. The notes of python3.11 and libstdc++ give
// the forms; also the semaphore's arithmetic (never below zero, another tracer's count kept).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "common/error.hpp"
#include "tracer/core/semaphores.hpp"
#include "tracer/symbols/usdt_args.hpp"

namespace probecost {
namespace {

// Memory at [base, base + bytes.size()); anything else fails as /proc/PID/mem would.
class FakeMemory : public TraceeMemory {
 public:
  FakeMemory(std::uint64_t base, std::vector<std::uint8_t> bytes) : base_(base), bytes_(bytes) {}
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    if (at.value() < base_ || at.value() + out.size() > base_ + bytes_.size())
      throw Error("unmapped");
    std::memcpy(out.data(), bytes_.data() + (at.value() - base_), out.size());
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    if (at.value() < base_ || at.value() + in.size() > base_ + bytes_.size())
      throw Error("unmapped");
    std::memcpy(bytes_.data() + (at.value() - base_), in.data(), in.size());
  }
  std::uint64_t base_;
  std::vector<std::uint8_t> bytes_;
};

constexpr std::uint64_t kBase = 0x10000;

TEST(UsdtArgs, ParsesTheFormsTheNotesUse) {
  auto args = parse_usdt_args("8@%rbp -4@%eax -4@112(%rsp) 8@-80(%rbx) -4@$42 8@%r12 1@%r8b");
  ASSERT_EQ(args.size(), 7u);
  EXPECT_EQ(args[0].kind, UsdtArg::Kind::Register);
  EXPECT_EQ(args[0].size, 8);
  EXPECT_FALSE(args[0].is_signed);
  EXPECT_EQ(args[1].kind, UsdtArg::Kind::Register);
  EXPECT_TRUE(args[1].is_signed);
  EXPECT_EQ(args[1].reg_bits, 32);
  EXPECT_EQ(args[2].kind, UsdtArg::Kind::Memory);
  EXPECT_EQ(args[2].value, 112);
  EXPECT_EQ(args[3].kind, UsdtArg::Kind::Memory);
  EXPECT_EQ(args[3].value, -80);
  EXPECT_EQ(args[4].kind, UsdtArg::Kind::Constant);
  EXPECT_EQ(args[4].value, 42);
  EXPECT_EQ(args[6].reg_bits, 8);
  for (const char* bad : {"8@foo(%rip)", "8@(%rax,%rbx,8)", "3@%rax", "8@%xmm0", "x@%rax", "8"})
    EXPECT_EQ(parse_usdt_args(bad).at(0).kind, UsdtArg::Kind::Unsupported) << bad;
  EXPECT_TRUE(parse_usdt_args("").empty());
}

TEST(UsdtArgs, ValuesAreSizedAndSignedAsTheSpecSays) {
  user_regs_struct regs{};
  regs.rax = 0xffffffff'fffffffdull;  // %eax = -3
  regs.rbx = 0x1234'5678'9abc'def0ull;
  regs.rsp = kBase;
  regs.r8 = 0x1ff;
  std::vector<std::uint8_t> mem(256, 0);
  std::int32_t minus7 = -7;
  std::memcpy(mem.data() + 112, &minus7, 4);
  FakeMemory memory(kBase, mem);
  auto v = [&](const char* spec) { return usdt_arg_value(parse_usdt_args(spec)[0], regs, memory); };
  EXPECT_EQ(v("-4@%eax"), -3);
  EXPECT_EQ(v("4@%eax"), 0xfffffffd);
  EXPECT_EQ(v("-8@%rax"), -3);
  EXPECT_EQ(v("2@%bx"), 0xdef0);
  EXPECT_EQ(v("-2@%bx"), static_cast<std::int16_t>(0xdef0));
  EXPECT_EQ(v("1@%bh"), 0xde);
  EXPECT_EQ(v("1@%r8b"), 0xff);
  EXPECT_EQ(v("-1@%r8b"), -1);
  EXPECT_EQ(v("-4@112(%rsp)"), -7);
  EXPECT_EQ(v("4@112(%rsp)"), 0xfffffff9);
  EXPECT_EQ(v("-4@$-1"), -1);
  EXPECT_EQ(v("1@$300"), 300 & 0xff);
  EXPECT_EQ(v("8@4096(%rsp)"), std::nullopt);  // unmapped
  EXPECT_EQ(v("8@foo(%rip)"), std::nullopt);   // unsupported
}

TEST(UsdtArgs, StringsAreCopiedToABoundWithTheTruncationMarked) {
  std::vector<std::uint8_t> mem(256, 0);
  std::strcpy(reinterpret_cast<char*>(mem.data()), "/tmp/w.py");
  std::strcpy(reinterpret_cast<char*>(mem.data() + 32), "abcdefghijklmnopqrstuvwxyz");
  mem[100] = 0x01;                                       // not text
  for (std::size_t i = 200; i < 256; ++i) mem[i] = 'x';  // runs off the end of the mapping
  FakeMemory memory(kBase, mem);
  EXPECT_EQ(usdt_arg_string(kBase, memory), "/tmp/w.py");
  EXPECT_EQ(usdt_arg_string(kBase + 32, memory, 10), "abcdefghij...");
  EXPECT_EQ(usdt_arg_string(kBase + 32, memory, 26), "abcdefghijklmnopqrstuvwxyz");
  EXPECT_EQ(usdt_arg_string(kBase + 100, memory), std::nullopt);
  EXPECT_EQ(usdt_arg_string(kBase + 64, memory), std::nullopt);   // empty
  EXPECT_EQ(usdt_arg_string(42, memory), std::nullopt);           // a number
  EXPECT_EQ(usdt_arg_string(kBase + 200, memory), std::nullopt);  // unreadable before its end
  user_regs_struct regs{};
  regs.rbp = kBase;
  regs.r12 = kBase + 32;
  regs.rax = 7;
  EXPECT_EQ(usdt_args_text(parse_usdt_args("8@%rbp 8@%r12 -4@%eax 8@foo(%rip)"), regs, memory, 5),
            "\"/tmp/...\", \"abcde...\", 7, ?");
}

TEST(UsdtSemaphores, RaisedOnceLoweredOnceNeverBelowZeroAndAnotherCountKept) {
  FakeMemory memory(kBase, std::vector<std::uint8_t>(16, 0));
  RuntimeAddr at(kBase + 2), other(kBase + 4);
  memory.bytes_[2] = 1;  // another tracer's count
  Semaphores s;
  RuntimeAddr site(0x1000), other_site(0x2000);
  s.raise(memory, at, {}, nullptr, site);
  s.raise(memory, at, {}, nullptr, RuntimeAddr(0x1010));  // a second site of the same marker
  s.raise(memory, other, {}, nullptr, other_site);
  EXPECT_EQ(Semaphores::value(memory, at), 2);
  EXPECT_EQ(Semaphores::value(memory, other), 1);
  FakeMemory child = memory;
  // A fork child whose copy holds the first site but came before the other's: only the raise
  // made with the site it holds is lowered there.
  s.lower_copy(child, [&](RuntimeAddr w) { return w == site; });
  EXPECT_EQ(Semaphores::value(child, at), 1);
  EXPECT_EQ(Semaphores::value(child, other), 1);
  EXPECT_EQ(Semaphores::value(memory, at), 2);
  memory.bytes_[4] = 0;  // zeroed behind our back: stays zero
  s.lower_all(memory, nullptr);
  EXPECT_EQ(Semaphores::value(memory, at), 1);
  EXPECT_EQ(Semaphores::value(memory, other), 0);
  EXPECT_TRUE(s.empty());
  s.lower_all(memory, nullptr);  // nothing more to lower
  EXPECT_EQ(Semaphores::value(memory, at), 1);
}

// Issue 23: the table restore reads (semaphore_table.hpp). A record says raised only once the
// raise is made, lowered before the lowering, in a fork child's copy as in the parent; a
// table the tracee garbled is refused whole, with why.
constexpr std::uint64_t kTable = 0x20000;

std::vector<sema::Raise> records_of(TraceeMemory& memory) {
  std::vector<std::uint8_t> bytes(sema::kTableSize);
  memory.read(RuntimeAddr(kTable), bytes);
  std::string why;
  auto t = sema::parse_table(bytes, RuntimeAddr(kTable), why);
  EXPECT_TRUE(t) << why;
  return t ? t->records : std::vector<sema::Raise>{};
}

TEST(UsdtSemaphores, EachRaiseIsRecordedInTheTableAndMarkedLoweredFirst) {
  // One address space: the semaphores at kBase, the table at kTable.
  FakeMemory memory(kBase, std::vector<std::uint8_t>(kTable - kBase + sema::kTableSize, 0));
  Semaphores s;
  s.set_table(sema::TableWriter(memory, RuntimeAddr(kTable), 4242));
  RuntimeAddr at(kBase + 2), other(kBase + 4);
  s.raise(memory, at, {1, 2, 3}, nullptr, RuntimeAddr(0x1000));
  s.raise(memory, at, {1, 2, 3}, nullptr, RuntimeAddr(0x1010));  // the same semaphore: one record
  s.raise(memory, other, {1, 2, 5}, nullptr, RuntimeAddr(0x2000));
  auto r = records_of(memory);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].address, at);
  EXPECT_EQ(r[0].witness, RuntimeAddr(0x1000));
  EXPECT_EQ(r[0].file, (trap::FileIdentity{1, 2, 3}));
  EXPECT_EQ(r[0].state, sema::kRaised);
  EXPECT_EQ(r[1].state, sema::kRaised);
  // A fork child's copy: the raise whose witness it holds is lowered there and its record
  // marked; the other's record stays raised, as its count does; the parent's are untouched.
  FakeMemory child = memory;
  s.lower_copy(child, [](RuntimeAddr w) { return w == RuntimeAddr(0x1000); });
  r = records_of(child);
  EXPECT_EQ(r[0].state, sema::kLowered);
  EXPECT_EQ(r[1].state, sema::kRaised);
  EXPECT_EQ(Semaphores::value(child, at), 0);
  EXPECT_EQ(Semaphores::value(child, other), 1);
  // A followed child takes over the raises and the table, written in its own copy.
  FakeMemory followed = memory;
  Semaphores f;
  f.adopt(
      s, [](RuntimeAddr) { return true; }, followed);
  f.lower_all(followed, nullptr);
  for (const auto& x : records_of(followed)) EXPECT_EQ(x.state, sema::kLowered);
  s.forget(other, nullptr);  // its library went
  r = records_of(memory);
  EXPECT_EQ(r[0].state, sema::kRaised);
  EXPECT_EQ(r[1].state, sema::kForgotten);
  s.lower_all(memory, nullptr);
  r = records_of(memory);
  EXPECT_EQ(r[0].state, sema::kLowered);
  EXPECT_EQ(Semaphores::value(memory, at), 0);
}

TEST(UsdtSemaphores, ATableTheTraceeGarbledIsRefusedWithWhy) {
  FakeMemory table(kTable, std::vector<std::uint8_t>(sema::kTableSize, 0));
  sema::TableWriter w(table, RuntimeAddr(kTable), 4242);
  ASSERT_TRUE(w.add(RuntimeAddr(kBase), RuntimeAddr(0x1000), {1, 2, 3}));
  auto refused = [&](auto&& garble) {
    FakeMemory copy = table;
    garble(copy.bytes_);
    std::string why;
    EXPECT_FALSE(sema::parse_table(copy.bytes_, RuntimeAddr(kTable), why));
    return why;
  };
  EXPECT_NE(refused([](auto& b) { b[0] = 'x'; }).find("magic"), std::string::npos);
  EXPECT_NE(
      refused([](auto& b) { b[offsetof(sema::TableHeader, area_size)] = 0x20; }).find("checksum"),
      std::string::npos);
  EXPECT_NE(refused([](auto& b) {
              b[offsetof(sema::TableHeader, count)] = 200;
            }).find("above its capacity"),
            std::string::npos);
  EXPECT_NE(refused([](auto& b) {
              b[sizeof(sema::TableHeader) + offsetof(sema::TableRecord, state)] = 9;
            }).find("unknown state"),
            std::string::npos);
  std::string why;
  EXPECT_FALSE(sema::parse_table(std::span(table.bytes_).first(100), RuntimeAddr(kTable), why));
  EXPECT_FALSE(sema::parse_table(table.bytes_, RuntimeAddr(kTable + 4096), why));
  EXPECT_NE(why.find("says it is mapped at"), std::string::npos) << why;
  EXPECT_EQ(records_of(table).size(), 1u);
}

}  // namespace
}  // namespace probecost
