// Call pairing per thread (record/pairing.hpp) on synthetic streams: every way a frame ends.
#include <gtest/gtest.h>

#include "record/pairing.hpp"
#include "tests/record/record_fixtures.hpp"

namespace probecost::record {
namespace {

using testing::entry;
using testing::exit;
using testing::Log;
using testing::unwound;
using Lines = std::vector<std::string>;

Lines paired(std::initializer_list<Event> events, bool finish = true) {
  Log log;
  Pairing pairing(log);
  for (const Event& e : events) pairing.add(e);
  if (finish) pairing.finish();
  return log.lines;
}

TEST(RecordPairing, NestedProbesCloseInnermostFirst) {
  // f calls g twice.
  EXPECT_EQ(paired({entry(1, 0, 10), entry(1, 1, 11), exit(1, 1, 12), entry(1, 1, 13),
                    exit(1, 1, 14), exit(1, 0, 20)}),
            (Lines{"call t1 p1 11-12", "call t1 p1 13-14", "call t1 p0 10-20"}));
}

TEST(RecordPairing, RecursionPairsEachReturnWithItsOwnEntry) {
  EXPECT_EQ(paired({entry(1, 0, 10), entry(1, 0, 11), entry(1, 0, 12), exit(1, 0, 13),
                    exit(1, 0, 14), exit(1, 0, 15)}),
            (Lines{"call t1 p0 12-13", "call t1 p0 11-14", "call t1 p0 10-15"}));
}

TEST(RecordPairing, ExceptionThroughInnerFramesLeavesThemUnmatched) {
  // f -> g -> h; h throws, f catches and returns: g and h never returned.
  EXPECT_EQ(
      paired({entry(1, 0, 10), entry(1, 1, 11), entry(1, 2, 12), exit(1, 0, 20)}),
      (Lines{"unmatched t1 p2 12 skipped", "unmatched t1 p1 11 skipped", "call t1 p0 10-20"}));
}

TEST(RecordPairing, RecursionUnwoundPairsByStackSlotWhenKnown) {
  // f(3) -> f(2) -> f(1) throws, caught in f(3), which returns. With the return-address slots,
  // the return is f(3)'s own; the two inner frames were unwound.
  Lines with_sp = paired({entry(1, 0, 10, 0x7f00), entry(1, 0, 11, 0x7ec0), entry(1, 0, 12, 0x7e80),
                          exit(1, 0, 20, 0, 0x7f00)});
  EXPECT_EQ(with_sp, (Lines{"unmatched t1 p0 12 skipped", "unmatched t1 p0 11 skipped",
                            "call t1 p0 10-20"}));
  // Without them the return can only be given to the innermost open frame of the probe.
  Lines without = paired({entry(1, 0, 10), entry(1, 0, 11), entry(1, 0, 12), exit(1, 0, 20)});
  EXPECT_EQ(without, (Lines{"call t1 p0 12-20", "unmatched t1 p0 11 open_at_end",
                            "unmatched t1 p0 10 open_at_end"}));
}

TEST(RecordPairing, LongjmpPastFramesThenTheSameProbeAgain) {
  // setjmp in f; g -> h longjmp back to f, which calls g again, which returns; then f returns.
  EXPECT_EQ(paired({entry(1, 0, 10, 0x900), entry(1, 1, 11, 0x8c0), entry(1, 2, 12, 0x880),
                    entry(1, 1, 13, 0x8c0), exit(1, 1, 14, 0, 0x8c0), exit(1, 0, 15, 0, 0x900)}),
            (Lines{"unmatched t1 p2 12 skipped", "unmatched t1 p1 11 skipped", "call t1 p1 13-14",
                   "call t1 p0 10-15"}));
}

TEST(RecordPairing, UnwoundEventClosesItsFrameWithTheTime) {
  EXPECT_EQ(paired({entry(1, 0, 10), entry(1, 1, 11), unwound(1, 1, 15), exit(1, 0, 20)}),
            (Lines{"call t1 p1 11-15 unwound", "call t1 p0 10-20"}));
}

TEST(RecordPairing, SignalHandlerCallsNestOnTheInterruptedFrame) {
  // f is interrupted by a signal whose handler calls f and g; the handler returns, f returns.
  EXPECT_EQ(paired({entry(1, 0, 10), entry(1, 0, 11), exit(1, 0, 12), entry(1, 1, 13),
                    exit(1, 1, 14), exit(1, 0, 20)}),
            (Lines{"call t1 p0 11-12", "call t1 p1 13-14", "call t1 p0 10-20"}));
}

TEST(RecordPairing, SignalHandlerOnAnAltstackAboveOrBelow) {
  // The interrupted f's slot is 0x7000; the handler runs on a sigaltstack at 0x9000, then at
  // 0x5000, and calls f each time.
  for (std::uint64_t alt : {0x9000, 0x5000}) {
    EXPECT_EQ(paired({entry(1, 0, 10, 0x7000), entry(1, 0, 11, alt), exit(1, 0, 12, 0, alt),
                      entry(1, 0, 13, alt), exit(1, 0, 14, 0, alt), exit(1, 0, 20, 0, 0x7000)}),
              (Lines{"call t1 p0 11-12", "call t1 p0 13-14", "call t1 p0 10-20"}))
        << std::hex << alt;
  }
}

TEST(RecordPairing, ThreadsInterleavedPairApart) {
  // Two threads in the same recursive function, their events interleaved.
  EXPECT_EQ(
      paired({entry(1, 0, 10), entry(2, 0, 11), entry(1, 0, 12), entry(2, 0, 13), exit(2, 0, 14),
              exit(1, 0, 15), exit(1, 0, 16), exit(2, 0, 17)}),
      (Lines{"call t2 p0 13-14", "call t1 p0 12-15", "call t1 p0 10-16", "call t2 p0 11-17"}));
}

TEST(RecordPairing, ReturnWithoutEntryIsAnOrphanAndClosesNothing) {
  // Attached inside f: its returns have no entry and close nothing (g, open on top, stays).
  EXPECT_EQ(paired({exit(1, 0, 5), entry(1, 1, 10), exit(1, 0, 11), exit(1, 1, 12)}),
            (Lines{"orphan t1 p0 5", "orphan t1 p0 11", "call t1 p1 10-12"}));
}

TEST(RecordPairing, OpenFramesAtTheEndAndAtThreadExitAreUnmatched) {
  Log log;
  Pairing pairing(log);
  pairing.add(entry(1, 0, 10));
  pairing.add(entry(1, 1, 11));
  pairing.add(entry(2, 0, 12));
  EXPECT_EQ(pairing.open_frames(), 3u);
  pairing.thread_exited(100, 1);
  pairing.add(exit(1, 0, 13));  // a new thread with the same tid
  pairing.finish();
  EXPECT_EQ(log.lines, (Lines{"unmatched t1 p1 11 thread_gone", "unmatched t1 p0 10 thread_gone",
                              "orphan t1 p0 13", "unmatched t2 p0 12 open_at_end"}));
  EXPECT_EQ(pairing.open_frames(), 0u);
}

TEST(RecordPairing, StackDepthIsBoundedByEvictingTheOldest) {
  Log log;
  Pairing pairing(log, 3);
  for (std::uint64_t t = 1; t <= 5; ++t) pairing.add(entry(1, 0, t));
  EXPECT_EQ(pairing.open_frames(), 3u);
  EXPECT_EQ(log.lines, (Lines{"unmatched t1 p0 1 evicted", "unmatched t1 p0 2 evicted"}));
}

TEST(RecordPairing, RecursionDeeperThan65536LevelsPairsEveryFrame) {
  // rec(100000): before, a cap of 65,536 open frames evicted the outermost 34,464 live ones
  // (65,536 returns and 34,465 unmatched).
  Log log;
  Pairing pairing(log);
  const std::uint64_t depth = 100001, top = 0x7fff00000000;
  for (std::uint64_t i = 0; i < depth; ++i) pairing.add(entry(1, 0, 10 + i, top - 48 * i));
  EXPECT_EQ(pairing.open_frames(), depth);
  for (std::uint64_t i = depth; i-- > 0;)
    pairing.add(exit(1, 0, 10 + 2 * depth - i, 0, top - 48 * i));
  pairing.finish();
  ASSERT_EQ(log.lines.size(), depth);
  for (const auto& line : log.lines) ASSERT_EQ(line.rfind("call t1 p0 ", 0), 0u) << line;
  EXPECT_EQ(log.lines.back(), "call t1 p0 10-" + std::to_string(10 + 2 * depth));
}

TEST(RecordPairing, CoroutinesYieldingMidCallPairOnTheirOwnStacks) {
  // Two ucontext coroutines on stacks of their own (above and below each other), each in f
  // when it swaps to the other; main's g (on the thread's stack) resumes them. Before, each
  // exit closed the other coroutine's f as unwound past, and its own exit was an orphan.
  for (std::uint64_t c2 : {0x5600'0010'0000ull, 0x5600'0000'1000ull}) {
    const std::uint64_t main_sp = 0x7ffd'0000'0000, c1 = 0x5600'0008'0000;
    EXPECT_EQ(
        paired({entry(1, 1, 10, main_sp), entry(1, 0, 11, c1), entry(1, 0, 12, c2),
                exit(1, 0, 13, 0, c1), entry(1, 0, 14, c1), exit(1, 0, 15, 0, c2),
                exit(1, 0, 16, 0, c1), exit(1, 1, 17, 0, main_sp)}),
        (Lines{"call t1 p0 11-13", "call t1 p0 12-15", "call t1 p0 14-16", "call t1 p1 10-17"}))
        << std::hex << c2;
  }
}

TEST(RecordPairing, AnOuterReturnLeavesOtherStacksOpen) {
  // g on the thread's stack resumes a coroutine, whose f yields back; g returns, then f does.
  EXPECT_EQ(paired({entry(1, 1, 10, 0x7ffd'0000'0000), entry(1, 0, 11, 0x5600'0008'0000),
                    exit(1, 1, 12, 0, 0x7ffd'0000'0000), exit(1, 0, 13, 0, 0x5600'0008'0000)}),
            (Lines{"call t1 p1 10-12", "call t1 p0 11-13"}));
  // An exception on a coroutine's stack unwinds only that stack's frames.
  EXPECT_EQ(paired({entry(1, 1, 10, 0x7ffd'0000'0000), entry(1, 0, 11, 0x5600'0008'0000),
                    entry(1, 0, 12, 0x5600'0007'ff00), entry(1, 2, 13, 0x7ffd'0000'0000 - 64),
                    exit(1, 0, 14, 0, 0x5600'0008'0000)}),
            (Lines{"unmatched t1 p0 12 skipped", "call t1 p0 11-14",
                   "unmatched t1 p2 13 open_at_end", "unmatched t1 p1 10 open_at_end"}));
}

TEST(RecordPairing, OpenFramesKeepTheirArguments) {
  struct Args : Output {
    std::vector<std::uint64_t> got;
    void call(const Event& e, const Event&) override {
      got.insert(got.end(), e.args.begin(), e.args.end());
    }
  };
  Args args;
  Pairing kept(args, Pairing::kMaxDepth, 2);
  kept.add(entry(1, 0, 10, 0x900, {7, 8, 9}));
  kept.add(entry(1, 0, 11, 0x8c0, {4, 5, 6}));
  kept.add(exit(1, 0, 12, 0, 0x8c0));
  kept.add(exit(1, 0, 13, 0, 0x900));
  EXPECT_EQ(args.got, (std::vector<std::uint64_t>{4, 5, 0, 0, 0, 0, 7, 8, 0, 0, 0, 0}));
}

TEST(RecordPairing, AllThreadsTogetherAreBounded) {
  Log log;
  Pairing pairing(log, 10, 0, 4);
  for (std::int32_t tid = 1; tid <= 3; ++tid) {
    for (std::uint64_t t = 1; t <= 2; ++t) pairing.add(entry(tid, 0, 10 * tid + t));
  }
  // Thread 3's first frame: it has none to give up, so the largest thread's oldest goes (the
  // first one's, on a tie); its second: its own oldest.
  EXPECT_EQ(pairing.open_frames(), 4u);
  EXPECT_EQ(log.lines, (Lines{"unmatched t1 p0 11 evicted", "unmatched t3 p0 31 evicted"}));
}

TEST(RecordPairing, SameTidInTwoProcessesIsTwoThreads) {
  Log log;
  Pairing pairing(log);
  Event a = entry(1, 0, 10);
  Event b = exit(1, 0, 11);
  b.pid = 200;
  pairing.add(a);
  pairing.add(b);
  EXPECT_EQ(log.lines, (Lines{"orphan t1 p0 11"}));
}

}  // namespace
}  // namespace probecost::record
