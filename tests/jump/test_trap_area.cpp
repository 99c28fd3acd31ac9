// The trap area's records as restore reads them back: written through a fake tracee memory,
// parsed, and every field and bound checked before it is trusted.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>

#include <cstddef>
#include <cstring>
#include <map>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/in_tracee/trap_handler.hpp"
#include "common/error.hpp"

namespace probecost::trap {
namespace {

constexpr std::uint64_t kAt = 0x7f0000000000;

// A tracee memory that is one zero-filled range at kAt.
class FakeMemory final : public TraceeMemory {
 public:
  explicit FakeMemory(std::size_t size) : bytes_(size) {}
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    std::memcpy(out.data(), bytes_.data() + offset(at, out.size()), out.size());
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    std::memcpy(bytes_.data() + offset(at, in.size()), in.data(), in.size());
  }
  std::vector<std::uint8_t>& bytes() { return bytes_; }

 private:
  std::size_t offset(RuntimeAddr at, std::size_t n) const {
    std::uint64_t off = at.value() - kAt;
    if (at.value() < kAt || off + n > bytes_.size()) throw Error("fake memory: out of range");
    return off;
  }
  std::vector<std::uint8_t> bytes_;
};

SiteRecord record(std::uint64_t site, std::uint8_t original) {
  SiteRecord r;
  r.site = RuntimeAddr(site);
  r.resume = RuntimeAddr(kAt + 0x3000);
  r.moved = {0, site + 3, 0};
  r.file = {0x803, 123456, site & 0xfff};
  r.original = original;
  r.length = 3;
  return r;
}

TEST(TrapArea, RecordsReadBackAsWritten) {
  Layout layout = Layout::of(8, true, 4);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 4242);
  ASSERT_TRUE(w.add(record(0x401000, 0x55)));
  ASSERT_TRUE(w.add(record(0x401100, 0x48)));
  KernelSigaction program{0x401234, SA_SIGINFO | SA_ONSTACK, 0x401300, 1ull << 9};
  KernelSigaction ours = our_disposition(program, w.handler(), w.restorer());
  w.set_dispositions(program, ours);
  w.set_state(HandlerState::Installed);
  EXPECT_TRUE(w.remove(RuntimeAddr(0x401100)));
  EXPECT_FALSE(w.remove(RuntimeAddr(0x401200)));

  std::string why;
  auto area = parse_area(memory.bytes(), RuntimeAddr(kAt), why);
  ASSERT_TRUE(area) << why;
  EXPECT_EQ(area->tracer_pid, 4242);
  EXPECT_EQ(area->state, HandlerState::Installed);
  EXPECT_EQ(area->handler, w.handler());
  EXPECT_EQ(area->program.handler, 0x401234u);
  EXPECT_EQ(area->ours.flags, static_cast<std::uint64_t>(SA_SIGINFO | kSaRestorer | SA_ONSTACK));
  EXPECT_EQ(area->ours.mask, ~0ull);
  ASSERT_EQ(area->records.size(), 2u);
  EXPECT_EQ(area->records[0].site, RuntimeAddr(0x401000));
  EXPECT_EQ(area->records[0].original, 0x55);
  EXPECT_EQ(area->records[0].file, (FileIdentity{0x803, 123456, 0}));
  EXPECT_TRUE(area->records[0].installed);
  EXPECT_FALSE(area->records[1].installed);
  w.remove_all();
  area = parse_area(memory.bytes(), RuntimeAddr(kAt), why);
  ASSERT_TRUE(area) << why;
  EXPECT_FALSE(area->records[0].installed);
}

TEST(TrapArea, TheTracersCopyIsTheResumeOnlyWhereThereIsNone) {
  Layout layout = Layout::of(4, false);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 1);
  SiteRecord none = record(0x401000, 0x55);
  none.resume = RuntimeAddr();
  w.add(none);
  w.add(record(0x402000, 0x48));
  w.set_resume_if_none(RuntimeAddr(0x401000), RuntimeAddr(0x5000));
  w.set_resume_if_none(RuntimeAddr(0x401000), RuntimeAddr(0x6000));  // has one now
  w.set_resume_if_none(RuntimeAddr(0x402000), RuntimeAddr(0x7000));
  w.set_moved(RuntimeAddr(0x402000), 0, RuntimeAddr(0x7000));
  std::string why;
  auto area = parse_area(memory.bytes(), RuntimeAddr(kAt), why);
  ASSERT_TRUE(area) << why;
  EXPECT_EQ(area->records[0].resume, RuntimeAddr(0x5000));
  EXPECT_EQ(area->records[1].resume, RuntimeAddr(kAt + 0x3000));
  EXPECT_EQ(area->records[1].moved[0], 0x7000u);
}

