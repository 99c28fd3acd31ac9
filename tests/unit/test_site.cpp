#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "breakpoint/int3/site_table.hpp"
#include "common/error.hpp"

using namespace probecost;

namespace {
// Tracee memory as a map of bytes, counting writes.
class FakeMemory : public TraceeMemory {
 public:
  std::map<std::uint64_t, std::uint8_t> bytes;
  int writes = 0;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bytes.at(at.value() + i);
  }
  void write(RuntimeAddr at, std::span<const std::uint8_t> in) override {
    ++writes;
    for (std::size_t i = 0; i < in.size(); ++i) bytes.at(at.value() + i) = in[i];
  }
};
}  // namespace

TEST(BreakpointSite, EnableSavesAndDisableRestores) {
  FakeMemory mem;
  mem.bytes = {{0x1000, 0x55}, {0x1001, 0x48}};
  BreakpointSite site(mem, RuntimeAddr(0x1000));
  site.enable();
  EXPECT_EQ(mem.bytes[0x1000], kInt3);
  EXPECT_EQ(site.saved_byte(), 0x55);
  site.enable();  // idempotent: no second write, saved byte not overwritten with 0xCC
  EXPECT_EQ(mem.writes, 1);
  EXPECT_EQ(site.saved_byte(), 0x55);
  site.disable();
  site.disable();
  EXPECT_EQ(mem.bytes[0x1000], 0x55);
  EXPECT_EQ(mem.writes, 2);
  EXPECT_EQ(mem.bytes[0x1001], 0x48);
}

TEST(BreakpointSite, RefusesAnExistingInt3) {
  FakeMemory mem;
  mem.bytes = {{0x2000, kInt3}};
  BreakpointSite site(mem, RuntimeAddr(0x2000));
  EXPECT_THROW(site.enable(), Error);
  EXPECT_FALSE(site.enabled());
  EXPECT_EQ(mem.writes, 0);
}

TEST(SiteTable, RemoveRestoresTheByte) {
  FakeMemory mem;
  mem.bytes = {{0x10, 0x90}, {0x20, 0xf3}, {0x30, 0x31}};
  SiteTable table(mem);
  table.add(RuntimeAddr(0x30)).enable();
  table.add(RuntimeAddr(0x10)).enable();
  EXPECT_EQ(&table.add(RuntimeAddr(0x10)), table.find(RuntimeAddr(0x10)));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.find(RuntimeAddr(0x20)), nullptr);
  table.remove(RuntimeAddr(0x10));
  EXPECT_EQ(mem.bytes[0x10], 0x90);
  EXPECT_EQ(table.find(RuntimeAddr(0x10)), nullptr);
  table.disable_all();
  EXPECT_EQ(mem.bytes[0x30], 0x31);
}

// The record of a patch comes before the patch (restore goes by the records, even after a
// SIGKILL between the two writes), once per site; a removal is told too.
TEST(SiteTable, EveryInt3IsRecordedBeforeItIsWritten) {
  FakeMemory mem;
  mem.bytes = {{0x10, 0x90}, {0x20, 0xf3}};
  SiteTable table(mem);
  std::vector<std::pair<std::uint64_t, std::uint8_t>> recorded;
  std::vector<std::uint64_t> removed;
  table.set_recorder({[&](RuntimeAddr at, std::uint8_t original) {
                        EXPECT_EQ(mem.bytes.at(at.value()), original);  // not written yet
                        recorded.emplace_back(at.value(), original);
                      },
                      [&](RuntimeAddr at) { removed.push_back(at.value()); }});
  table.add(RuntimeAddr(0x10)).enable();
  table.add(RuntimeAddr(0x20)).enable();
  table.find(RuntimeAddr(0x10))->disable();
  table.find(RuntimeAddr(0x10))->enable();  // a step-over's re-insert: no second record
  table.remove(RuntimeAddr(0x20));
  using Recorded = std::vector<std::pair<std::uint64_t, std::uint8_t>>;
  EXPECT_EQ(recorded, (Recorded{{0x10, 0x90}, {0x20, 0xf3}}));
  EXPECT_EQ(removed, std::vector<std::uint64_t>{0x20});
  EXPECT_EQ(mem.bytes[0x20], 0xf3);
}

TEST(Address, LoadBiasRoundTrips) {
  LoadBias bias(0x555555554000);
  FileAddr f(0x1139);
  EXPECT_EQ(bias.apply(f).value(), 0x555555555139u);
  EXPECT_EQ(bias.unapply(bias.apply(f)), f);
  EXPECT_EQ(RuntimeAddr(0x1000).hex(), "0x1000");
}
