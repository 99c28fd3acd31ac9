// The shared area's layout, its writer and its parser; the parser on garbage.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "breakpoint/in_tracee/jump_area.hpp"
#include "common/error.hpp"
#include "inferior/marker.hpp"
#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::jump;
using probecost::selftest::site_options;

namespace {

constexpr std::uint64_t kArea = 0x7f0000000000;
constexpr std::uint64_t kFn = 0x7f0000400000;

// An area built in a plain buffer (the tracer's view), for a tracee that would map it at kArea;
// with `sites` sites planned on nop5 functions 16 bytes apart.
struct Built {
  AreaLayout layout;
  std::vector<std::uint8_t> bytes;
  std::vector<PlacedSite> placed;
};

Built build(int sites) {
  Built b;
  b.layout = AreaLayout::of({8, 4096, 4, 64});
  b.bytes.assign(b.layout.size, 0);
  AreaWriter w(b.bytes, RuntimeAddr(kArea), b.layout, 4242);
  std::vector<std::uint8_t> code = {0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3};
  for (int i = 0; i < sites; ++i) {
    std::string why;
    RuntimeAddr fn(kFn + 16 * i);
    auto plan = plan_jump(fn, code, fn, why);
    EXPECT_TRUE(plan) << why;
    auto p = w.add_site(*plan, site_options(static_cast<std::uint32_t>(100 + i), i % 2 == 1), why);
    EXPECT_TRUE(p) << why;
    b.placed.push_back(*p);
  }
  return b;
}

std::optional<ParsedArea> parse(std::span<const std::uint8_t> bytes, std::string& why) {
  return parse_area(bytes, RuntimeAddr(kArea), why);
}

}  // namespace

TEST(JumpArea, RecordIsTheMarkersRecord) {
  static_assert(sizeof(Record) == sizeof(marker::Record));
  static_assert(offsetof(Record, tsc) == offsetof(marker::Record, tsc));
  static_assert(offsetof(Record, arg) == offsetof(marker::Record, arg));
  static_assert(offsetof(Record, id) == offsetof(marker::Record, id));
  static_assert(offsetof(Record, reserved) == offsetof(marker::Record, reserved));
}

TEST(JumpArea, LayoutPutsEachRegionOnItsOwnPages) {
  auto l = AreaLayout::of({64, 10000, 3, 1 << 16});
  EXPECT_EQ(l.sites_offset, sizeof(AreaHeader));
  EXPECT_EQ(l.code_offset % kAreaPage, 0u);
  EXPECT_GE(l.code_offset, l.sites_offset + 64 * sizeof(SiteEntry));
  EXPECT_EQ(l.code_size, 12288u);
  EXPECT_EQ(l.rings_offset, l.code_offset + l.code_size);
  EXPECT_EQ(l.ring_stride, ring_bytes(1 << 16));
  EXPECT_GE(l.rings_size, 3 * ring_bytes(1 << 16));
  EXPECT_EQ(l.size, l.rings_offset + l.rings_size);
  EXPECT_THROW(AreaLayout::of({64, 4096, 1, 1000}), Error);
  EXPECT_EQ(AreaLayout::of({64, 4096, 0, 0}).rings_offset, 0u);
}

TEST(JumpArea, WriterAndParserAgree) {
  auto b = build(3);
  std::string why;
  auto area = parse(b.bytes, why);
  ASSERT_TRUE(area) << why;
  EXPECT_EQ(area->tracer_pid, 4242);
  EXPECT_EQ(area->size, b.layout.size);
  ASSERT_EQ(area->sites.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const auto& s = area->sites[i];
    EXPECT_EQ(s.patch.site.value(), kFn + 16 * i);
    EXPECT_EQ(s.patch.length, 5u);
    EXPECT_EQ(s.id, 100u + i);
    EXPECT_EQ(s.flags, (i % 2 == 1 ? kSiteEvents : 0) | kSitePreservesFlags);
    EXPECT_EQ(s.ring, i == 1 ? 0 : 0);  // the first site with events has ring 0
    EXPECT_EQ(s.patch.trampoline, b.placed[i].trampoline.address);
    EXPECT_EQ(s.patch.patch, b.placed[i].patch.patch);
    EXPECT_EQ(s.patch.original[0], 0x0f);
    // The trampoline is in the code region, each on its own cache line.
    EXPECT_EQ((s.patch.trampoline.value() - kArea - b.layout.code_offset) % 64, 0u);
  }
  // The code the writer put there is the trampoline's.
  const auto& t = b.placed[1].trampoline;
  EXPECT_EQ(
      0, std::memcmp(b.bytes.data() + (t.address.value() - kArea), t.code.data(), t.code.size()));
  // Only the header and the site table are needed.
  EXPECT_TRUE(parse(std::span(b.bytes).first(b.layout.sites_offset + 3 * sizeof(SiteEntry)), why))
      << why;
}

