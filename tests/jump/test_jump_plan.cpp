// Planning jump patches, relocating, generating trampolines and writing the patch, on bytes
// given here (nothing runs): what is accepted, what is refused and why, which bytes are written
// and in which order.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "breakpoint/in_tracee/trampoline.hpp"
#include "breakpoint/int3/site.hpp"
#include "breakpoint/jump/patch_site.hpp"
#include "breakpoint/x86/relocate.hpp"
#include "common/error.hpp"

using namespace probecost;

namespace {

using Bytes = std::vector<std::uint8_t>;
constexpr std::uint64_t kFn = 0x401000;

std::optional<JumpPlan> plan(const Bytes& code, std::uint64_t site_offset, std::string& why) {
  return plan_jump(RuntimeAddr(kFn), code, RuntimeAddr(kFn + site_offset), why);
}

// Expects a refusal whose reason contains `reason`.
void refused(const Bytes& code, std::uint64_t site_offset, const std::string& reason) {
  std::string why;
  EXPECT_FALSE(plan(code, site_offset, why)) << "expected a refusal: " << reason;
  EXPECT_NE(why.find(reason), std::string::npos) << "reason: " << why;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

const Bytes kNop5 = {0x0f, 0x1f, 0x44, 0x00, 0x00};
const Bytes kRet = {0xc3};
const Bytes kPushRbp = {0x55};
const Bytes kMovRbpRsp = {0x48, 0x89, 0xe5};
const Bytes kMovRaxRdi = {0x48, 0x89, 0xf8};
const Bytes kCmpRdi5 = {0x48, 0x83, 0xff, 0x05};
const Bytes kSetz = {0x0f, 0x94, 0xc1};

TrampolineSpec spec(RuntimeAddr at, RuntimeAddr counter) {
  TrampolineSpec s;
  s.address = at;
  s.hit_counter = counter;
  return s;
}

}  // namespace

TEST(JumpPlan, Nop5AtEntryCoversOneInstruction) {
  std::string why;
  auto p = plan(cat({kNop5, kRet}), 0, why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->covered.size(), 1u);
  EXPECT_EQ(p->length, 5u);
  EXPECT_EQ(Bytes(p->original_bytes().begin(), p->original_bytes().end()), kNop5);
}

TEST(JumpPlan, PrologueCoversWholeInstructions) {
  std::string why;
  auto p = plan(cat({kPushRbp, kMovRbpRsp, kMovRaxRdi, {0x5d}, kRet}), 0, why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->covered.size(), 3u);  // 1 + 3 bytes are not enough; the third makes 7
  EXPECT_EQ(p->length, 7u);
}

TEST(JumpPlan, SiteMustBeAnInstructionBoundaryInsideTheFunction) {
  refused(cat({kNop5, kNop5, kRet}), 2, "instruction boundary");
  refused(cat({kNop5, kRet}), 6, "outside the function");
}

TEST(JumpPlan, RefusesWhatCannotRunFromTheTrampoline) {
  refused(cat({{0xe8, 0, 0, 0, 0}, kRet}), 0, "call");                 // call rel32
  refused(cat({{0xff, 0xd0}, kNop5, kRet}), 0, "call");                // call *%rax
  refused(cat({{0x0f, 0x05}, kNop5, kRet}), 0, "system call");         // syscall
  refused(cat({{0x0f, 0x34}, kNop5, kRet}), 0, "system call");         // sysenter
  refused(cat({{0xcc}, kNop5, kRet}), 0, "trap");                      // int3
  refused(cat({{0xcd, 0x80}, kNop5, kRet}), 0, "trap");                // int $0x80
  refused(cat({{0x90}, kRet, kNop5, kRet}), 0, "returns");             // ret in range
  refused(cat({{0xe2, 0x05}, kNop5, kRet}), 0, "loop/jrcxz");          // loop
  refused(cat({{0xe3, 0x05}, kNop5, kRet}), 0, "loop/jrcxz");          // jrcxz
  refused(cat({{0xc7, 0xf8, 0, 0, 0, 0}, kNop5, kRet}), 0, "xbegin");  // xbegin
  refused(cat({{0xff, 0x2c, 0x24}, kNop5, kRet}), 0, "far branch");    // ljmp *(%rsp)
}

TEST(JumpPlan, RefusesAFunctionTooShort) {
  refused(cat({kMovRaxRdi, kRet}), 0, "the function ends 4 bytes after the site");
  refused(cat({kNop5, kNop5, {0x90, 0x90}, kRet}), 10, "ends 3 bytes after");
}

TEST(JumpPlan, RefusesABranchIntoThePatchedRange) {
  // nop; add %rdi,%rax; dec %ecx; jnz -> the add, at site+1.
  Bytes loop = {0x90, 0x48, 0x01, 0xf8, 0xff, 0xc9, 0x75, 0xf9, 0xc3};
  refused(loop, 0, "branches to 0x401001");
  // The same from further down the function: jmp rel32 back to site+2 (inside a nop5).
  Bytes far = cat({kNop5, kNop5, {0xe9, 0xf3, 0xff, 0xff, 0xff}, kRet});  // jmp 0x401002
  refused(far, 0, "branches to 0x401002");
  // A branch to the site itself is fine: it goes through the jump.
  Bytes to_site = cat({kNop5, {0xeb, 0xf9}, kRet});  // jmp 0x401000
  std::string why;
  EXPECT_TRUE(plan(to_site, 0, why)) << why;
}

TEST(JumpPlan, AcceptsABranchFromInsideTheRangeToAnInstructionOfIt) {
  // jmp +1; ud2 ... as kinds.S's jmp8: eb 02 (jmp over ud2) 0f 0b, then 8 bytes of lock add.
  Bytes code = {0xeb, 0x02, 0x0f, 0x0b, 0x90, 0x90, 0x90, 0xc3};
  std::string why;
  auto p = plan(code, 0, why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->length, 5u);  // jmp8 (2) + ud2 (2) + nop (1)
}

TEST(JumpPlan, RefusesAFunctionWithAnIndirectJumpButNotATailCallThroughASlot) {
  Bytes table = cat({kNop5, {0xff, 0xe0}, kRet});  // jmp *%rax
  refused(table, 0, "indirect jump");
  Bytes memtable =
      cat({kNop5, {0xff, 0x24, 0xc5, 0, 0x10, 0x40, 0}, kRet});  // jmp *0x401000(,%rax,8)
  refused(memtable, 0, "indirect jump");
  Bytes got = cat({kNop5, {0xff, 0x25, 0x10, 0, 0, 0}});  // jmp *0x10(%rip): a tail call
  std::string why;
  EXPECT_TRUE(plan(got, 0, why)) << why;
}

TEST(JumpPlan, RefusesBytesThatDoNotDecode) {
  refused(cat({kNop5, {0x06}, kRet}), 0, "do not decode");  // push %es: not in 64-bit mode
}

TEST(JumpPlan, RefusesMoreThanSixteenBytes) {
  Bytes long_nop = {0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x2e, 0x0f,
                    0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00};  // 15-byte nop
  refused(cat({{0x90, 0x90, 0x90, 0x90}, long_nop, kRet}), 0, "19 bytes");
}

TEST(Relocate, BlockRetargetsBranchesInsideItAndRebiasesRipOperands) {
  // jz +6 (over a lock add to the mov); lock addq %rdi,0x100(%rip); mov %rdi,%rax
  Bytes code = {0x74, 0x08, 0xf0, 0x48, 0x01, 0x3d, 0x00, 0x01, 0x00, 0x00, 0x48, 0x89, 0xf8};
  std::vector<Instruction> block;
  for (std::size_t off = 0; off < code.size();) {
    auto in = decode(std::span(code).subspan(off), RuntimeAddr(kFn + off));
    ASSERT_TRUE(in);
    block.push_back(*in);
    off += in->length;
  }
  std::string why;
  RuntimeAddr at(0x500000);
  auto r = relocate_block(block, at, why);
  ASSERT_TRUE(r) << why;
  ASSERT_EQ(r->offsets, (std::vector<std::uint32_t>{0, 6, 14}));
  auto jz = decode(r->bytes, at);
  ASSERT_TRUE(jz);
  EXPECT_EQ(jz->length, 6);        // rel8 became rel32
  EXPECT_EQ(jz->target, at + 14);  // the copy of the mov, not the original
  auto add = decode(std::span(r->bytes).subspan(6), at + 6);
  ASSERT_TRUE(add);
  std::int32_t disp;
  std::memcpy(&disp, add->bytes.data() + add->disp_offset, 4);
  EXPECT_EQ((add->next() + disp).value(), kFn + 10 + 0x100);  // the same byte as before
  auto back = decode(std::span(r->bytes).subspan(17), at + 17);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->target.value(), kFn + code.size());
}