TEST(TrapArea, WithoutCodeThereIsNoHandler) {
  Layout layout = Layout::of(4, false);
  EXPECT_EQ(layout.code_size, 0u);
  EXPECT_EQ(layout.size, kPage);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 1);
  EXPECT_TRUE(w.calls().empty());
  std::string why;
  auto area = parse_area(memory.bytes(), RuntimeAddr(kAt), why);
  ASSERT_TRUE(area) << why;
  EXPECT_EQ(area->handler, RuntimeAddr(0));
}

TEST(TrapArea, FullAfterItsCapacity) {
  Layout layout = Layout::of(2, false);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 1);
  // A page holds more than 2: the capacity is what the header says.
  EXPECT_TRUE(w.add(record(0x1000, 1)));
  EXPECT_TRUE(w.add(record(0x2000, 1)));
  EXPECT_FALSE(w.add(record(0x3000, 1)));
  EXPECT_TRUE(w.full());
}

TEST(TrapArea, TheHandlersSystemCallsAreListed) {
  Layout layout = Layout::of(4, true);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 1);
  std::map<long, int> seen;
  for (const auto& c : w.calls()) {
    ++seen[c.nr];
    // Each is a syscall instruction (0f 05) in the area's code.
    std::uint8_t insn[2];
    memory.read(c.at, insn);
    EXPECT_EQ(insn[0], 0x0f);
    EXPECT_EQ(insn[1], 0x05);
  }
  EXPECT_EQ(seen, (std::map<long, int>{{SYS_rt_sigreturn, 1},
                                       {SYS_rt_sigprocmask, 1},
                                       {SYS_rt_sigaction, 2},
                                       {SYS_getpid, 1},
                                       {SYS_gettid, 1},
                                       {SYS_rt_tgsigqueueinfo, 1}}));
}

// Every way a stray or damaged mapping can look like an area is refused, with the reason.
TEST(TrapArea, DamageIsRefused) {
  Layout layout = Layout::of(4, false);
  FakeMemory memory(layout.size);
  AreaWriter w(memory, RuntimeAddr(kAt), layout, 1);
  w.add(record(0x401000, 0x55));
  auto parse = [&](std::vector<std::uint8_t> bytes, RuntimeAddr at = RuntimeAddr(kAt)) {
    std::string why;
    auto a = parse_area(bytes, at, why);
    return a ? std::string("parsed") : why;
  };
  auto bytes = memory.bytes();
  EXPECT_EQ(parse(bytes), "parsed");
  EXPECT_EQ(parse(bytes, RuntimeAddr(kAt + kPage)),
            "trap area says it is mapped at 0x7f0000000000, found at 0x7f0000001000");
  auto b = bytes;
  b[0] = 'x';
  EXPECT_EQ(parse(b), "no probecost trap area magic");
  b = bytes;
  b[offsetof(TrapHeader, tracer_pid)] ^= 1;
  EXPECT_EQ(parse(b), "trap area header checksum mismatch");
  b = bytes;
  b[offsetof(TrapHeader, record_count)] = 5;
  EXPECT_EQ(parse(b), "trap area record count above its capacity");
  b = bytes;
  b[sizeof(TrapHeader) + offsetof(TrapRecord, patched)] = 0x90;
  EXPECT_EQ(parse(b), "trap area record 0: its patch is not an int3");
  b = bytes;
  b[sizeof(TrapHeader) + offsetof(TrapRecord, state)] = 7;
  EXPECT_EQ(parse(b), "trap area record 0: unknown state");
  EXPECT_EQ(parse({bytes.begin(), bytes.begin() + 100}), "trap area truncated: 100 bytes");
  EXPECT_EQ(parse({bytes.begin(), bytes.begin() + sizeof(TrapHeader) + 10}),
            "trap area truncated: 210 bytes hold no whole record table");
}

}  // namespace
}  // namespace probecost::trap
