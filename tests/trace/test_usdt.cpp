// Issue 27: USDT markers (<sys/sdt.h>) found in the notes of the program and of a library it
// dlopens, listed, counted exactly as int3 and as jump probes, their semaphores raised while
// traced and back to what they were on every way out (detach, SIGINT, SIGKILL of probecost),
// another tracer's count kept; bad specs refused with the providers named, the target untouched.
// Counts and semaphore values are the target's own (tests/targets/usdt_target.cpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "tests/support/run_capture.hpp"
#include "tests/trace/trace_harness.hpp"

namespace probecost::test {
namespace {

const std::string kTick = "usdt:probecost_test:tick";
const std::string kPlain = "usdt:probecost_test:plain";

// Every row of `spec` (a marker at several sites has one row per site), their hits summed.
std::uint64_t hits_of(const Json& report, const std::string& spec, std::size_t* rows = nullptr) {
  std::uint64_t hits = 0;
  std::size_t n = 0;
  for (const auto& p : report["probes"]) {
    if (p["spec"] != spec) continue;
    hits += p["hits"].get<std::uint64_t>();
    ++n;
  }
  if (rows) *rows = n;
  return hits;
}

class Usdt : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  std::string target_path() const { return std::get<0>(GetParam()); }
  std::string via() const { return std::get<1>(GetParam()); }
};

TEST_P(Usdt, CountsEveryMarkerExactlyWithItsSemaphoreRaisedOnlyWhileTraced) {
  Target target({target_path()});
  EXPECT_EQ(target.ask("fire 10"), "fired=10 enabled=0");
  Trace trace({"-p", std::to_string(target.pid), "-b", kTick, "-b", kPlain, "--via", via()});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("sema"), "sema=1");
  EXPECT_EQ(target.ask("fire 1000"), "fired=1010 enabled=1000");
  EXPECT_EQ(target.ask("plain 300"), "plain=300");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  std::size_t rows = 0;
  EXPECT_EQ(hits_of(r, kTick, &rows), 1000u) << r.dump(2);
  EXPECT_EQ(rows, 2u) << "the tick marker has two sites" << r.dump(2);
  EXPECT_EQ(hits_of(r, kPlain), 300u) << r.dump(2);
  for (const auto& p : r["probes"]) {
    EXPECT_EQ(p["via"], via()) << p.dump(2);
    expect_text_matches_file(target.pid, address_of(p));
  }
  EXPECT_EQ(target.ask("sema"), "sema=0");
  EXPECT_EQ(target.ask("fire 10"), "fired=1020 enabled=1000");
}

INSTANTIATE_TEST_SUITE_P(PieAndNot, Usdt,
                         ::testing::Combine(::testing::Values(USDT_TARGET_PIE, USDT_TARGET_NOPIE),
                                            ::testing::Values("int3", "jump")),
                         [](const auto& info) {
                           std::string name =
                               std::get<0>(info.param) == std::string(USDT_TARGET_PIE) ? "Pie"
                                                                                       : "NoPie";
                           return name + "_" + std::get<1>(info.param);
                         });

