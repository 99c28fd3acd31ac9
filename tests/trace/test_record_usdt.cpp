// Issue 27 part 5: `probecost record` of USDT markers. usdt_target's probecost_test:call__entry
// and call__return pair into calls (nested, named by their name argument), its
// probecost_test:step is an instant, and its unbalanced markers are counted and never made
// calls; launched and attached by PID, in Chrome JSON and CTF, read back by replay. python3's
// function__entry/function__return by PID when python3 has its markers.
#include <gtest/gtest.h>
#include <signal.h>
#include <string.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

const std::string kPair = "usdt:probecost_test:call__*";
const std::string kStep = "usdt:probecost_test:step";

const Json& marker(const Json& summary, const std::string& name) {
  for (const auto& m : summary["markers"])
    if (m["marker"] == name) return m;
  static const Json none;
  ADD_FAILURE() << "no marker " << name << " in " << summary.dump(1);
  return none;
}

Json load(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// The trace's events of usdt_target's markers, by kind: "X top", "B open", "i step", ...
std::map<std::string, int> tally(const Json& trace) {
  std::map<std::string, int> n;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "usdt") continue;
    std::string name = e["name"];
    if (name.rfind("probecost_test:", 0) == 0) name = name.substr(15);
    ++n[e["ph"].get<std::string>() + " " + name];
  }
  return n;
}

// `nest CALLS 3` then `unbalanced`, recorded: every count exact.
void expect_nest_counts(const Json& summary, const Json& trace, int calls) {
  const Json& entry = marker(summary, "probecost_test:call__entry");
  EXPECT_EQ(entry["role"], "entry");
  EXPECT_EQ(entry["hits"], 3 * calls + 1);
  EXPECT_EQ(entry["calls"], 3 * calls);
  EXPECT_EQ(entry["unbalanced"], 1) << "the entry never returned";
  const Json& ret = marker(summary, "probecost_test:call__return");
  EXPECT_EQ(ret["hits"], 3 * calls + 2);
  EXPECT_EQ(ret["calls"], 3 * calls);
  EXPECT_EQ(ret["unbalanced"], 2) << "the two returns without an entry";
  EXPECT_EQ(marker(summary, "probecost_test:step")["hits"], 3 * calls);
  std::map<std::string, int> want = {{"X top", calls},      {"X even", calls},
                                     {"X odd", calls},      {"B open", 1},
                                     {"i call__return", 2}, {"i step", 3 * calls}};
  EXPECT_EQ(tally(trace), want) << trace.dump(1).substr(0, 4000);
  // Nested: each call's depth argument, and each "even" inside a "top" of its thread.
  std::vector<std::pair<double, double>> tops;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "top")
      tops.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    std::map<std::string, int> depth = {{"top", 3}, {"even", 2}, {"odd", 1}};
    EXPECT_EQ(e["args"]["arg1"], depth[e["name"]]) << e.dump();
    if (e["name"] != "even") continue;
    double ts = e["ts"];
    EXPECT_TRUE(std::any_of(tops.begin(), tops.end(), [&](auto& t) {
      return ts >= t.first && ts <= t.second;
    })) << e.dump();
  }
}

TEST(RecordUsdt, AttachedPairsNestedCallsAndCountsTheUnbalanced) {
  Target target({USDT_TARGET_PIE});
  TempDir dir{"probecost-record-usdt"};
  Running rec({PROBECOST_BIN, "record", "-p", std::to_string(target.pid), "-b", kPair, "-b", kStep,
               "-o", dir / "t.json", "--summary-json", dir / "s.json"});
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  EXPECT_EQ(target.ask("nest 40 3"), "nested=120");
  EXPECT_EQ(target.ask("unbalanced"), "unbalanced");
  ASSERT_EQ(rec.finish(SIGINT), 0) << rec.stderr_text;
  EXPECT_EQ(target.ask("nest 1 3"), "nested=3") << "the program runs on untraced";
  expect_nest_counts(load(dir / "s.json"), load(dir / "t.json"), 40);
  EXPECT_NE(rec.stderr_text.find("probecost_test:call__return"), std::string::npos)
      << rec.stderr_text;
}

// record raises the markers' semaphores as trace does, and lowers them on SIGINT and, through
// the guardian, on a SIGKILL of probecost; another tracer's count is kept.
TEST(RecordUsdt, SemaphoresBackOnEveryWayOut) {
  for (int sig : {SIGINT, SIGKILL}) {
    Target target({USDT_TARGET_PIE});
    EXPECT_EQ(target.ask("raise"), "sema=1");
    TempDir dir{"probecost-record-usdt"};
    Running rec({PROBECOST_BIN, "record", "-p", std::to_string(target.pid), "-b",
                 "usdt:probecost_test:tick", "-o", dir / "t.json"});
    ASSERT_TRUE(rec.ready) << rec.stderr_text;
    EXPECT_EQ(target.ask("sema"), "sema=2");
    EXPECT_EQ(target.ask("fire 10"), "fired=10 enabled=10");
    rec.finish(sig);
    EXPECT_TRUE(eventually([&] { return target.ask("sema") == "sema=1"; })) << strsignal(sig);
    EXPECT_EQ(target.ask("lower"), "sema=0");
    EXPECT_EQ(target.ask("fire 1"), "fired=11 enabled=10") << "the markers' bytes back";
  }
}

