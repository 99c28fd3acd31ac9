// Issue 15 items 1, 3, 5 and 7 through `probecost trace`, on awkward_target: probes whose jumps
// would cover each other, every instruction boundary of a function probed at once, a thread
// parked in a signal handler that returns into a range, a routine that reads its caller's flags
// at a probed entry, and a process that refuses executable mappings. Each checks the program's
// output against the untraced run and the hit counts exactly.
#include <gtest/gtest.h>
#include <signal.h>

#include "awkward_harness.hpp"

using namespace probecost::test;

namespace {

class Awkward : public ::testing::TestWithParam<std::string> {};

const std::string kOverlap = "awkward_overlap";

// +0's jump would take 7 bytes (mov 3 + add 4): +3 is inside it.
std::vector<std::string> overlapping() {
  return {"-b", kOverlap, "-b", kOverlap + "+3"};
}

void expect_overlap_placement(const Json& report) {
  const Json& first = probe_of(report, kOverlap);
  EXPECT_EQ(first["via"], "int3");
  EXPECT_NE(first["why_not_jump"].get<std::string>().find(
                "(" + kOverlap + "+3) is inside the 7 bytes the jump would replace"),
            std::string::npos)
      << first["why_not_jump"];
  EXPECT_EQ(probe_of(report, kOverlap + "+3")["via"], "jump");
}

}  // namespace

TEST_P(Awkward, OverlappingSitesLaunchedBothCountExactly) {
  auto untraced = run_command({GetParam(), "overlap", "1000"});
  auto t = trace_launched(overlapping(), {GetParam(), "overlap", "1000"});
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, untraced.out);
  EXPECT_EQ(hits_of(t.report, kOverlap), 1000);
  EXPECT_EQ(hits_of(t.report, kOverlap + "+3"), 1000);
  expect_overlap_placement(t.report);
}

TEST_P(Awkward, OverlappingSitesAttachedBothCountExactly) {
  Target target(GetParam(), 1);
  std::vector<std::string> args = {"-p", std::to_string(target.pid)};
  for (auto& a : overlapping()) args.push_back(a);
  Trace trace(args);
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  std::string want = run_command({GetParam(), "overlap", "1000"}).out;
  EXPECT_EQ(target.ask("overlap 1000") + "\n", want);
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(hits_of(r, kOverlap), 1000);
  EXPECT_EQ(hits_of(r, kOverlap + "+3"), 1000);
  expect_overlap_placement(r);
  expect_text_matches_file(target.pid, address_of(probe_of(r, kOverlap)), 14);
}

TEST_P(Awkward, ViaJumpRefusesAnOverlapWithItsReasonAndLeavesTheProcessAlone) {
  Target target(GetParam(), 1);
  // A --duration ends the trace should the jump go in after all (the test fails, not hangs).
  std::vector<std::string> args = {PROBECOST_BIN, "trace", "--via", "jump",
                                   "--duration",  "10",    "-p",    std::to_string(target.pid)};
  for (auto& a : overlapping()) args.push_back(a);
  Result r = run_command(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot patch a jump at " + kOverlap + " "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is inside the 7 bytes the jump would replace"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("instruction boundary"), std::string::npos) << r.err;
  // Nothing was patched, and no area was left mapped for the jump that was not refused.
  EXPECT_FALSE(maps_mention(target.pid, "probecost-jump"));
  EXPECT_EQ(target.ask("overlap 10") + "\n", run_command({GetParam(), "overlap", "10"}).out);
}

