// Where code no file holds leads out of itself (breakpoint/x86/code_walk.hpp): what jump planning
// follows from a thread's PC in a scratch page or trampoline a previous probecost left mapped.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "breakpoint/int3/outline.hpp"
#include "breakpoint/x86/code_walk.hpp"
#include "common/error.hpp"

using namespace probecost;

namespace {

// Bytes at given addresses; reading anything else fails, as an unmapped page does.
class FakeMemory : public TraceeMemory {
 public:
  std::map<std::uint64_t, std::uint8_t> bytes;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto it = bytes.find(at.value() + i);
      if (it == bytes.end()) throw Error("unmapped");
      out[i] = it->second;
    }
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    for (std::size_t i = 0; i < in.size(); ++i) bytes[at.value() + i] = in[i];
  }
  void put(std::uint64_t at, std::vector<std::uint8_t> code) { write(RuntimeAddr(at), code); }
};

constexpr std::uint64_t kPage = 0x7f0000000000, kPageEnd = kPage + 4096;

std::vector<RuntimeAddr> walk(FakeMemory& mem, std::uint64_t pc) {
  return exits_from(mem, RuntimeAddr(pc), RuntimeAddr(kPage), RuntimeAddr(kPageEnd));
}

}  // namespace

TEST(CodeWalk, AnOutOfLineCopyLeadsToTheInstructionAfterItsOriginal) {
  // The Outliner's own copy of `push %rbx` at 0x7f00401000, near enough for a rel32 jump back,
  // and of one far away (jmp *0(%rip) and the 8-byte target).
  for (std::uint64_t original : {0x7f0000401000ull, 0x401000ull}) {
    FakeMemory mem;
    Outliner out(mem, [](RuntimeAddr) { return std::optional<RuntimeAddr>(RuntimeAddr(kPage)); });
    std::string why;
    bool later = false;
    auto in = decode(std::vector<std::uint8_t>{0x53}, RuntimeAddr(original));
    ASSERT_TRUE(in);
    auto slot = out.place(*in, why, later);
    ASSERT_TRUE(slot) << why;
    std::vector<RuntimeAddr> want{RuntimeAddr(original + 1)};
    EXPECT_EQ(walk(mem, slot->value()), want);      // from the copy's start
    EXPECT_EQ(walk(mem, slot->value() + 1), want);  // from its jump back
  }
}

TEST(CodeWalk, BothSidesOfABranchAndCallsAreFollowedLoopsOnce) {
  FakeMemory mem;
  // 0: test %ecx,%ecx; 2: jz -4 (back to 0: a loop); 4: jne +0x100 (to 0x106, in the page);
  // 10: call rel32 to the page before (out); 15: ret.  0x106: jmp rel32 to the page after.
  mem.put(kPage, {0x85, 0xc9, 0x74, 0xfc, 0x0f, 0x85, 0xfc, 0x00, 0x00, 0x00});
  auto rel = [](std::uint64_t from_next, std::uint64_t to) {
    auto d = static_cast<std::int32_t>(to - from_next);
    std::vector<std::uint8_t> b(4);
    std::memcpy(b.data(), &d, 4);
    return b;
  };
  auto call = rel(kPage + 15, kPage - 4096);
  mem.put(kPage + 10, {0xe8, call[0], call[1], call[2], call[3], 0xc3});
  auto jmp = rel(kPage + 0x106 + 5, kPageEnd);
  mem.put(kPage + 0x106, {0xe9, jmp[0], jmp[1], jmp[2], jmp[3]});
  std::vector<RuntimeAddr> want{RuntimeAddr(kPage - 4096), RuntimeAddr(kPageEnd)};
  EXPECT_EQ(walk(mem, kPage), want);
}

TEST(CodeWalk, ReturnsIndirectJumpsAndUnreadableCodeEndAPath) {
  FakeMemory mem;
  mem.put(kPage, {0xc3});             // ret
  mem.put(kPage + 16, {0xff, 0xe0});  // jmp *%rax
  mem.put(kPage + 32, {0x90, 0x90});  // nops into bytes nobody can read
  EXPECT_TRUE(walk(mem, kPage).empty());
  EXPECT_TRUE(walk(mem, kPage + 16).empty());
  EXPECT_TRUE(walk(mem, kPage + 32).empty());
  // Falling off the end of the mapping leads out of it.
  mem.put(kPageEnd - 1, {0x90});
  EXPECT_EQ(walk(mem, kPageEnd - 1), std::vector<RuntimeAddr>{RuntimeAddr(kPageEnd)});
}
