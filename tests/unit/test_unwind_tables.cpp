// UnwindTables on the test's own process: the .eh_frame_hdr search table of the module that
// holds a function, found in memory as the loader mapped it, and read as libunwind reads it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "tracer/core/unwind_tables.hpp"

namespace probecost {
namespace {

bool read_self(std::uint64_t at, void* out, std::size_t size) {
  std::memcpy(out, reinterpret_cast<const void*>(at), size);
  return true;
}

// The table's entry for `ip`: (initial location, FDE) pairs, relative to segbase, sorted.
std::int64_t covering_entry(const unw_dyn_info_t& di, std::uint64_t ip) {
  const auto* table = reinterpret_cast<const std::int32_t*>(di.u.rti.table_data);
  std::size_t n = di.u.rti.table_len * sizeof(unw_word_t) / 8;
  std::int64_t rel = static_cast<std::int64_t>(ip - di.u.rti.segbase), found = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) {
      EXPECT_LE(table[2 * (i - 1)], table[2 * i]) << "entry " << i << " out of order";
    }
    if (table[2 * i] <= rel) found = static_cast<std::int64_t>(i);
  }
  return found;
}

TEST(UnwindTables, FindsTheTableOfTheLibraryThatHoldsAFunction) {
  UnwindTables tables;
  auto ip = reinterpret_cast<std::uint64_t>(&::malloc) + 4;
  unw_dyn_info_t* di = tables.find(::getpid(), ip, read_self);
  ASSERT_NE(di, nullptr);
  EXPECT_EQ(di->format, UNW_INFO_FORMAT_REMOTE_TABLE);
  EXPECT_LE(di->start_ip, ip);
  EXPECT_GT(di->end_ip, ip);
  EXPECT_GT(di->u.rti.table_len, 0u);
  EXPECT_EQ(di->u.rti.table_data, di->u.rti.segbase + 12);  // version, encodings, ptr, count
  std::int64_t e = covering_entry(*di, ip);
  EXPECT_GE(e, 0) << "no FDE starts at or before malloc";
  // The same table the second time, without reading the maps again.
  EXPECT_EQ(tables.find(::getpid(), ip + 1, read_self), di);
}

TEST(UnwindTables, FindsTheExecutablesOwnTable) {
  UnwindTables tables;
  auto ip = reinterpret_cast<std::uint64_t>(&read_self);
  unw_dyn_info_t* di = tables.find(::getpid(), ip, read_self);
  ASSERT_NE(di, nullptr);
  EXPECT_GE(covering_entry(*di, ip), 0);
}

TEST(UnwindTables, NoneForCodeNoFileHolds) {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  UnwindTables tables;
  EXPECT_EQ(tables.find(::getpid(), reinterpret_cast<std::uint64_t>(page) + 8, read_self), nullptr);
  EXPECT_EQ(tables.find(::getpid(), 16, read_self), nullptr);  // nothing mapped there
  ::munmap(page, 4096);
}

TEST(UnwindTables, NoneWhenTheHeaderCannotBeRead) {
  UnwindTables tables;
  auto ip = reinterpret_cast<std::uint64_t>(&::malloc);
  auto refuse = [](std::uint64_t, void*, std::size_t) { return false; };
  EXPECT_EQ(tables.find(::getpid(), ip, refuse), nullptr);
  tables.clear();
  EXPECT_NE(tables.find(::getpid(), ip, read_self), nullptr);
}

}  // namespace
}  // namespace probecost
