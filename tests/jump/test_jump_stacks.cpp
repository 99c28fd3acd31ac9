// Stack snapshots in-process (issue 26): a jump probe's trampoline copies the registers and the
// top of the stack into a call buffer; the test plays the tracer (it enters each thread's stack
// bounds in the buffer's thread table) and the reader (it unwinds each copy with libdw, from
// this process's modules). The stacks must equal what the program's own unwinder (glibc's
// backtrace(), from inside the probed function) says at the same hits; a stack it cannot bound
// is not copied, and says why; a copy never runs past its stack's end.
#include "stack_snapshots.hpp"

// What the probed function saw of its own stack, by glibc's unwinder (libgcc's), at each hit.
std::vector<std::vector<std::uint64_t>> g_backtraces;
bool g_take_backtraces = false;

extern "C" {
__attribute__((noinline)) int stack_target(int x) {
  asm volatile("" ::: "memory");
  if (g_take_backtraces) {
    void* frames[64];
    int n = backtrace(frames, 64);
    std::vector<std::uint64_t> v;
    for (int i = 0; i < n; ++i) v.push_back(reinterpret_cast<std::uintptr_t>(frames[i]));
    g_backtraces.push_back(v);
  }
  return x * 3 + 1;
}
__attribute__((noinline)) int stack_path_a(int x) {
  int r = stack_target(x);
  asm volatile("" ::: "memory");
  return r + 1;
}
__attribute__((noinline)) int stack_path_b(int x) {
  int r = stack_target(x + 1);
  asm volatile("" ::: "memory");
  return r + 2;
}
__attribute__((noinline)) int stack_path_c(int x) {
  int r = stack_path_b(x + 2);
  asm volatile("" ::: "memory");
  return r + 3;
}
__attribute__((noinline)) int stack_deep(int depth) {
  if (depth == 0) return stack_target(1);
  int r = stack_deep(depth - 1);
  asm volatile("" ::: "memory");
  return r + 1;
}
}

namespace {

TEST(StackSnapshots, EveryStackEqualsTheProgramsOwnBacktrace) {
  NEED_RSEQ();
  Snapshots s(16384);
  s.enter_this_thread();
  s.patch();
  g_backtraces.clear();
  g_take_backtraces = true;
  int sum = 0;
  for (int i = 0; i < 3; ++i) sum += stack_path_a(i);
  for (int i = 0; i < 5; ++i) sum += stack_path_b(i);
  for (int i = 0; i < 7; ++i) sum += stack_path_c(i);
  g_take_backtraces = false;
  EXPECT_GT(sum, 0);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 15u);
  ASSERT_EQ(g_backtraces.size(), 15u);
  SnapshotUnwinder unwinder(getpid(), 64);
  Function target = function_named("stack_target");
  std::map<std::string, int> by_caller;
  auto [lo, hi] = my_stack();
  for (std::size_t i = 0; i < snaps.size(); ++i) {
    const StackSnapshot& snap = snaps[i];
    EXPECT_EQ(snap.bound, SnapshotBound::Bounded);
    EXPECT_EQ(snap.rip, address_of("stack_target").value());
    EXPECT_EQ(snap.tp, my_tp());
    EXPECT_EQ(snap.stack.size(), std::min<std::uint64_t>(16384, hi - snap.sp));
    auto st = unwinder.unwind(snap);
    EXPECT_FALSE(st.truncated) << i;
    ASSERT_GE(st.ips.size(), 3u);
    // backtrace()'s frame 0 is inside stack_target (its call of backtrace; under ASan the
    // interceptor's own frame comes first); from the frame after it on both are return
    // addresses, and must be the same ones, all of them.
    std::vector<std::uint64_t> ours(st.ips.begin() + 1, st.ips.end());
    const auto& bt = g_backtraces[i];
    auto in_target = std::find_if(bt.begin(), bt.end(), [&](std::uint64_t ip) {
      return ip >= target.start.value() && ip < target.start.value() + target.code.size();
    });
    ASSERT_NE(in_target, bt.end());
    std::vector<std::uint64_t> theirs(in_target + 1, bt.end());
    EXPECT_EQ(ours, theirs) << "hit " << i;
    std::string caller = unwinder.describe(st.ips[1], true);
    ++by_caller[caller.substr(0, caller.find('+'))];
  }
  EXPECT_EQ(by_caller["stack_path_a"], 3);
  EXPECT_EQ(by_caller["stack_path_b"], 12);  // 5 of its own, 7 from stack_path_c
}

TEST(StackSnapshots, AThreadIsBoundedByItsOwnStack) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.patch();
  std::uint64_t lo = 0, hi = 0;
  std::thread t([&] {
    std::tie(lo, hi) = my_stack();
    s.table().enter(my_tp(), lo, hi);
    stack_path_a(1);
    s.table().forget(my_tp());
  });
  t.join();
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  EXPECT_GE(snaps[0].sp, lo);
  EXPECT_LT(snaps[0].sp, hi);
  EXPECT_EQ(snaps[0].stack.size(), std::min<std::uint64_t>(4096, hi - snaps[0].sp));
  SnapshotUnwinder unwinder(getpid(), 64);
  auto st = unwinder.unwind(snaps[0]);
  ASSERT_GE(st.ips.size(), 2u);
  EXPECT_EQ(unwinder.describe(st.ips[1], true).rfind("stack_path_a+", 0), 0u);
}

TEST(StackSnapshots, AThreadNobodyEnteredGetsNoCopy) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.patch();
  std::thread t([] { stack_path_a(1); });
  t.join();
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::UnknownThread);
  EXPECT_EQ(snaps[0].stack.size(), 0u);
}

TEST(StackSnapshots, ADeepStackIsCutAtTheSizeAndSaysSo) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.enter_this_thread();
  s.patch();
  EXPECT_EQ(stack_deep(500), 4 + 500);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  EXPECT_EQ(snaps[0].stack.size(), 4096u);
  SnapshotUnwinder unwinder(getpid(), 1024);
  auto st = unwinder.unwind(snaps[0]);
  EXPECT_TRUE(st.truncated);
  EXPECT_GE(st.ips.size(), 10u);
  for (std::size_t i = 2; i < st.ips.size(); ++i)
    EXPECT_EQ(unwinder.describe(st.ips[i], true).rfind("stack_deep+", 0), 0u) << i;
}

}  // namespace