namespace {

// The trampoline's instructions, as text, and where each starts.
std::vector<std::pair<std::string, RuntimeAddr>> disassemble(const Trampoline& t) {
  std::vector<std::pair<std::string, RuntimeAddr>> out;
  for (std::size_t off = 0; off < t.code.size();) {
    auto in = decode(std::span(t.code).subspan(off), t.address + static_cast<std::int64_t>(off));
    if (!in) break;
    out.emplace_back(in->text(), in->address);
    off += in->length;
  }
  return out;
}

}  // namespace

TEST(Trampoline, AtAnEntryTooTheSixFlagsAreKeptAroundTheLockedIncrement) {
  // No "flags are dead at an entry": a hand-written routine may read its caller's flags.
  std::string why;
  auto p = plan(cat({kNop5, kRet}), 0, why);
  ASSERT_TRUE(p);
  RuntimeAddr at(0x402000), counter(0x403000);
  auto t = build_trampoline(*p, spec(at, counter), why);
  ASSERT_TRUE(t) << why;
  auto code = disassemble(*t);
  std::vector<std::string> text;
  for (const auto& [s, a] : code) text.push_back(s);
  const std::vector<std::string> expected = {
      "lea -0x80(%rsp), %rsp",
      "push %rax",
      "lahf",
      "seto %al",
      "push %rax",
      "lock inc 0x0000000000403000",  // the counter, RIP-relative
      "pop %rax",
      "add $0x7F, %al",
      "sahf",
      "pop %rax",
      "lea 0x80(%rsp), %rsp",
      "nop %eax, (%rax,%rax,1)",  // the displaced nop5
      "jmp 0x0000000000401005"};
  EXPECT_EQ(text, expected);
}

