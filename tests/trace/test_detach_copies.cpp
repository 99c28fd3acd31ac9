// A thread left in a relocated copy across a detach (tracer/core/copy_exits.hpp), and a later
// probecost's jump over the same site. The scratch page of the out-of-line copies stays mapped
// after a trace, and a copy jumps back to the instruction after its original: into the middle of
// the jump a second trace puts there, had the first left a signal frame returning into the copy.
// And the planning side: a signal frame returning into code no file holds that jumps into a
// range (a copy another probecost left, JIT code) keeps the jump out of that range.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>

#include "awkward_harness.hpp"

using namespace probecost::test;

namespace {

class DetachCopies : public ::testing::TestWithParam<std::string> {};

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#lx", static_cast<unsigned long>(v));
  return buf;
}

}  // namespace

TEST_P(DetachCopies, ASignalFrameInAnOutOfLineCopyLeavesItAtDetachAndALaterJumpIsSafe) {
  Target target(GetParam(), 1);
  std::string pid = std::to_string(target.pid);
  ASSERT_EQ(target.ask("spin"), "spinning");
  {
    // push %rbx runs from the scratch page at every hit; a SIGUSR2 delivered while the thread is
    // resumed into it leaves a handler frame returning there, parked across the detach.
    Trace a({"-p", pid, "-b", "awkward_push", "--via", "int3", "--step-over", "outline"});
    ASSERT_TRUE(a.ready) << a.stderr_text;
    ASSERT_EQ(target.ask("signal_in_copy"), "in copy");
    ASSERT_EQ(a.finish(SIGINT), 0) << a.stderr_text;
    Json p = probe_of(a.report(), "awkward_push");
    EXPECT_EQ(p["via"], "int3");
    EXPECT_GT(p["hits"].get<std::int64_t>(), 0);
  }
  // The frame now returns to awkward_push itself, where the jump goes in and takes it.
  Trace b({"-p", pid, "-b", "awkward_push", "--via", "jump"});
  ASSERT_TRUE(b.ready) << b.stderr_text;
  EXPECT_EQ(target.ask("release_spin"), "ran on");
  ASSERT_EQ(b.finish(SIGINT), 0) << b.stderr_text;
  Json p = probe_of(b.report(), "awkward_push");
  EXPECT_EQ(p["via"], "jump");
  EXPECT_GE(p["hits"].get<std::int64_t>(), 1000);
  // Every call ran awkward_push's body once: none lost, none run twice.
  std::string stop = target.ask("stop");
  unsigned long spins = 0, pushes = 0;
  ASSERT_EQ(std::sscanf(stop.c_str(), "spins=%lu pushes=%lu", &spins, &pushes), 2) << stop;
  EXPECT_EQ(spins, pushes) << stop;
  EXPECT_EQ(target.ask("exit"), "bye");
  int status = target.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_P(DetachCopies, AHandlerReturningThroughForeignCodeIntoTheRangeKeepsTheJumpOut) {
  Target target(GetParam(), 1);
  ASSERT_EQ(target.ask("park_foreign"), "parked");
  std::string pid = std::to_string(target.pid);
  // The frame returns into an anonymous page whose jmp *0(%rip) goes to awkward_park+2, inside
  // the 6 bytes a jump at awkward_park would replace.
  Result r = run_command({PROBECOST_BIN, "trace", "--via", "jump", "--duration", "10", "-p", pid,
                          "-b", "awkward_park"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("in code no file holds"), std::string::npos) << r.err;
  Trace trace({"-p", pid, "-b", "awkward_park"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("release"), "released rc=1");
  EXPECT_EQ(target.ask("park_calls 100"), "park_calls=100");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json p = probe_of(trace.report(), "awkward_park");
  EXPECT_EQ(p["via"], "int3");
  std::string park = p["address"].get<std::string>();
  std::string inside = "which jumps to " + hex(std::stoull(park, nullptr, 16) + 2) +
                       ", inside the 6 bytes the jump would replace (still after 8 tries)";
  EXPECT_NE(p["why_not_jump"].get<std::string>().find(inside), std::string::npos)
      << p["why_not_jump"];
  EXPECT_NE(r.err.find(inside), std::string::npos) << r.err;
  EXPECT_EQ(p["hits"], 100);
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, DetachCopies, ::testing::Values(AWKWARD_PIE, AWKWARD_NOPIE),
                         [](const auto& info) { return info.index == 0 ? "Pie" : "NonPie"; });
