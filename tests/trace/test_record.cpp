// `probecost record` end to end on calls_target: every call's entry and return with exact
// counts, arguments and return values; the program's output unchanged through exceptions,
// longjmp, recursion, threads and signal handlers; the Chrome JSON and the CTF read back; the
// ways out leave the process intact; bad input exits 2 with nothing touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// A launched run: `probecost record ARGS -o DIR/t.json --summary-json DIR/s.json -- calls_target
// MODE N`, with the untraced run's output to compare.
struct Recorded {
  TempDir dir;
  Result run, plain;
  Json trace, summary;

  Recorded(const std::vector<std::string>& probes, const std::string& mode, long n,
           std::vector<std::string> extra = {}) {
    std::vector<std::string> target = {CALLS_TARGET, mode, std::to_string(n)};
    plain = run_command(target);
    std::vector<std::string> argv = {PROBECOST_BIN,  "record",         "-o",
                                     dir / "t.json", "--summary-json", dir / "s.json"};
    for (const auto& p : probes) argv.insert(argv.end(), {"-b", p});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), target.begin(), target.end());
    run = run_command(argv);
    trace = read_json(dir / "t.json");
    summary = read_json(dir / "s.json");
  }
  const Json& probe(const std::string& function) const {
    for (const auto& p : summary["probes"]) {
      if (p["function"] == function) return p;
    }
    static const Json none;
    ADD_FAILURE() << "no probe " << function << " in " << summary.dump();
    return none;
  }
  // The trace's events of `name` with phase `ph`, in time order.
  std::vector<Json> events(const std::string& name, const std::string& ph = "X") const {
    std::vector<Json> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == ph && e.value("name", "") == name) out.push_back(e);
    }
    std::stable_sort(out.begin(), out.end(), [](const Json& a, const Json& b) {
      return a["ts"].get<double>() < b["ts"].get<double>();
    });
    return out;
  }
};

void expect_calls(const Json& p, std::uint64_t calls, std::uint64_t returns,
                  std::uint64_t unmatched = 0) {
  EXPECT_EQ(p["calls"], calls) << p.dump();
  EXPECT_EQ(p["returns"], returns) << p.dump();
  EXPECT_EQ(p["unmatched"], unmatched) << p.dump();
  EXPECT_EQ(p["events_lost"], 0u) << p.dump();
}

TEST(Record, CountsArgumentsAndReturnsExact) {
  const long n = 2000;
  Recorded r({"add3", "leaf"}, "calls", n, {"--args", "3"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("add3"), n, n);
  expect_calls(r.probe("leaf"), n, n);
  auto add3 = r.events("add3"), leaf = r.events("leaf");
  ASSERT_EQ(add3.size(), static_cast<std::size_t>(n));
  ASSERT_EQ(leaf.size(), static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    const Json& a = add3[static_cast<std::size_t>(i)]["args"];
    ASSERT_EQ(a["arg0"], i);
    ASSERT_EQ(a["arg1"], 2 * i);
    ASSERT_EQ(a["arg2"], 3 * i);
    ASSERT_EQ(a["ret"], 6 * i);
    ASSERT_EQ(leaf[static_cast<std::size_t>(i)]["args"]["arg0"], i);
    ASSERT_EQ(leaf[static_cast<std::size_t>(i)]["args"]["ret"], 2 * i + 1);
  }
  EXPECT_NE(r.run.err.find("@latency_ns[add3]"), std::string::npos) << r.run.err;
}

TEST(Record, RecursionPairsEachFrame) {
  Recorded r({"depth"}, "recurse", 200);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("depth"), 201, 201);
  std::set<long> rets;
  for (const auto& e : r.events("depth")) rets.insert(e["args"]["ret"].get<long>());
  EXPECT_EQ(rets.size(), 201u);  // depth(k) returns k: each frame closed by its own return
  EXPECT_EQ(*rets.rbegin(), 200);
}