TEST(Trampoline, FlagSaveNoneIsOnlyTheLockedIncrement) {
  // What the bench compares against: nothing pushed, no red zone.
  std::string why;
  auto p = plan(cat({kNop5, kRet}), 0, why);
  ASSERT_TRUE(p);
  TrampolineSpec s = spec(RuntimeAddr(0x402000), RuntimeAddr(0x403000));
  s.flag_save = FlagSave::None;
  auto t = build_trampoline(*p, s, why);
  ASSERT_TRUE(t) << why;
  ASSERT_EQ(t->code.size(), 8u + 5u + 5u);  // lock incq counter(%rip), the nop5, jmp back
}

TEST(Trampoline, FlagsAndFarCounterAreSavedUnderTheRedZone) {
  std::string why;
  auto p = plan(cat({kCmpRdi5, kMovRaxRdi, kMovRaxRdi, kSetz, kRet}), 4, why);
  ASSERT_TRUE(p);
  auto t = build_trampoline(*p, spec(RuntimeAddr(0x402000), RuntimeAddr(0x7f0000000000)), why);
  ASSERT_TRUE(t) << why;
  std::vector<std::string> text;
  for (std::size_t off = 0; off < t->code.size() && text.size() < 14;) {
    auto in = decode(std::span(t->code).subspan(off), RuntimeAddr(0x402000 + off));
    ASSERT_TRUE(in);
    text.push_back(in->text());
    off += in->length;
  }
  const std::vector<std::string> expected = {
      "lea -0x80(%rsp), %rsp",      // over the red zone
      "push %rax",                  // flags: lahf/seto into %rax
      "lahf",                       //
      "seto %al",                   //
      "push %rax",                  //
      "push %rsi",                  // the counter out of reach: its address in %rsi
      "mov $0x7F0000000000, %rsi",  //
      "lock inc (%rsi)",            // f0 48 ff 06: REX.W, a qword
      "pop %rsi",                   //
      "pop %rax",                   //
      "add $0x7F, %al",             // OF back when %al was 1
      "sahf",                       // SF ZF AF PF CF back
      "pop %rax",                   //
      "lea 0x80(%rsp), %rsp"};
  EXPECT_EQ(text, expected);
  // A thread between the two movs moves to the copy of the second.
  ASSERT_EQ(t->copies.size(), 1u);
  EXPECT_EQ(t->copies[0].first.value(), kFn + 7);
  EXPECT_EQ(t->moved_pc(RuntimeAddr(kFn + 7)), t->copies[0].second);
  EXPECT_FALSE(t->moved_pc(RuntimeAddr(kFn + 4)));
}

TEST(Trampoline, RefusesARipOperandOutOfReach) {
  Bytes code = {0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xc3};  // mov 0(%rip),%rax
  std::string why;
  auto p = plan(code, 0, why);
  ASSERT_TRUE(p) << why;
  EXPECT_FALSE(
      build_trampoline(*p, spec(RuntimeAddr(0x7f0000000000), RuntimeAddr(0x7f0000001000)), why));
  EXPECT_NE(why.find("out of reach"), std::string::npos) << why;
}