TEST(RecordUsdt, LaunchedInCtfReadBackByReplay) {
  TempDir dir{"probecost-record-usdt"};
  std::string ctf = dir / "ctf";
  Result r =
      run_command({PROBECOST_BIN, "record", "-q", "-b", kPair, "-b", kStep, "-o", ctf + "/",
                   "--summary-json", dir / "s.json", "--", USDT_TARGET_NOPIE, "nest", "25", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json s = load(dir / "s.json");
  EXPECT_EQ(marker(s, "probecost_test:call__entry")["calls"], 75);
  EXPECT_EQ(marker(s, "probecost_test:step")["hits"], 75);
  Result replay = run_command({PROBECOST_BIN, "replay", "--report", "-f", "json", ctf});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  Json report = Json::parse(replay.out);
  std::map<std::string, std::uint64_t> calls;
  for (const auto& f : report["functions"]) calls[f["function"]] = f["calls"];
  EXPECT_EQ(calls["top"], 25u) << report.dump(1);
  EXPECT_EQ(calls["even"], 25u) << report.dump(1);
  EXPECT_EQ(calls["odd"], 25u) << report.dump(1);
  EXPECT_EQ(report["markers"]["probecost_test:step"], 75) << report.dump(1);
}

TEST(RecordUsdt, ChromeReadBackByReplay) {
  TempDir dir{"probecost-record-usdt"};
  Result r = run_command({PROBECOST_BIN, "record", "-q", "-b", kPair, "-b", kStep, "-o",
                          dir / "t.json", "--", USDT_TARGET_PIE, "nest", "7", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result replay = run_command({PROBECOST_BIN, "replay", "--report", "-f", "json", dir / "t.json"});
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  Json report = Json::parse(replay.out);
  std::map<std::string, std::uint64_t> calls;
  for (const auto& f : report["functions"]) calls[f["function"]] = f["calls"];
  EXPECT_EQ(calls["top"], 7u) << report.dump(1);
  EXPECT_EQ(calls["odd"], 7u) << report.dump(1);
  EXPECT_EQ(report["markers"]["probecost_test:step"], 21) << report.dump(1);
}

// python3 by PID: each call of f a call named f with its file and line, as many as the
// markers say.
TEST(RecordUsdt, Python3ByPid) {
  Result list = run_command({PROBECOST_BIN, "trace", "-l", "usdt:python:function__entry", "--",
                             "/usr/bin/python3", "-c", "pass"});
  if (list.exit_code != 0 || list.out.find("function__entry") == std::string::npos)
    GTEST_SKIP() << "no python3 with USDT markers here: " << list.err;
  TempDir dir{"probecost-record-python"};
  std::string script = dir / "w.py";
  std::ofstream(script) << "import sys\n"
                           "def f(i):\n"
                           "    return i + 1\n"
                           "print('ready', flush=True)\n"
                           "for line in sys.stdin:\n"
                           "    n = sum(f(i) for i in range(int(line)))\n"
                           "    print(n, flush=True)\n";
  Target target({"/usr/bin/python3", script});
  ASSERT_EQ(target.ready_line, "ready");
  Running rec({PROBECOST_BIN, "record", "-p", std::to_string(target.pid), "-b",
               "usdt:python:function__*", "-b", "usdt:python:line", "-o", dir / "t.json",
               "--summary-json", dir / "s.json"});
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  EXPECT_EQ(target.ask("300"), "45150");
  ASSERT_EQ(rec.finish(SIGINT), 0) << rec.stderr_text;
  EXPECT_EQ(target.ask("3"), "6") << "python runs on untraced";
  Json trace = load(dir / "t.json");
  int f_calls = 0, x = 0, orphans = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "usdt") continue;
    x += e["ph"] == "X";
    orphans += e["ph"] == "i" && e["args"].contains("entry");
    if (e["ph"] != "X" || e["name"] != "f") continue;
    ++f_calls;
    EXPECT_EQ(e["args"]["file"], script) << e.dump();
    EXPECT_EQ(e["args"]["line"], 2) << e.dump();
  }
  EXPECT_EQ(f_calls, 300) << "with python:line's semaphore raised, 3.11 fires every entry";
  Json s = load(dir / "s.json");
  const Json& entry = marker(s, "python:function__entry");
  const Json& ret = marker(s, "python:function__return");
  EXPECT_EQ(entry["calls"], x);
  EXPECT_EQ(ret["calls"], x);
  EXPECT_EQ(ret["unbalanced"], orphans);
  EXPECT_EQ(ret["hits"].get<int>(), x + orphans);
  EXPECT_GE(marker(s, "python:line")["hits"].get<int>(), 600);
}

}  // namespace
}  // namespace probecost::test
