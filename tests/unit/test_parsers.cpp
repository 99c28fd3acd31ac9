// The parsers of outside input that the fuzzers (tests/fuzz) exercise, and the inputs on which
// they once went wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "common/error.hpp"
#include "compare/model.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/symbols/probes.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;

// Found by fuzz_units: a finite number times its unit overflowed to an infinite rate or cost.
TEST(Parsers, InfiniteRatesAndCostsAreRefused) {
  EXPECT_THROW(parse_rate("1e308k"), UsageError);
  EXPECT_THROW(parse_rate("1e300G"), UsageError);
  EXPECT_THROW(parse_duration_ns("1e308s"), UsageError);
  EXPECT_DOUBLE_EQ(parse_rate("1e300"), 1e300);
  EXPECT_DOUBLE_EQ(parse_duration_ns("2.01us"), 2010.0);
}

TEST(Parsers, MapsLines) {
  auto m = parse_maps_line("7f0000000000-7f0000001000 r-xp 00002000 08:02 173521  /a dir/lib.so");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->start.value(), 0x7f0000000000u);
  EXPECT_EQ(m->end.value(), 0x7f0000001000u);
  EXPECT_TRUE(m->read && m->exec && !m->write);
  EXPECT_EQ(m->offset, 0x2000u);
  EXPECT_EQ(m->path, "/a dir/lib.so");
  auto anon = parse_maps_line("7fff5c4a1000-7fff5c4c2000 rw-p 00000000 00:00 0");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->path, "");
  EXPECT_FALSE(parse_maps_line("not a mapping"));
  EXPECT_FALSE(parse_maps_line(""));
  EXPECT_EQ(parse_maps("garbage\n00400000-00401000 r-xp 0 08:02 1 /bin/x\n\n").size(), 1u);
}

// Found by fuzz_maps: the gap below [vsyscall] reaches past the top of user space, and the
// distance to a far gap could wrap around the reach check.
TEST(Parsers, AScratchPageIsPlacedInUserSpaceWithinReach) {
  auto maps = parse_maps(
      "7ffff7fc0000-7ffff7fff000 r-xp 00000000 08:02 1 /lib/ld.so\n"
      "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n");
  RuntimeAddr near(0x7ffffffde000 - 0x1000);
  auto at = free_range_near(maps, near, 4096, 1ull << 31);
  ASSERT_TRUE(at);
  EXPECT_LT(at->value() + 4096, 0x7ffffffff001u);
  EXPECT_EQ(at->value() % 4096, 0u);
  // Nothing free within reach: none, rather than a wrapped-around "close" one.
  auto far = parse_maps(
      "00010000-7ffffffff000 r-xp 00000000 08:02 1 /everything\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n");
  EXPECT_FALSE(free_range_near(far, RuntimeAddr(0x400000), 4096, 1ull << 31));
  // Mappings out of order or upside down (a bad text) give no address outside user space.
  auto odd = parse_maps(
      "00400000-00000000 r-xp 0 0:0 0\nffffffffff577243-ffffffffff600000 r-xp 0 0:0 0\n");
  if (auto a = free_range_near(odd, RuntimeAddr(0x400000), 4096, 1ull << 31)) {
    EXPECT_LT(a->value(), 0x7ffffffff000u);
  }
}

TEST(Parsers, ProbeSpecs) {
  auto p = parse_probe("libc.so.6:malloc+0x10");
  EXPECT_EQ(p.module, "libc.so.6");
  EXPECT_EQ(p.symbol, "malloc");
  EXPECT_EQ(p.offset, 0x10u);
  EXPECT_EQ(parse_probe("0x401200").address->value(), 0x401200u);
  for (const char* bad : {":x", "0x", "0xzz", "sym+", "sym+-1", "m:", ""}) {
    EXPECT_THROW(parse_probe(bad), UsageError) << bad;
  }
}

// Found by fuzz_elf_symbols: libdwfl crashed on an empty image.
TEST(Parsers, ElfSymbolsOfAnImage) {
  EXPECT_THROW(read_elf_symbols({}, "empty"), Error);
  std::string text = "not an ELF file at all";
  EXPECT_THROW(read_elf_symbols(std::vector<char>(text.begin(), text.end()), "text"), Error);
  std::ifstream self("/proc/self/exe", std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  auto symbols = read_elf_symbols(image, "unit_tests");
  bool has_main = false;
  for (const auto& s : symbols) has_main = has_main || s.name == "main";
  EXPECT_TRUE(has_main);
}

// /proc/PID/status, read with plain read(2): a key only at a line's start, the first line too.
TEST(Parsers, StatusNumbers) {
  std::string status = "Name:\tSeccomp: x\nTgid:\t4242\nSeccomp:\t2\nSeccomp_filters:\t1\n";
  EXPECT_EQ(status_number(status, "Name:"), 0);  // no number after it
  EXPECT_EQ(status_number(status, "Tgid:"), 4242);
  EXPECT_EQ(status_number(status, "Seccomp:"), 2);
  EXPECT_EQ(status_number(status, "Seccomp_filters:"), 1);
  EXPECT_EQ(status_number(status, "Pid:"), -1);
  EXPECT_EQ(status_number("", "Tgid:"), -1);
  EXPECT_EQ(tgid_of(::getpid()), ::getpid());
  EXPECT_EQ(stat_field(::getpid(), 3), "R");  // reading its own stat, it runs
  EXPECT_TRUE(proc_text(::getpid(), "no-such-file").empty());
}
