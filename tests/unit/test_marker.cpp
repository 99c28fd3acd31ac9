#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "inferior/marker.hpp"

namespace marker = probecost::marker;

namespace {
struct MarkerTest : ::testing::Test {
  void TearDown() override {
    marker::set_enabled(false);
    marker::thread_release();
  }
};
}  // namespace

TEST_F(MarkerTest, DisabledWritesNothing) {
  marker::thread_init(16);
  marker::set_enabled(false);
  for (int i = 0; i < 10; ++i) PROBECOST_MARKER(7, i);
  EXPECT_EQ(marker::view().written, 0u);
}

TEST_F(MarkerTest, RecordsReadBackInOrder) {
  marker::thread_init(1024);
  marker::set_enabled(true);
  for (std::uint64_t i = 0; i < 100; ++i) PROBECOST_MARKER(3, i * 10);
  auto v = marker::view();
  ASSERT_EQ(v.written, 100u);
  EXPECT_EQ(v.overwritten, 0u);
  ASSERT_EQ(v.records.size(), 100u);
  for (std::uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(v.records[i].id, 3u);
    EXPECT_EQ(v.records[i].arg, i * 10);
    if (i) {
      EXPECT_GE(v.records[i].tsc, v.records[i - 1].tsc);
    }
  }
}

TEST_F(MarkerTest, FullRingOverwritesOldestAndCountsThem) {
  marker::thread_init(10);  // rounded up to 16
  marker::set_enabled(true);
  for (std::uint64_t i = 0; i < 40; ++i) PROBECOST_MARKER(1, i);
  auto v = marker::view();
  EXPECT_EQ(v.capacity, 16u);
  EXPECT_EQ(v.written, 40u);
  EXPECT_EQ(v.overwritten, 24u);
  ASSERT_EQ(v.records.size(), 16u);
  EXPECT_EQ(v.records.front().arg, 24u);
  EXPECT_EQ(v.records.back().arg, 39u);
}

TEST_F(MarkerTest, EachThreadHasItsOwnRing) {
  marker::set_enabled(true);
  std::uint64_t counts[3] = {};
  bool in_order[3] = {};
  std::thread threads[3];
  for (int t = 0; t < 3; ++t) {
    threads[t] = std::thread([&, t] {
      marker::thread_init(4096);
      for (std::uint64_t i = 0; i < 1000u * (t + 1); ++i) PROBECOST_MARKER(t, i);
      auto v = marker::view();
      counts[t] = v.written;
      in_order[t] = true;
      for (std::size_t i = 0; i < v.records.size(); ++i) {
        if (v.records[i].id != static_cast<std::uint32_t>(t) || v.records[i].arg != i ||
            (i && v.records[i].tsc < v.records[i - 1].tsc))
          in_order[t] = false;
      }
      marker::thread_release();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(counts[t], 1000u * (t + 1));
    EXPECT_TRUE(in_order[t]) << "thread " << t;
  }
}

TEST_F(MarkerTest, FirstEventWithoutInitAllocates) {
  marker::set_enabled(true);
  PROBECOST_MARKER(9, 42);
  auto v = marker::view();
  ASSERT_EQ(v.written, 1u);
  EXPECT_EQ(v.records[0].arg, 42u);
}

// The ring is in memory before the first event: every page resident (mincore), so no event of
// the first lap pays a page fault.
TEST_F(MarkerTest, RingIsFaultedInBeforeTheFirstEvent) {
  marker::Ring& ring = marker::thread_init(1 << 16);
  std::size_t bytes = (ring.mask + 1) * sizeof(marker::Record);
  std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  ASSERT_EQ(::mincore(ring.records, bytes, resident.data()), 0);
  EXPECT_EQ(std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }),
            static_cast<std::ptrdiff_t>(resident.size()));
  EXPECT_EQ(marker::view().written, 0u);
}
