// The unwind rule cache (tracer/symbols/unwind_rules.hpp): SnapshotUnwinder with its cached
// rules must give, for every snapshot, what libdw's walk alone gives (the frames, whether the
// copy was cut short, and the bytes the walk needed), over many pcs: an rbp-based CFA (a frame
// with alloca), frames in libc (qsort calling back into us), a signal handler's stack (the
// signal frame is libdw's: the walk is handed over mid-stack), a thread's stack, copies cut
// short, and walks cut at the depth.
#include <alloca.h>

#include <csignal>
#include <cstdlib>
#include <set>

#include "stack_snapshots.hpp"

extern "C" {
__attribute__((noinline)) int ur_framed(int n) {
  // alloca makes the compiler keep rbp as the frame pointer: the CFA is rbp+16 at the call.
  auto* pad = static_cast<volatile char*>(alloca(static_cast<std::size_t>(n) + 16));
  pad[0] = static_cast<char>(n);
  int r = stack_target(n) + pad[0];
  asm volatile("" ::: "memory");
  return r;
}
__attribute__((noinline)) int ur_compare(const void* a, const void* b) {
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  stack_target(x);
  asm volatile("" ::: "memory");
  return (x > y) - (x < y);
}
void ur_on_signal(int) {
  stack_path_a(7);
}
}

namespace {

// The snapshots of every path above, taken with `stack_bytes` copies.
std::vector<StackSnapshot> take_all(Snapshots& s) {
  s.enter_this_thread();
  s.patch();
  int sum = stack_path_a(1) + stack_path_c(2) + ur_framed(40) + ur_framed(200);
  for (int depth : {1, 5, 30, 300}) sum += stack_deep(depth);
  int keys[] = {5, 3, 9, 1, 7, 2};
  std::qsort(keys, std::size(keys), sizeof keys[0], ur_compare);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = ur_on_signal;
  sigaction(SIGUSR2, &sa, &old);
  std::raise(SIGUSR2);
  sigaction(SIGUSR2, &old, nullptr);
  std::thread t([&] {
    auto [lo, hi] = my_stack();
    s.table().enter(my_tp(), lo, hi);
    sum += ur_framed(8);
    s.table().forget(my_tp());
  });
  t.join();
  EXPECT_GT(sum, 0);
  return s.drain();
}

void expect_same(SnapshotUnwinder& cached, SnapshotUnwinder& libdw,
                 const std::vector<StackSnapshot>& snaps, std::set<std::uint64_t>& pcs) {
  for (std::size_t i = 0; i < snaps.size(); ++i) {
    auto a = cached.unwind(snaps[i]), b = libdw.unwind(snaps[i]);
    EXPECT_EQ(a.ips, b.ips) << "snapshot " << i;
    EXPECT_EQ(a.truncated, b.truncated) << "snapshot " << i;
    EXPECT_EQ(a.needed, b.needed) << "snapshot " << i;
    pcs.insert(a.ips.begin(), a.ips.end());
  }
}

TEST(UnwindRules, TheCachedWalkGivesLibdwsStacks) {
  NEED_RSEQ();
  Snapshots s(16384);
  auto snaps = take_all(s);
  ASSERT_GE(snaps.size(), 15u);
  SnapshotUnwinder cached(getpid(), 128), libdw(getpid(), 128, false);
  std::set<std::uint64_t> pcs;
  for (int lap = 0; lap < 2; ++lap) expect_same(cached, libdw, snaps, pcs);  // lap 2: all cached
  EXPECT_GE(pcs.size(), 25u);
  EXPECT_GT(cached.use().cached, 10 * snaps.size());
  EXPECT_GE(cached.use().libdw, 2u);  // the signal frame, twice
  EXPECT_EQ(libdw.use().cached, 0u);
  for (std::uint64_t pc : pcs) {  // no rule of ours differs from libdw's on the way
    std::string where = cached.describe(pc, true);
    if (where.rfind("ur_framed+", 0) == 0) {
      const UnwindRule* rule = cached.rule_at(pc - 1);
      ASSERT_NE(rule, nullptr);
      EXPECT_EQ(rule->cfa_reg, 6) << "rbp";
      EXPECT_EQ(rule->cfa_offset, 16u);
    }
  }
  bool in_libc = false;
  for (std::uint64_t pc : pcs)
    if (cached.describe(pc, true).find(" in libc.so") != std::string::npos &&
        cached.rule_at(pc - 1))
      in_libc = true;
  EXPECT_TRUE(in_libc) << "a frame in a shared library unwound by a cached rule";
}

TEST(UnwindRules, CopiesCutShortAndWalksCutAtTheDepthAreLibdws) {
  NEED_RSEQ();
  for (std::uint32_t bytes : {1024u, 4096u}) {
    Snapshots s(bytes);
    auto snaps = take_all(s);
    ASSERT_GE(snaps.size(), 15u);
    for (unsigned depth : {1u, 3u, 8u, 64u}) {
      SnapshotUnwinder cached(getpid(), depth), libdw(getpid(), depth, false);
      std::set<std::uint64_t> pcs;
      expect_same(cached, libdw, snaps, pcs);
    }
  }
}

}  // namespace
