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