TEST(JumpArea, WriterRefusesWhatDoesNotFit) {
  auto layout = AreaLayout::of({1, 4096, 0, 0});
  std::vector<std::uint8_t> bytes(layout.size);
  AreaWriter w(bytes, RuntimeAddr(kArea), layout, 1);
  std::vector<std::uint8_t> code = {0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3};
  std::string why;
  RuntimeAddr far(0x400000);
  auto far_plan = plan_jump(far, code, far, why);
  ASSERT_TRUE(far_plan);
  EXPECT_FALSE(w.add_site(*far_plan, site_options(1), why));
  EXPECT_NE(why.find("beyond a jump's reach"), std::string::npos) << why;
  auto plan = plan_jump(RuntimeAddr(kFn), code, RuntimeAddr(kFn), why);
  ASSERT_TRUE(plan);
  EXPECT_FALSE(w.add_site(*plan, site_options(1, true), why));
  EXPECT_NE(why.find("rings for events are all in use"), std::string::npos) << why;
  EXPECT_TRUE(w.add_site(*plan, site_options(1), why)) << why;
  EXPECT_THROW(w.ring(0), Error);  // no events, no ring
  EXPECT_FALSE(w.add_site(*plan, site_options(2), why));
  EXPECT_NE(why.find("all in use"), std::string::npos) << why;
}

TEST(JumpArea, ParserSaysWhyItRefuses) {
  auto b = build(2);
  std::string why;
  auto expect_refusal = [&](std::vector<std::uint8_t> bytes, const std::string& reason,
                            std::uint64_t at = kArea) {
    EXPECT_FALSE(parse_area(bytes, RuntimeAddr(at), why)) << reason;
    EXPECT_NE(why.find(reason), std::string::npos) << why;
  };
  auto header = [&](auto change) {
    auto bytes = b.bytes;
    auto* h = reinterpret_cast<AreaHeader*>(bytes.data());
    change(*h);
    return bytes;
  };
  expect_refusal(header([](AreaHeader& h) { h.magic[0] = 'X'; }), "magic");
  expect_refusal(header([](AreaHeader& h) { h.version = 2; }), "version 2");
  expect_refusal(header([](AreaHeader& h) { h.tracer_pid = 1; }), "checksum");
  expect_refusal(header([](AreaHeader& h) { h.site_count = 9; }), "count");
  expect_refusal(b.bytes, "mapped at", kArea + 4096);
  expect_refusal(std::vector<std::uint8_t>(b.bytes.begin(), b.bytes.begin() + 100), "truncated");
  expect_refusal(std::vector<std::uint8_t>(b.bytes.begin(), b.bytes.begin() + 200), "truncated");
  auto entry = [&](auto change) {
    auto bytes = b.bytes;
    change(*reinterpret_cast<SiteEntry*>(bytes.data() + b.layout.sites_offset + sizeof(SiteEntry)));
    return bytes;
  };
  expect_refusal(entry([](SiteEntry& e) { e.length = 40; }), "site 1: bad patch length");
  expect_refusal(entry([](SiteEntry& e) { e.trampoline = 0x1234; }), "outside the area's code");
  expect_refusal(entry([](SiteEntry& e) { e.patch[2] ^= 1; }), "not a jump to its trampoline");
  expect_refusal(entry([](SiteEntry& e) { e.ring = 4; }), "no such ring");
  expect_refusal(header([](AreaHeader& h) {
                   h.ring_stride = 8;
                   h.checksum = 0;
                 }),
                 "checksum");
}

TEST(JumpArea, ParserSurvivesGarbage) {
  auto b = build(3);
  std::mt19937_64 rng(12345);
  std::string why;
  // Random bytes, whole and behind a valid magic and version.
  for (int i = 0; i < 2000; ++i) {
    std::vector<std::uint8_t> junk(rng() % 9000);
    for (auto& x : junk) x = static_cast<std::uint8_t>(rng());
    if (i % 2 && junk.size() >= 12) {
      std::memcpy(junk.data(), kAreaMagic, 8);
      std::uint32_t v = kAreaVersion;
      std::memcpy(junk.data() + 8, &v, 4);
    }
    why.clear();
    EXPECT_FALSE(parse(junk, why));
    EXPECT_FALSE(why.empty());
  }
  // Every truncation of a valid area.
  for (std::size_t n = 0; n < b.layout.sites_offset + 3 * sizeof(SiteEntry); ++n) {
    EXPECT_FALSE(parse(std::span(b.bytes).first(n), why)) << n;
  }
  // Valid areas with random bytes flipped: refused or accepted, never a crash, never a site
  // that breaks the invariants restore relies on.
  for (int i = 0; i < 5000; ++i) {
    auto bytes = b.bytes;
    for (int k = 0; k < 4; ++k) {
      bytes[rng() % (b.layout.sites_offset + 3 * sizeof(SiteEntry))] ^=
          static_cast<std::uint8_t>(1 + rng() % 255);
    }
    auto area = parse(bytes, why);
    if (!area) continue;
    for (const auto& s : area->sites) {
      EXPECT_GE(s.patch.length, kJumpLength);
      EXPECT_LE(s.patch.length, kMaxPatchLength);
      EXPECT_EQ(s.patch.patch[0], kJmpRel32);
    }
  }
}