namespace {

// Tracee memory as a map of bytes, logging each write as (address, size).
class LoggingMemory : public TraceeMemory {
 public:
  std::map<std::uint64_t, std::uint8_t> bytes;
  std::vector<std::pair<std::uint64_t, std::size_t>> writes;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes.at(at.value() + i);
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    writes.emplace_back(at.value(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i) bytes.at(at.value() + i) = in[i];
  }
  void put(std::uint64_t at, const Bytes& b) {
    for (std::size_t i = 0; i < b.size(); ++i) bytes[at + i] = b[i];
  }
  Bytes get(std::uint64_t at, std::size_t n) {
    Bytes b(n);
    read(RuntimeAddr(at), b);
    return b;
  }
};

// Checks the memory at each CodeSync call: int3 at byte 0 whenever bytes 1..n-1 are mixed.
class RecordingSync : public CodeSync {
 public:
  explicit RecordingSync(LoggingMemory& m) : mem(m) {}
  LoggingMemory& mem;
  std::vector<Bytes> seen;
  int evacuations = 0;
  void serialize() override { seen.push_back(mem.get(kFn, 7)); }
  void evacuate(RuntimeAddr, std::size_t) override { ++evacuations; }
};

}  // namespace

TEST(PatchSite, WritesInt3FirstThenTheBodyThenByteZero) {
  std::string why;
  Bytes code = cat({kPushRbp, kMovRbpRsp, kMovRaxRdi, kRet});
  auto p = plan(code, 0, why);
  ASSERT_TRUE(p);
  LoggingMemory mem;
  mem.put(kFn, code);
  JumpPatch patch = JumpPatch::make(*p, RuntimeAddr(kFn + 0x1000));
  EXPECT_EQ(patch.patch_bytes()[0], kJmpRel32);
  EXPECT_EQ(Bytes(patch.patch.begin() + 5, patch.patch.begin() + 7), (Bytes{kInt3, kInt3}));
  PatchSite site(mem, patch);
  RecordingSync sync(mem);
  site.install(&sync);
  ASSERT_EQ(mem.writes.size(), 3u);
  EXPECT_EQ(mem.writes[0], std::make_pair(kFn, std::size_t{1}));
  EXPECT_EQ(mem.writes[1], std::make_pair(kFn + 1, std::size_t{6}));
  EXPECT_EQ(mem.writes[2], std::make_pair(kFn, std::size_t{1}));
  ASSERT_EQ(sync.seen.size(), 3u);
  EXPECT_EQ(sync.seen[0], cat({{kInt3}, Bytes(code.begin() + 1, code.begin() + 7)}));
  EXPECT_EQ(sync.seen[1][0], kInt3);
  EXPECT_EQ(sync.seen[2], Bytes(patch.patch.begin(), patch.patch.begin() + 7));
  EXPECT_EQ(sync.evacuations, 1);
  site.install(&sync);  // idempotent
  EXPECT_EQ(mem.writes.size(), 3u);
  site.remove(&sync);
  EXPECT_EQ(mem.get(kFn, code.size()), code);
  EXPECT_EQ(mem.writes.size(), 6u);
  EXPECT_EQ(sync.seen[3][0], kInt3);  // removal also goes through int3 first
  EXPECT_EQ(sync.evacuations, 1);     // nobody can be inside a jump
  site.remove(&sync);
  EXPECT_EQ(mem.writes.size(), 6u);
}

TEST(PatchSite, RefusesCodeThatChangedSincePlanned) {
  std::string why;
  Bytes code = cat({kNop5, kRet});
  auto p = plan(code, 0, why);
  ASSERT_TRUE(p);
  LoggingMemory mem;
  mem.put(kFn, cat({{kInt3}, Bytes(code.begin() + 1, code.end())}));  // someone's breakpoint
  PatchSite site(mem, JumpPatch::make(*p, RuntimeAddr(kFn + 0x1000)));
  EXPECT_THROW(site.install(), Error);
  EXPECT_FALSE(site.installed());
  EXPECT_TRUE(mem.writes.empty());
}

TEST(PatchSite, RestoreUndoesAWholeOrHalfPatchAndLeavesForeignCode) {
  std::string why;
  Bytes code = cat({kPushRbp, kMovRbpRsp, kMovRaxRdi, kRet});
  auto p = plan(code, 0, why);
  ASSERT_TRUE(p);
  JumpPatch patch = JumpPatch::make(*p, RuntimeAddr(kFn + 0x1000));
  Bytes ours(patch.patch.begin(), patch.patch.begin() + 7);
  Bytes half = cat({{kInt3}, Bytes(ours.begin() + 1, ours.end())});
  Bytes foreign = {0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90};
  for (const auto& [now, state] : std::vector<std::pair<Bytes, PatchState>>{
           {ours, PatchState::Patched},
           {half, PatchState::Transition},
           {Bytes(code.begin(), code.begin() + 7), PatchState::Original},
           {foreign, PatchState::Foreign}}) {
    LoggingMemory mem;
    mem.put(kFn, cat({now, kRet}));
    EXPECT_EQ(restore(mem, patch), state);
    Bytes expect = state == PatchState::Foreign ? foreign : Bytes(code.begin(), code.begin() + 7);
    EXPECT_EQ(mem.get(kFn, 7), expect);
  }
}