TEST_P(Awkward, EveryBoundaryOfAStraightLineFunctionAtOnceCountsEveryCall) {
  Target target(GetParam(), 1);
  auto offsets = boundaries(target.pid, kOverlap);
  ASSERT_EQ(offsets, (std::vector<std::uint64_t>{0, 3, 7, 9, 13}));
  auto t = trace_launched(probe_args(kOverlap, offsets), {GetParam(), "overlap", "500"});
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, run_command({GetParam(), "overlap", "500"}).out);
  for (auto off : offsets) EXPECT_EQ(hits_of(t.report, spec(kOverlap, off)), 500) << off;
  // Attached, the same.
  std::vector<std::string> args = {"-p", std::to_string(target.pid)};
  for (auto& a : probe_args(kOverlap, offsets)) args.push_back(a);
  Trace trace(args);
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("overlap 500") + "\n", t.run.out);
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  for (auto off : offsets) EXPECT_EQ(hits_of(trace.report(), spec(kOverlap, off)), 500) << off;
}

TEST_P(Awkward, EveryBoundaryOfACompiledLoopAtOnceCountsAsInt3Does) {
  Target target(GetParam(), 1);
  auto offsets = boundaries(target.pid, "awkward_mix");
  ASSERT_GT(offsets.size(), 8u);
  std::vector<std::string> command = {GetParam(), "mix", "3000"};
  auto args = probe_args("awkward_mix", offsets);
  auto with_int3 = args;
  with_int3.insert(with_int3.end(), {"--via", "int3"});
  auto reference = trace_launched(with_int3, command);
  auto t = trace_launched(args, command);
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, run_command(command).out);
  EXPECT_EQ(t.run.out, reference.run.out);
  std::size_t jumps = 0;
  for (auto off : offsets) {
    EXPECT_EQ(hits_of(t.report, spec("awkward_mix", off)),
              hits_of(reference.report, spec("awkward_mix", off)))
        << off;
    jumps += probe_of(t.report, spec("awkward_mix", off))["via"] == "jump";
  }
  std::printf("awkward_mix: %zu boundaries, %zu of them jumps\n", offsets.size(), jumps);
}

TEST_P(Awkward, ARoutineReadingItsCallersFlagsAtAJumpProbedEntryGetsThemAll) {
  std::vector<std::string> command = {GetParam(), "flags", "10"};
  auto t = trace_launched({"-b", "awkward_read_flags", "--via", "jump"}, command);
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, "flags=640/640\n");
  EXPECT_EQ(hits_of(t.report, "awkward_read_flags"), 640);
}

