// Issue 16 §6: several processes by PID (-p repeated, or a list), one row set per process, and
// every never-harm rule per process: one that exits leaves the others traced, SIGINT lets go of
// them all. Counts against each target's own.
#include <gtest/gtest.h>

#include <map>

#include "tests/support/run_capture.hpp"
#include "tests/trace/trace_harness.hpp"

namespace probecost::test {
namespace {

std::map<pid_t, std::uint64_t> hits_by_pid(const Json& r) {
  std::map<pid_t, std::uint64_t> out;
  for (const auto& p : r["probes"]) out[p["pid"].get<pid_t>()] += p["hits"].get<std::uint64_t>();
  return out;
}

class TraceSeveral : public ::testing::TestWithParam<const char*> {};

TEST_P(TraceSeveral, CountsEachProcessOnItsOwn) {
  Target a(SERVE_PIE, 2), b(SERVE_NOPIE, 1);
  std::string pa = std::to_string(a.pid), pb = std::to_string(b.pid);
  std::vector<std::string> args = {"-b", "probecost_test_site", "--via", GetParam()};
  if (std::string(GetParam()) == "int3") {
    args.insert(args.end(), {"-p", pa + "," + pb});
  } else {
    args.insert(args.end(), {"-p", pa, "-p", pb});
  }
  Trace trace(args);
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // One line once both are in.
  EXPECT_NE(trace.stderr_text.find("tracing processes " + pa + " (1 thread, 1 probe), " + pb +
                                   " (1 thread, 1 probe)"),
            std::string::npos)
      << trace.stderr_text;
  EXPECT_EQ(a.ask("go 100"), "calls=200");
  EXPECT_EQ(b.ask("go 300"), "calls=300");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  auto hits = hits_by_pid(r);
  EXPECT_EQ(hits[a.pid], 200u) << r.dump(2);
  EXPECT_EQ(hits[b.pid], 300u) << r.dump(2);
  EXPECT_EQ(r["hits"], 500u);
  ASSERT_EQ(r["processes"].size(), 2u) << r.dump(2);
  for (const auto& p : r["probes"]) {
    expect_text_matches_file(p["pid"].get<pid_t>(), address_of(p));
  }
  EXPECT_EQ(a.ask("go 1"), "calls=202");
  EXPECT_EQ(b.ask("go 1"), "calls=301");
}

// One exits: the other is still traced, and counted.
TEST_P(TraceSeveral, OneExitsAndTheOtherGoesOn) {
  Target a(SERVE_PIE, 1), b(SERVE_PIE, 1);
  Trace trace({"-p", std::to_string(a.pid), "-p", std::to_string(b.pid), "-b",
               "probecost_test_site", "--via", GetParam()});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(a.ask("go 50"), "calls=50");
  EXPECT_EQ(a.ask("exit"), "bye");
  EXPECT_EQ(a.wait_exit(), 0);
  EXPECT_EQ(b.ask("go 70"), "calls=70");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  auto hits = hits_by_pid(r);
  EXPECT_EQ(hits[a.pid], 50u) << r.dump(2);
  EXPECT_EQ(hits[b.pid], 70u) << r.dump(2);
  for (const auto& p : r["probes"]) {
    if (p["pid"] == b.pid) expect_text_matches_file(b.pid, address_of(p));
  }
}

INSTANTIATE_TEST_SUITE_P(Via, TraceSeveral, ::testing::Values("int3", "jump"));

TEST(TraceSeveralUsage, APidGivenTwiceIsAUsageError) {
  auto r = run_command({PROBECOST_BIN, "trace", "-p", "1,1", "-b", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("process 1 is given twice"), std::string::npos) << r.err;
  r = run_command({PROBECOST_BIN, "trace", "-p", "1,x", "-b", "x"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("bad -p 'x'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace probecost::test
