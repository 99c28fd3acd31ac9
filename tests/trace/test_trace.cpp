// `probecost trace` as a user runs it, against serve_target (driven on stdin) and real
// processes: exact counts, libraries, signals, group-stop, exit, exec, fork, detach leaving
// the text as in the ELF file, and every kind of bad input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "run_capture.hpp"
#include "trace_harness.hpp"

using namespace probecost::test;

namespace {

class TraceTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(TraceTest, AttachCountsExactlyWhatTheProcessCountedThenDetachesClean) {
  Target target(GetParam(), 4);
  ASSERT_EQ(target.ready_line, "ready " + std::to_string(target.pid));
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--via", "int3"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // The four threads are created while traced, and each calls the site 2500 times.
  ASSERT_EQ(target.ask("go 2500"), "calls=10000");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["pid"], target.pid);
  ASSERT_EQ(r["probes"].size(), 1u);
  EXPECT_EQ(r["probes"][0]["hits"], 10000);
  EXPECT_EQ(r["probes"][0]["threads"], 4);
  EXPECT_EQ(r["probes"][0]["symbol"], "probecost_test_site");
  std::uint64_t per_thread = 0;
  for (const auto& t : r["threads"]) per_thread += t["hits"].get<std::uint64_t>();
  EXPECT_EQ(per_thread, 10000u);
  EXPECT_NE(r["ending"].get<std::string>().find("interrupted"), std::string::npos);
  // Detached: the text is the ELF file's again, and the process runs on, untraced.
  expect_text_matches_file(target.pid, address_of(r["probes"][0]));
  EXPECT_EQ(target.ask("go 10"), "calls=10040");
  EXPECT_EQ(target.ask("exit"), "bye");
  int status = target.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(TraceTest, ProbesASharedLibraryByModuleAndSymbol) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "libserve_lib.so:probecost_lib_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("lib 700"), "lib=700");
  ASSERT_EQ(trace.finish(SIGTERM), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 700);
  std::string module = r["probes"][0]["module"];
  EXPECT_NE(module.find("libserve_lib.so"), std::string::npos) << module;
  expect_text_matches_file(target.pid, address_of(r["probes"][0]));
  EXPECT_EQ(target.ask("lib 1"), "lib=701");
}

TEST_P(TraceTest, SignalsReachTheTraceeAndGroupStopWorks) {
  Target target(GetParam(), 2);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("signals 40"), "signals=40");
  // SIGSTOP from a shell stops the process as it would untraced; SIGCONT lets it go on.
  ASSERT_EQ(::kill(target.pid, SIGSTOP), 0);
  EXPECT_TRUE(
      eventually([&] { return proc_state(target.pid) == 'T' || proc_state(target.pid) == 't'; }));
  ASSERT_EQ(::kill(target.pid, SIGCONT), 0);
  EXPECT_EQ(target.ask("go 100"), "calls=200");
  ASSERT_EQ(trace.finish(SIGHUP), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 200);
  EXPECT_EQ(target.ask("signals 2"), "signals=42");
}

TEST_P(TraceTest, ATraceeThatExitsEndsTheTraceWithItsCounts) {
  Target target(GetParam(), 3);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 300"), "calls=900");
  ASSERT_EQ(target.ask("exit"), "bye");
  target.wait_exit();  // probecost reports the exit; the real parent reaps
  ASSERT_EQ(trace.finish(0), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 900);
  EXPECT_NE(r["ending"].get<std::string>().find("exited"), std::string::npos) << r["ending"];
}

TEST_P(TraceTest, WithoutFollowExecATraceeThatExecsEndsTheTraceWithItsCounts) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site", "--no-follow-exec"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 50"), "calls=50");
  ASSERT_EQ(target.ask("exec"), "exec");
  ASSERT_EQ(trace.finish(0), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 50);
  EXPECT_NE(r["ending"].get<std::string>().find("exec"), std::string::npos) << r["ending"];
  int status = target.wait_exit();  // /bin/true ran, untraced
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(TraceTest, AfterAnExecTheNewImageIsProbedWhereItHasTheSymbol) {
  Target target(GetParam(), 1);
  Trace trace(
      {"-p", std::to_string(target.pid), "-b", "probecost_test_site", "-b", "libc.so.6:exit"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 50"), "calls=50");
  ASSERT_EQ(target.ask("exec"), "exec");
  ASSERT_EQ(trace.finish(0), 0) << trace.stderr_text;
  // /bin/true has no probecost_test_site, and says so; its libc's exit is probed and hit.
  EXPECT_NE(trace.stderr_text.find("not probed in the new image"), std::string::npos)
      << trace.stderr_text;
  EXPECT_NE(trace.stderr_text.find("exec'd /usr/bin/true"), std::string::npos) << trace.stderr_text;
  Json r = trace.report();
  ASSERT_EQ(r["images"].size(), 2u) << r.dump();
  EXPECT_EQ(r["images"][1], "/usr/bin/true");
  std::map<std::string, std::uint64_t> hits;
  for (const auto& p : r["probes"])
    hits[p["image"].get<std::string>() + " " + p["spec"].get<std::string>()] = p["hits"];
  EXPECT_EQ(hits[GetParam() + " probecost_test_site"], 50u) << r.dump();
  EXPECT_EQ(hits["/usr/bin/true libc.so.6:exit"], 1u) << r.dump();
  int status = target.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(TraceTest, AForkedChildDoesNotInheritLiveBreakpoints) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // Without the int3 bytes removed, the child would die of SIGTRAP at its first call.
  EXPECT_EQ(target.ask("fork 100"), "child=exited 0");
  EXPECT_EQ(target.ask("go 10"), "calls=10");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 10);
}

TEST_P(TraceTest, AVforkChildSharingTheTextRunsThroughIt) {
  // posix_spawn clones with CLONE_VM|CLONE_VFORK: the child runs in the parent's memory, int3
  // bytes included, until its exec; it is traced until then.
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("spawn"), "spawned=exited 0");
  EXPECT_EQ(target.ask("go 5"), "calls=5");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 5);
  EXPECT_EQ(target.ask("spawn"), "spawned=exited 0");
}

