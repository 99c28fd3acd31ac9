// `probecost trace --via jump|auto` on serve_target: exact counts without a trap, the text as
// in the ELF file after detach, refusals with their reasons, and what is left when probecost is
// killed: a process that runs on, and `probecost restore` putting every byte back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "run_capture.hpp"
#include "trace_harness.hpp"

using namespace probecost::test;

namespace {

class JumpTraceTest : public ::testing::TestWithParam<std::string> {};

Result run_probecost(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  return run_command(args);
}

Result restore(pid_t pid, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"restore", "-p", std::to_string(pid), "-f", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_probecost(args);
}

}  // namespace

TEST_P(JumpTraceTest, CountsEveryCallOfFourThreadsWithoutATrap) {
  Target target(GetParam(), 4);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--via", "jump"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 25000"), "calls=100000");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  ASSERT_EQ(r["probes"].size(), 1u);
  EXPECT_EQ(r["probes"][0]["via"], "jump");
  EXPECT_EQ(r["probes"][0]["hits"], 100000);
  EXPECT_EQ(r["int3_hits"], 0);
  EXPECT_EQ(r["jump_hits"], 100000);
  EXPECT_EQ(r["tracer_cpu_ns_per_jump_hit"], 0.0) << "the tracer never runs for a jump hit";
  expect_text_matches_file(target.pid, address_of(r["probes"][0]));
  EXPECT_EQ(target.ask("go 10"), "calls=100040");
}

TEST_P(JumpTraceTest, SignalsLandingInTrampolinesAreDeliveredAndTheirHandlersCounted) {
  Target target(GetParam(), 4);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--via", "jump"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // Four threads call the site while SIGUSR2 rains on them, until 1000 signals are handled;
  // each handler calls the site once more, from wherever the signal landed (inside a
  // trampoline too).
  std::string reply = target.ask("gosig 20000");
  std::uint64_t calls = 0, loops = 0, handled = 0;
  ASSERT_EQ(std::sscanf(reply.c_str(), "calls=%lu loops=%lu handled=%lu", &calls, &loops, &handled),
            3)
      << reply;
  EXPECT_GE(handled, 1000u);
  EXPECT_GE(loops, 80000u);
  EXPECT_EQ(calls, loops + handled);
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], calls);
}

TEST_P(JumpTraceTest, EventsAreReadWhileItRunsAndAccountedFor) {
  Target target(GetParam(), 2);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--events"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 5000"), "calls=10000");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json p = trace.report()["probes"][0];
  EXPECT_EQ(p["hits"], 10000);
  EXPECT_EQ(p["events"]["read"].get<std::uint64_t>() + p["events"]["lost"].get<std::uint64_t>(),
            10000u);
}

TEST_P(JumpTraceTest, AutoFallsBackToInt3WhereAJumpCannotGoAndSaysWhy) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "-b",
               "probecost_tiny", "-b", "probecost_calls_first"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 100"), "calls=100");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["via"], "jump");
  EXPECT_EQ(r["probes"][0]["hits"], 100);
  EXPECT_EQ(r["probes"][1]["via"], "int3");
  EXPECT_NE(r["probes"][1]["why_not_jump"].get<std::string>().find("a jump needs 5"),
            std::string::npos)
      << r["probes"][1]["why_not_jump"];
  EXPECT_EQ(r["probes"][2]["via"], "int3");
  EXPECT_NE(r["probes"][2]["why_not_jump"].get<std::string>().find("call"), std::string::npos)
      << r["probes"][2]["why_not_jump"];
}

TEST_P(JumpTraceTest, ViaJumpRefusesASiteItCannotPatchAndLeavesTheProcessAlone) {
  Target target(GetParam(), 1);
  std::string pid = std::to_string(target.pid);
  Result r = run_probecost({"trace", "-p", pid, "-b", "probecost_calls_first", "--via", "jump"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot patch a jump at probecost_calls_first"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in process " + pid), std::string::npos) << r.err;
  r = run_probecost({"trace", "-p", pid, "-b", "probecost_test_site", "--via", "jump", "--stacks",
                     "--stack-size", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--stacks with --stack-size 0 needs int3"), std::string::npos) << r.err;
  EXPECT_EQ(target.ask("go 3"), "calls=3");
}

TEST_P(JumpTraceTest, KilledProbecostLeavesJumpsThatWorkAndRestorePutsTheBytesBack) {
  Target target(GetParam(), 2);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--via", "jump"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 1000"), "calls=2000");
  EXPECT_EQ(trace.finish(SIGKILL), -1);
  // Nobody traces it now; the jumps stay, and the trampolines keep counting.
  ASSERT_EQ(target.ask("go 1000"), "calls=4000");
  Result r = restore(target.pid);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["jumps"].size(), 1u) << r.out;
  EXPECT_EQ(j["jumps"][0]["state"], "patched");
  EXPECT_TRUE(j["jumps"][0]["restored"].get<bool>());
  EXPECT_EQ(j["jumps"][0]["hits"], 4000);
  EXPECT_TRUE(j["bytes"].empty()) << r.out;
  expect_text_matches_file(target.pid,
                           std::stoull(j["jumps"][0]["address"].get<std::string>(), nullptr, 16));
  EXPECT_GT(j["unmapped_bytes"].get<std::uint64_t>(), 0u) << r.out;  // the area went too
  EXPECT_EQ(target.ask("go 5"), "calls=4010");
  // Nothing left the second time: no area, no jump.
  j = Json::parse(restore(target.pid).out);
  EXPECT_TRUE(j["jumps"].empty()) << j.dump();
  EXPECT_EQ(j["unmapped_bytes"], 0u);
}

TEST_P(JumpTraceTest, KilledProbecostsInt3BytesGoBackThroughTheGuardianOrRestore) {
  Target target(GetParam(), 1);
  std::string pid = std::to_string(target.pid);
  {
    // The process is idle (waiting on stdin): no thread is at a hit when probecost dies, and
    // the guardian puts the byte back.
    Trace trace({"-p", pid, "-b", "probecost_test_site", "--via", "int3"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    ASSERT_EQ(target.ask("go 10"), "calls=10");
    EXPECT_EQ(trace.finish(SIGKILL), -1);
    Json j;
    ASSERT_TRUE(eventually([&] {
      j = Json::parse(restore(target.pid, {"--dry-run"}).out);
      return j["bytes"].empty();
    })) << j.dump();
    ASSERT_EQ(target.ask("go 10"), "calls=20");
  }
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, JumpTraceTest, ::testing::Values(SERVE_PIE, SERVE_NOPIE),
                         [](const auto& info) { return info.index == 0 ? "Pie" : "NonPie"; });
