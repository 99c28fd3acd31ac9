// Issue 16 §1: an attach holds the process only to check threads and write bytes. What can be
// read of a running process (its symbols, the modules' code and branch index) is read before
// the stop: the report says what was read while it was held. The time itself is a benchmark
// (scripts/hold-time.sh), never an assertion here.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/trace/trace_harness.hpp"

namespace probecost::test {
namespace {

// The breakdown of held_s: from the threads' stop to their resume, every phase once, the
// guardian's fork not among them (it is made before the stop).
void expect_held_phases(const Json& r) {
  std::vector<std::string> names;
  double wall = 0;
  for (const auto& ph : r["held_phases"]) {
    names.push_back(ph["phase"]);
    wall += ph["wall_s"].get<double>();
    EXPECT_GE(ph["wall_s"].get<double>(), 0) << ph.dump();
    EXPECT_GE(ph["cpu_s"].get<double>(), 0) << ph.dump();
  }
  ASSERT_GE(names.size(), 3u) << r.dump(2);
  EXPECT_EQ(names.front(), "stopping the threads") << r.dump(2);
  EXPECT_EQ(names.back(), "resuming the threads") << r.dump(2);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << r.dump(2);
  EXPECT_NEAR(wall, r["held_s"].get<double>(), 1e-9) << r.dump(2);
}

TEST(TraceHold, EverythingButTheChecksAndWritesIsReadBeforeTheStop) {
  Target target({GAP_TARGET});
  ASSERT_EQ(target.ready_line.rfind("ready ", 0), 0u) << target.ready_line;
  Trace trace({"-p", std::to_string(target.pid), "-b", "gap_fn", "-b", "libc.so.6:malloc", "-b",
               "libc.so.6:free", "-b", "libc.so.6:write"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["symbols_before_stop"], true) << r.dump(2);
  EXPECT_EQ(r["probes_before_stop"], true) << r.dump(2);
  EXPECT_EQ(r["modules_read_held"], 0u) << r.dump(2);
  ASSERT_EQ(r["probes"].size(), 4u) << r.dump(2);
  for (const auto& p : r["probes"]) expect_text_matches_file(target.pid, address_of(p));
  EXPECT_EQ(target.ask("gap").rfind("gap_us=", 0), 0u);
  expect_held_phases(r);
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
  expect_held_phases(r);
}

}  // namespace
}  // namespace probecost::test