TEST_P(Awkward, AHandlerThatReturnsIntoTheRangeKeepsTheJumpOutAndTheProgramRuns) {
  Target target(GetParam(), 1);
  ASSERT_EQ(target.ask("park"), "parked");
  std::string pid = std::to_string(target.pid);
  // The parked thread's live RIP is in read(); the RIP its signal frame saved is awkward_park+2
  // or +4, inside the 6 bytes a jump at awkward_park would replace.
  Result r = run_command({PROBECOST_BIN, "trace", "--via", "jump", "--duration", "10", "-p", pid,
                          "-b", "awkward_park"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is in a signal handler that returns to "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("inside the 6 bytes the jump would replace (still after 8 tries)"),
            std::string::npos)
      << r.err;
  Trace trace({"-p", pid, "-b", "awkward_park"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("release"), "released rc=1");
  EXPECT_EQ(target.ask("park_calls 100"), "park_calls=100");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json p = probe_of(trace.report(), "awkward_park");
  EXPECT_EQ(p["via"], "int3");
  EXPECT_NE(p["why_not_jump"].get<std::string>().find("signal handler"), std::string::npos)
      << p["why_not_jump"];
  EXPECT_EQ(p["hits"], 100);  // the parked call had passed the site before the probe was in
}

// The same with the handler on a sigaltstack of two mappings, its RSP in the lower and its
// frame in the upper: the scan for a frame's mark (signal_frames.hpp) read RSP's mapping alone,
// found none, walked nothing, and the jump went in: SIGSEGV at the handler's return.
TEST_P(Awkward, AHandlerOnASplitAltstackStillKeepsTheJumpOut) {
  Target target(GetParam(), 1);
  ASSERT_EQ(target.ask("park_split"), "parked");
  Result r = run_command({PROBECOST_BIN, "trace", "--via", "jump", "--duration", "10", "-p",
                          std::to_string(target.pid), "-b", "awkward_park"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is in a signal handler that returns to "), std::string::npos) << r.err;
  EXPECT_EQ(target.ask("release"), "released rc=1");
}

TEST_P(Awkward, AProcessRefusingExecutableMappingsIsProbedWithInt3AndTold) {
  Target target(GetParam(), 1);
  ASSERT_EQ(target.ask("seal"), "sealed EPERM");
  std::string pid = std::to_string(target.pid);
  std::string want = run_command({GetParam(), "overlap", "100"}).out;
  for (std::string via : {"auto", "int3"}) {
    Trace trace({"-p", pid, "-b", kOverlap, "--via", via, "--step-over", "auto"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(target.ask("overlap 100") + "\n", want) << via;
    ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
    Json p = probe_of(trace.report(), kOverlap);
    EXPECT_EQ(p["via"], "int3") << via;
    EXPECT_EQ(p["hits"], 100) << via;
    // No copy out of line: `mov %rdi,%rax` is emulated, and says why.
    EXPECT_NE(p["step_over"].get<std::string>().find("emulate"), std::string::npos) << p;
    EXPECT_NE(p["step_over"].get<std::string>().find("Operation not permitted"), std::string::npos)
        << p;
    EXPECT_NE(trace.stderr_text.find("no out-of-line step-over"), std::string::npos)
        << trace.stderr_text;
    if (via == "auto") {
      EXPECT_NE(p["why_not_jump"].get<std::string>().find("refuses executable mappings"),
                std::string::npos)
          << p;
      EXPECT_NE(trace.stderr_text.find("refuses executable mappings"), std::string::npos)
          << trace.stderr_text;
    }
    EXPECT_FALSE(maps_mention(target.pid, "probecost-jump")) << via;
  }
  Result r = run_command(
      {PROBECOST_BIN, "trace", "--via", "jump", "--duration", "10", "-p", pid, "-b", kOverlap});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("refuses executable mappings"), std::string::npos) << r.err;
  EXPECT_FALSE(maps_mention(target.pid, "probecost-jump"));
  EXPECT_EQ(target.ask("overlap 100") + "\n", want);
}

TEST_P(Awkward, UnderTheKernelsMemoryDenyWriteExecuteJumpsStillGoIn) {
  // PR_SET_MDWE refuses a mapping that gains PROT_EXEC (mprotect), not one mapped executable
  // and never writable, which is how the trampolines are mapped.
  Target target(GetParam(), 1);
  std::string said = target.ask("mdwe");
  if (said == "mdwe unsupported") GTEST_SKIP() << "no PR_SET_MDWE in this kernel";
  ASSERT_EQ(said, "mdwe EACCES");
  Trace trace({"-p", std::to_string(target.pid), "-b", kOverlap, "--via", "jump"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("overlap 100") + "\n", run_command({GetParam(), "overlap", "100"}).out);
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(hits_of(trace.report(), kOverlap), 100);
}

// An int3 hit in a thread that blocks SIGTRAP makes the kernel reset the process's SIGTRAP
// disposition to SIG_DFL and unblock it in that thread (a forced signal): after detach the
// program has its handler and its mask back, and its own SIGTRAP is handled, not fatal.
TEST_P(Awkward, AProgramThatBlocksSigtrapKeepsItsHandlerAndMaskAfterInt3Hits) {
  Target target(GetParam(), 1);
  ASSERT_EQ(target.ask("block_trap"), "trap blocked");
  Trace trace({"-p", std::to_string(target.pid), "-b", kOverlap, "--via", "int3"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("overlap 100") + "\n", run_command({GetParam(), "overlap", "100"}).out);
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(hits_of(trace.report(), kOverlap), 100);
  EXPECT_EQ(target.ask("trap_check"), "blocked=1 own=1 handled=1");
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, Awkward, ::testing::Values(AWKWARD_PIE, AWKWARD_NOPIE),
                         [](const auto& info) { return info.index == 0 ? "Pie" : "NonPie"; });
