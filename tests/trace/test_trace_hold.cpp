// Issue 16 §1: an attach holds the process only to check threads and write bytes. What can be
// read of a running process (its symbols, the modules' code and branch index) is read before
// the stop: the report says what was read while it was held. The time itself is a benchmark
// (scripts/hold-time.sh), never an assertion here.
#include <gtest/gtest.h>

#include "tests/trace/trace_harness.hpp"

namespace probecost::test {
namespace {

TEST(TraceHold, EverythingButTheChecksAndWritesIsReadBeforeTheStop) {
  Target target({GAP_TARGET});
  ASSERT_EQ(target.ready_line.rfind("ready ", 0), 0u) << target.ready_line;
  Trace trace({"-p", std::to_string(target.pid), "-b", "gap_fn", "-b", "libc.so.6:malloc", "-b",
               "libc.so.6:free", "-b", "libc.so.6:write"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["symbols_before_stop"], true) << r.dump(2);
  EXPECT_EQ(r["modules_read_held"], 0u) << r.dump(2);
  ASSERT_EQ(r["probes"].size(), 4u) << r.dump(2);
  for (const auto& p : r["probes"]) expect_text_matches_file(target.pid, address_of(p));
  EXPECT_EQ(target.ask("gap").rfind("gap_us=", 0), 0u);
}

// With --via int3 nothing needs the modules' code; the symbols are still read before.
TEST(TraceHold, Int3ProbesReadTheSymbolsBeforeTheStopToo) {
  Target target({GAP_TARGET});
  Trace trace({"-p", std::to_string(target.pid), "-b", "gap_fn", "--via", "int3"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["symbols_before_stop"], true) << r.dump(2);
  EXPECT_EQ(r["modules_read_held"], 0u) << r.dump(2);
}

}  // namespace
}  // namespace probecost::test