TEST(UsdtList, ListsTheMarkersWithSemaphoresAndArguments) {
  Result r = run_command({PROBECOST_BIN, "trace", "-l", "usdt:*", "--", USDT_TARGET_PIE});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string me = std::string("usdt:") + USDT_TARGET_PIE;
  EXPECT_NE(r.out.find(me + ":probecost_test:tick 0x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(me + ":probecost_test:plain 0x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" args -8@%rdi "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probecost_test:plain 0x"), std::string::npos) << r.out;
  // plain has no semaphore, tick has one
  auto plain = r.out.find("probecost_test:plain");
  EXPECT_NE(r.out.find("semaphore - args -", plain), std::string::npos) << r.out;
  Result one = run_command({PROBECOST_BIN, "trace", "-l", "usdt:*:plain", "--", USDT_TARGET_PIE});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 1) << one.out;
}

TEST(UsdtErrors, AnUnknownMarkerNamesTheProvidersAndLeavesTheTargetAlone) {
  Target target({USDT_TARGET_PIE});
  Result r = run_command(
      {PROBECOST_BIN, "trace", "-p", std::to_string(target.pid), "-b", "usdt:probecost_test:nope"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("process " + std::to_string(target.pid)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("probecost_test (call__entry, call__return, plain, step, tick)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(target.ask("sema"), "sema=0");
  EXPECT_EQ(target.ask("fire 3"), "fired=3 enabled=0");
}

TEST(UsdtErrors, AMarkerWrittenWithoutUsdtIsAnErrorNotAWaitForALibrary) {
  Target target({USDT_TARGET_PIE});
  Result r = run_command(
      {PROBECOST_BIN, "trace", "-p", std::to_string(target.pid), "-b", "probecost_test:tick"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("write usdt:probecost_test:tick"), std::string::npos) << r.err;
  EXPECT_EQ(target.ask("sema"), "sema=0");
  Result rec = run_command({PROBECOST_BIN, "record", "-p", std::to_string(target.pid), "-b",
                            "probecost_test:tick", "-o", "/tmp/probecost-usdt-never.json"});
  EXPECT_EQ(rec.exit_code, 2) << rec.err;
  EXPECT_NE(rec.err.find("write usdt:probecost_test:tick"), std::string::npos) << rec.err;
  EXPECT_EQ(target.ask("fire 2"), "fired=2 enabled=0");
}

TEST(UsdtErrors, MalformedSpecsAreRefusedBeforeAnything) {
  for (const char* command : {"trace", "record"}) {
    for (const char* bad : {"usdt:", "usdt:onlyone", "usdt:a::b", "usdt:a:b:c:d"}) {
      Result r = run_command(
          {PROBECOST_BIN, command, "-b", bad, "-o", "/dev/null", "--", USDT_TARGET_PIE});
      EXPECT_EQ(r.exit_code, 2) << command << " " << bad << ": " << r.err;
      EXPECT_NE(r.err.find("usdt:PROVIDER:NAME"), std::string::npos) << r.err;
    }
  }
}

// Another tracer (bpftrace's uprobe, here the program itself) holds one count: ours comes and
// goes on top of it, on a detach by SIGINT and on a SIGKILL of probecost (the guardian).
TEST(UsdtSemaphore, AnotherTracersCountIsKeptOnSigint) {
  Target target({USDT_TARGET_PIE});
  EXPECT_EQ(target.ask("raise"), "sema=1");
  Trace trace({"-p", std::to_string(target.pid), "-b", kTick});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("sema"), "sema=2");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(target.ask("sema"), "sema=1");
  EXPECT_EQ(target.ask("lower"), "sema=0");
}

TEST(UsdtSemaphore, TheGuardianLowersItWhenProbecostIsKilled) {
  for (const char* via : {"int3", "jump"}) {
    Target target({USDT_TARGET_PIE});
    EXPECT_EQ(target.ask("raise"), "sema=1");
    Trace trace({"-p", std::to_string(target.pid), "-b", kTick, "--via", via});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(target.ask("sema"), "sema=2");
    EXPECT_EQ(trace.finish(SIGKILL), -1);
    // The guardian works after the death, asynchronously: polled, bounded.
    EXPECT_TRUE(eventually([&] { return target.ask("sema") == "sema=1"; })) << via;
    EXPECT_EQ(target.ask("fire 5"), "fired=5 enabled=5") << via;
    Result restore = run_command({PROBECOST_BIN, "restore", "-p", std::to_string(target.pid)});
    EXPECT_EQ(restore.exit_code, 0) << restore.err;
    EXPECT_EQ(target.ask("sema"), "sema=1") << via;
    EXPECT_EQ(target.ask("lower"), "sema=0");
  }
}

// The guardian watching `target` (tracer/int3/guardian.hpp): the process named probecost-guard
// that holds the target's /proc/PID/mem open. 0 if none.
pid_t guardian_of(pid_t target) {
  const std::string mem = "/proc/" + std::to_string(target) + "/mem";
  for (const auto& proc : std::filesystem::directory_iterator("/proc")) {
    std::string name = proc.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(proc.path() / "comm");
    std::string c;
    if (!std::getline(comm, c) || c != "probecost-guard") continue;
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", ec)) {
      if (std::filesystem::read_symlink(fd.path(), ec) == mem) return std::stoi(name);
    }
  }
  return 0;
}

// Issue 23: probecost and its guardian both SIGKILLed, so nobody lowered the semaphore; restore
// finds the raise in the table probecost kept in the process and lowers it, by the one probecost
// added: back to 0, or to another tracer's count (the program's own "raise" before the trace).
// Before the table, restore did not know of semaphores: it stayed 1 (2 with the other count).
TEST(UsdtSemaphore, RestoreLowersWhatAKilledProbecostAndGuardianRaised) {
  // int3 alone, and jump over another tracer's count (each trace takes a few seconds on a
  // loaded machine: two of the four combinations).
  for (auto [via, others] : {std::pair<const char*, int>{"int3", 0}, {"jump", 1}}) {
    {
      SCOPED_TRACE(std::string(via) + (others ? ", another tracer's count" : ""));
      Target target({USDT_TARGET_PIE});
      if (others) {
        EXPECT_EQ(target.ask("raise"), "sema=1");
      }
      Trace trace({"-p", std::to_string(target.pid), "-b", kTick, "--via", via});
      ASSERT_TRUE(trace.ready) << trace.stderr_text;
      EXPECT_EQ(target.ask("sema"), "sema=" + std::to_string(others + 1));
      // The guardian names itself once it runs (a grandchild, not waited for: guardian.cpp).
      pid_t guardian = 0;
      EXPECT_TRUE(eventually([&] { return (guardian = guardian_of(target.pid)) > 0; }));
      ASSERT_GT(guardian, 0);
      ASSERT_EQ(::kill(guardian, SIGKILL), 0);
      EXPECT_EQ(trace.finish(SIGKILL), -1);
      // The guardian is not our child: gone once its /proc entry is.
      EXPECT_TRUE(eventually([&] { return ::kill(guardian, 0) != 0; }));
      EXPECT_EQ(target.ask("sema"), "sema=" + std::to_string(others + 1));
      Result restore = run_command({PROBECOST_BIN, "restore", "-p", std::to_string(target.pid)});
      EXPECT_EQ(restore.exit_code, 0) << restore.err;
      EXPECT_NE(restore.out.find("USDT semaphore at"), std::string::npos) << restore.out;
      EXPECT_EQ(target.ask("sema"), "sema=" + std::to_string(others)) << restore.out;
      EXPECT_EQ(target.ask("fire 5"), "fired=5 enabled=" + std::to_string(others ? 5 : 0));
      // A second restore finds nothing more to lower: the table went with the first.
      Result again = run_command({PROBECOST_BIN, "restore", "-p", std::to_string(target.pid)});
      EXPECT_EQ(again.exit_code, 0) << again.err;
      EXPECT_EQ(again.out.find("USDT semaphore at"), std::string::npos) << again.out;
      EXPECT_EQ(target.ask("sema"), "sema=" + std::to_string(others));
    }
  }
}

// A fork child of a traced program, let go (no -F): its copy of the semaphore holds our raise,
// lowered there, and its copy of the table is unmapped, as at a detach.
TEST(UsdtSemaphore, AForkChildLetGoGetsNeitherOurRaiseNorOurTable) {
  for (const char* via : {"int3", "jump"}) {
    SCOPED_TRACE(via);
    Target target({USDT_TARGET_PIE});
    EXPECT_EQ(target.ask("fork"), "child sema=0 ro_anon=0");
    Trace trace({"-p", std::to_string(target.pid), "-b", kTick, "--via", via});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(target.ask("sema"), "sema=1");
    EXPECT_EQ(target.ask("fork"), "child sema=0 ro_anon=0");
    ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
    EXPECT_EQ(target.ask("sema"), "sema=0");
  }
}

// --usdt-args: each hit's arguments read at the int3 (a register, a negative 32-bit value, a
// constant, a string), counted by distinct list.
TEST(UsdtArgs, EachHitsArgumentsAreReadSizedSignedAndQuoted) {
  Target target({USDT_TARGET_PIE});
  Trace trace({"-p", std::to_string(target.pid), "-b", kTick, "--usdt-args"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("fire 3"), "fired=3 enabled=3");
  EXPECT_EQ(target.ask("fire 2"), "fired=5 enabled=5");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  Json r = trace.report();
  std::map<std::string, std::uint64_t> seen;
  for (const auto& p : r["probes"]) {
    EXPECT_EQ(p["via"], "int3") << p.dump(2);
    for (const auto& a : p["usdt_args"]) seen[a["args"]] += a["hits"].get<std::uint64_t>();
  }
  std::map<std::string, std::uint64_t> want = {
      {"0, 0, 42, \"tick\"", 2}, {"1, -1, 42, \"tick\"", 2}, {"2, -2, 42, \"tick\"", 1}};
  EXPECT_EQ(seen, want) << r.dump(2);
  Result jump = run_command(
      {PROBECOST_BIN, "trace", "-b", kTick, "--usdt-args", "--via", "jump", "--", USDT_TARGET_PIE});
  EXPECT_EQ(jump.exit_code, 2) << jump.err;
}

// A library's marker waits for its dlopen, goes in with its semaphore, and counts exactly.
TEST(UsdtDlopen, ALibrarysMarkerGoesInAtTheDlopen) {
  Target target({USDT_TARGET_PIE});
  const std::string spec = std::string("usdt:") + USDT_LIB + ":probecost_lib:lib_tick";
  Trace trace({"-p", std::to_string(target.pid), "-b", spec});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_NE(trace.stderr_text.find(spec + " waits"), std::string::npos) << trace.stderr_text;
  EXPECT_EQ(target.ask(std::string("open ") + USDT_LIB), "opened");
  EXPECT_EQ(target.ask("libfire 500"), "libfired=500 enabled=500");
  ASSERT_EQ(trace.finish(), 0) << trace.stderr_text;
  EXPECT_EQ(hits_of(trace.report(), spec), 500u) << trace.report().dump(2);
  EXPECT_EQ(target.ask("libfire 7"), "libfired=7 enabled=0");
}

}  // namespace
}  // namespace probecost::test