TEST_P(TraceTest, ASymbolInTwoLibrariesIsAmbiguousUnlessAllMatches) {
  Target target(GetParam(), 1);
  std::string pid = std::to_string(target.pid);
  auto r = probecost::test::run_command(
      {PROBECOST_BIN, "trace", "-q", "-p", pid, "-b", "probecost_lib_site"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is ambiguous"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libserve_lib.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libserve_lib2.so"), std::string::npos) << r.err;
  Trace trace({"-p", pid, "-b", "probecost_lib_site", "--all-matches"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("lib 30"), "lib=30");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json report = trace.report();
  ASSERT_EQ(report["probes"].size(), 2u);
  std::uint64_t in_first = 0, in_second = 0;
  for (const auto& p : report["probes"]) {
    std::string module = p["module"];
    (module.find("libserve_lib2.so") != std::string::npos ? in_second : in_first) +=
        p["hits"].get<std::uint64_t>();
  }
  EXPECT_EQ(in_first, 30u);  // the program's calls bind to libserve_lib.so's definition
  EXPECT_EQ(in_second, 0u);
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, TraceTest,
                         ::testing::Values(std::string(SERVE_PIE), std::string(SERVE_NOPIE)),
                         [](const auto& info) {
                           return info.param.find("nopie") != std::string::npos ? "NonPie" : "Pie";
                         });

TEST(TraceCommand, LaunchedCommandCountsAndKeepsItsOutput) {
  using probecost::test::run_command;
  auto untraced = run_command({LOOP_TARGET_PIE, "500", "2"});
  char path[] = "/tmp/probecost-trace-XXXXXX";
  ::close(::mkstemp(path));
  auto traced = run_command({PROBECOST_BIN, "trace", "-q", "-b", "probecost_test_site", "-f",
                             "json", "-o", path, "--", LOOP_TARGET_PIE, "500", "2"});
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, untraced.out);
  std::ifstream in(path);
  Json r = Json::parse(in);
  ::unlink(path);
  EXPECT_EQ(r["probes"][0]["hits"], 1000);
  EXPECT_EQ(r["command_end"], "exited with status 0");
}

TEST(TraceCommand, KillOnExitEndsALaunchedCommand) {
  char path[] = "/tmp/probecost-trace-XXXXXX";
  ::close(::mkstemp(path));
  auto r = probecost::test::run_command({PROBECOST_BIN, "trace", "-q", "--kill-on-exit",
                                         "--duration", "0.3", "-b", "libc.so.6:clock_nanosleep",
                                         "-f", "json", "-o", path, "--", "/bin/sleep", "60"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(path);
  Json j = Json::parse(in);
  ::unlink(path);
  EXPECT_EQ(j["ending"], "--duration reached");
  EXPECT_EQ(j["command_end"], "killed by probecost (--kill-on-exit)");
  EXPECT_EQ(j["probes"][0]["hits"], 1);  // sleep's one clock_nanosleep
}

TEST(TraceCommand, ListsSymbolsByGlob) {
  auto r = probecost::test::run_command(
      {PROBECOST_BIN, "trace", "--list", "probecost_*", "--", SERVE_PIE, "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("probecost_test_site"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probecost_lib_site libserve_lib.so"), std::string::npos) << r.out;
}

TEST(TraceCommand, StacksNameTheCallers) {
  Target target(SERVE_PIE, 1);
  Trace trace(
      {"-p", std::to_string(target.pid), "-b", "libserve_lib.so:probecost_lib_site", "--stacks"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("lib 20"), "lib=20");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  const auto& stacks = r["stacks"]["libserve_lib.so:probecost_lib_site"];
  ASSERT_EQ(stacks.size(), 1u) << r.dump();
  EXPECT_EQ(stacks[0]["count"], 20);
  std::string frames = stacks[0]["frames"].dump();
  EXPECT_NE(frames.find("probecost_lib_site in libserve_lib.so"), std::string::npos) << frames;
  EXPECT_NE(frames.find("main"), std::string::npos) << frames;
}