TEST(Record, TailCallIsAnExit) {
  Recorded r({"tail_caller", "leaf"}, "tail", 500);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("tail_caller"), 500, 500);
  expect_calls(r.probe("leaf"), 500, 500);
}

TEST(Record, ConditionalTailCallAtAnInt3CountsOnlyWhenTaken) {
  // Every exit of cond_tail is an int3: the js to leaf is an exit only when it jumps.
  Recorded r({"cond_tail", "leaf"}, "cond_tail", 400, {"--args", "1"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("cond_tail"), 400, 400);
  expect_calls(r.probe("leaf"), 200, 200);
  EXPECT_EQ(r.probe("cond_tail")["orphan_returns"], 0) << r.probe("cond_tail").dump();
  // The ret's calls end with their own return value (a tail call's is leaf's to come).
  for (const auto& e : r.events("cond_tail")) {
    long x = e["args"]["arg0"];
    if (x >= 0) {
      ASSERT_EQ(e["args"]["ret"], x + 1) << e.dump();
    }
  }
}

TEST(Record, JumpToAnUnnamedColdPartIsNoExit) {
  // cold_caller's js to its cold part (no symbol, as in a stripped binary) keeps its frame: its
  // CFI says the return address is not at the top of the stack there.
  Recorded r({"cold_caller"}, "cold", 400, {"--args", "1"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("cold_caller"), 400, 400);
  EXPECT_EQ(r.probe("cold_caller")["orphan_returns"], 0) << r.probe("cold_caller").dump();
  for (const auto& e : r.events("cold_caller")) {
    long x = e["args"]["arg0"];
    ASSERT_EQ(e["args"]["ret"], x < 0 ? 1 - x : x + 1) << e.dump();
  }
}

TEST(Record, JumpsThroughARegisterOrMemoryAreExitsOnlyWhenTheyLeave) {
  // reg_tail and table_tail tail-call leaf through a register and a table, slot_tail through a
  // fixed slot (patched); table_tail's same jmp also goes to its own ret, and switch4's jump
  // table stays inside: an int3 at each such jmp looks where it goes.
  const long n = 400;
  Recorded r({"reg_tail", "slot_tail", "table_tail", "switch4", "leaf"}, "indirect", n,
             {"--args", "1"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  for (const char* f : {"reg_tail", "slot_tail", "table_tail", "switch4"}) {
    expect_calls(r.probe(f), n, n);
    EXPECT_EQ(r.probe(f)["orphan_returns"], 0) << r.probe(f).dump();
  }
  expect_calls(r.probe("leaf"), 2 * n + n / 2, 2 * n + n / 2);
  // A call that went through the jmp to a ret of its own ends with that ret's value.
  for (const auto& e : r.events("switch4")) {
    long x = e["args"]["arg0"];
    ASSERT_EQ(e["args"]["ret"], x + 10 * (x % 4 + 1)) << e.dump();
  }
  for (const auto& e : r.events("table_tail")) {
    long x = e["args"]["arg0"];
    if (x % 2 == 0) {
      ASSERT_EQ(e["args"]["ret"], x + 1) << e.dump();
    }
  }
  EXPECT_EQ(r.run.err.find("cannot be computed"), std::string::npos) << r.run.err;
}

TEST(Record, BufferSizeSetsEachCpusRingAndEveryRecordIsWrittenOrCountedLost) {
  // 200,000 calls in a tight loop: 400,000 records (12.8 MB), faster than the drain copies a
  // small ring. A 16 MiB ring per CPU holds them all; with a 64 KiB one (2,048 records) the
  // writers wait for the drain by default and lose nothing; with --drop they drop what finds
  // no room, each counted.
  const long n = 200000;
  Recorded big({"add3"}, "bench", n, {"--buffer-size", "16M"});
  ASSERT_EQ(big.run.exit_code, 0) << big.run.err;
  expect_calls(big.probe("add3"), n, n);
  EXPECT_EQ(big.probe("add3")["events_written"], 2 * n);
  Recorded small({"add3"}, "bench", n, {"--buffer-size", "64k"});
  ASSERT_EQ(small.run.exit_code, 0) << small.run.err;
  expect_calls(small.probe("add3"), n, n);
  EXPECT_EQ(small.probe("add3")["events_written"], 2 * n);
  EXPECT_EQ(small.probe("add3")["events_lost"], 0);
  Recorded dropping({"add3"}, "bench", n, {"--buffer-size", "64k", "--drop"});
  ASSERT_EQ(dropping.run.exit_code, 0) << dropping.run.err;
  const Json& p = dropping.probe("add3");
  EXPECT_EQ(p["events_written"].get<long>() + p["events_lost"].get<long>(), 2 * n) << p.dump();
  // Calls lost (entries dropped) and returns lost (exits dropped), each in calls.
  EXPECT_EQ(p["calls"].get<long>() + p["calls_lost"].get<long>(), n) << p.dump();
  EXPECT_EQ(
      p["returns"].get<long>() + p["orphan_returns"].get<long>() + p["returns_lost"].get<long>(), n)
      << p.dump();
}

TEST(Record, CallsInTheProgramsConstructorsAreRecorded) {
  // The probes go in at the entry point: the program's own ELF constructors run after it
  // (__libc_start_main runs them), so leaf's calls before main count with main's.
  const long n = 300;
  Recorded r({"leaf"}, "ctor", n, {"--args", "1"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("leaf"), 2 * n, 2 * n);
}

TEST(Record, ExceptionsUnwindThroughProbedFunctions) {
  Recorded r({"middle", "thrower"}, "throw", 300);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);  // every throw still caught in main
  expect_calls(r.probe("middle(long)"), 300, 200, 100);
  expect_calls(r.probe("thrower(long)"), 300, 200, 100);
  EXPECT_EQ(r.events("middle(long)", "B").size(), 100u);  // never returned: no end
}

TEST(Record, LongjmpLeavesFramesUnmatched) {
  Recorded r({"jumper"}, "longjmp", 400);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("jumper"), 400, 200, 200);
  for (const auto& e : r.events("jumper")) ASSERT_EQ(e["args"]["ret"].get<long>() % 2, 0);
}

TEST(Record, ThreadsByTheirOwnTid) {
  // Within the per-CPU buffers (4 MiB, 32-byte records): a burst of more between two drains
  // (100 ms) is dropped and counted, never waited for.
  const long n = 5000;
  Recorded r({"add3"}, "threads", n);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("add3"), 4 * n, 4 * n);
  std::map<long, long> by_tid;
  long pid = 0;
  for (const auto& e : r.events("add3")) {
    pid = e["pid"];
    ++by_tid[e["tid"].get<long>()];
  }
  ASSERT_EQ(by_tid.size(), 4u);
  for (const auto& [tid, count] : by_tid) {
    EXPECT_NE(tid, 0);
    EXPECT_NE(tid, pid);  // the threads, not main
    EXPECT_EQ(count, n);
  }
}

TEST(Record, SignalHandlerCallsNest) {
  Recorded r({"in_signal", "leaf"}, "signal", 300);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_calls(r.probe("in_signal"), 300, 300);
  expect_calls(r.probe("leaf"), 300, 300);
  // Each handler's leaf runs inside its in_signal call.
  auto outer = r.events("in_signal"), inner = r.events("leaf");
  ASSERT_EQ(outer.size(), inner.size());
  for (std::size_t i = 0; i < outer.size(); ++i) {
    double t0 = outer[i]["ts"], t1 = t0 + outer[i]["dur"].get<double>();
    EXPECT_GE(inner[i]["ts"].get<double>(), t0);
    EXPECT_LE(inner[i]["ts"].get<double>() + inner[i]["dur"].get<double>(), t1);
  }
}

// What load cannot change: every call at least the spin, the percentiles in order, the counts
// exact. How close p50 comes to the spin is a figure (scripts/record-spin-latency.sh prints it):
// on a loaded machine a preempted spin is longer by the scheduler's time.
TEST(Record, LatencyOfAKnownSpin) {
  // spin(ticks) spins for `ticks` TSC ticks: about 200 us at any frequency above 1 GHz.
  const unsigned long ticks = 500000;
  TempDir dir;
  Result r =
      run_command({PROBECOST_BIN, "record", "-b", "spin", "-o", dir / "t.json", "--summary-json",
                   dir / "s.json", "--", CALLS_TARGET, "spin", "50", std::to_string(ticks)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json trace = read_json(dir / "t.json"), p = read_json(dir / "s.json")["probes"][0];
  double hz = trace["otherData"]["tsc_hz"];
  double expect_ns = static_cast<double>(ticks) * 1e9 / hz;
  expect_calls(p, 50, 50);
  // The spin itself, plus a loop iteration and the probes' own few ns; never less (0.5 %: the
  // TSC rate's calibration, and the histogram's resolution).
  const Json& lat = p["latency_ns"];
  EXPECT_GE(lat["min"].get<double>(), expect_ns * 0.995) << lat.dump();
  EXPECT_LE(lat["min"].get<double>(), lat["p50"].get<double>()) << lat.dump();
  EXPECT_LE(lat["p50"].get<double>(), lat["p90"].get<double>()) << lat.dump();
  EXPECT_LE(lat["p90"].get<double>(), lat["p99"].get<double>()) << lat.dump();
  EXPECT_LE(lat["p99"].get<double>(), lat["max"].get<double>()) << lat.dump();
}

TEST(Record, ChromeJsonIsTraceEventFormat) {
  Recorded r({"add3"}, "threads", 100, {"--args", "2"});
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  ASSERT_TRUE(r.trace.contains("traceEvents"));
  std::set<long> named;
  std::size_t complete = 0;
  for (const auto& e : r.trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") named.insert(e["tid"].get<long>());
      ASSERT_TRUE(e["args"].contains("name")) << e.dump();
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e["tid"].is_number()) << e.dump();
    ASSERT_GE(e["dur"].get<double>(), 0);
    ASSERT_TRUE(e["args"]["arg0"].is_number() && e["args"]["arg1"].is_number()) << e.dump();
    ASSERT_FALSE(e["args"].contains("arg2")) << e.dump();
    ASSERT_TRUE(e["args"]["ret"].is_number()) << e.dump();
    ASSERT_TRUE(named.count(e["tid"].get<long>())) << "thread named before its events";
    ++complete;
  }
  EXPECT_EQ(complete, 400u);
}

TEST(Record, ProcessNamedAsItWasRun) {
  // Run through a symlink (as redis-server is to redis-check-rdb): named by the link, as ps does.
  TempDir dir;
  fs::create_symlink(CALLS_TARGET, dir / "calls-link");
  Result r = run_command({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", dir / "t.json", "--",
                          dir / "calls-link", "calls", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  Json trace = read_json(dir / "t.json");
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"]);
  }
  EXPECT_EQ(names, std::set<std::string>{"calls-link"});
}

TEST(Record, Babeltrace2ReadsTheCtf) {
  if (std::system("babeltrace2 --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no babeltrace2";
  TempDir dir;
  Result r = run_command({PROBECOST_BIN, "record", "-b", "add3", "--args", "3", "--format", "ctf",
                          "-o", dir / "ctf", "--", CALLS_TARGET, "calls", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result bt = run_command({"/usr/bin/babeltrace2", dir / "ctf"});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  std::size_t entries = 0, returns = 0, pos = 0;
  while ((pos = bt.out.find("probecost:entry:", pos)) != std::string::npos) ++entries, ++pos;
  pos = 0;
  while ((pos = bt.out.find("probecost:return:", pos)) != std::string::npos) ++returns, ++pos;
  EXPECT_EQ(entries, 100u);
  EXPECT_EQ(returns, 100u);
  EXPECT_NE(bt.out.find("arg0 = 99, arg1 = 198, arg2 = 297"), std::string::npos);
  EXPECT_NE(bt.out.find("ret = 594"), std::string::npos);
}

}  // namespace
}  // namespace probecost::test
