// `probecost record`'s pairing end to end (issue 24 item 7) on pairing_target, launched and
// attached: the caller of vfork/posix_spawn/system keeps its own records, recursion deeper than
// 65,536 levels pairs every frame, ucontext coroutines that yield mid-call pair on their own
// stacks, a function that ends in a tail call is marked, and threads are named as they ran.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

struct Recording {
  TempDir dir{"probecost-pairing"};
  Result run, plain;
  Json trace, summary;

  std::vector<std::string> args(const std::vector<std::string>& probes) const {
    std::vector<std::string> a = {PROBECOST_BIN,  "record",         "-o",
                                  dir / "t.json", "--summary-json", dir / "s.json"};
    for (const auto& p : probes) a.insert(a.end(), {"-b", p});
    return a;
  }
  // Launched: `record ... -- pairing_target MODE N`, beside an untraced run.
  void launch(const std::vector<std::string>& probes, const std::string& mode, long n) {
    std::vector<std::string> target = {PAIRING_TARGET, mode, std::to_string(n)};
    plain = run_command(target);
    std::vector<std::string> argv = args(probes);
    argv.push_back("--");
    argv.insert(argv.end(), target.begin(), target.end());
    run = run_command(argv);
    load();
  }
  // Attached: `record -p` to pairing_target MODE N stdin, let go with SIGINT after its work.
  void attach(const std::vector<std::string>& probes, const std::string& mode, long n) {
    plain = run_command({PAIRING_TARGET, mode, std::to_string(n)});
    Target target(std::vector<std::string>{PAIRING_TARGET, mode, std::to_string(n), "stdin"});
    ASSERT_EQ(target.ready_line, "ready");
    std::vector<std::string> argv = args(probes);
    argv.insert(argv.end(), {"-p", std::to_string(target.pid)});
    Running rec(argv);
    ASSERT_TRUE(rec.ready) << rec.stderr_text;
    // Its first line, as the untraced run's.
    run.out = target.ask("go") + "\n";
    plain.out = plain.out.substr(0, plain.out.find('\n') + 1);
    run.exit_code = rec.finish(SIGINT);
    run.err = rec.stderr_text;
    target.ask("end");
    EXPECT_EQ(WEXITSTATUS(target.wait_exit()), 0);
    load();
  }
  void load() {
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
  std::vector<Json> events(const std::string& name) const {
    std::vector<Json> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e.value("name", "") == name && e["ph"] != "M") out.push_back(e);
    }
    return out;
  }
  // Each thread's names in the order the trace gives them.
  std::map<long, std::vector<std::string>> thread_names() const {
    std::map<long, std::vector<std::string>> out;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" && e["name"] == "thread_name")
        out[e["tid"].get<long>()].push_back(e["args"]["name"]);
    }
    return out;
  }
};

void expect_exact(const Json& p, std::uint64_t calls) {
  EXPECT_EQ(p["calls"], calls) << p.dump();
  EXPECT_EQ(p["returns"], calls) << p.dump();
  EXPECT_EQ(p["unmatched"], 0u) << p.dump();
  EXPECT_EQ(p["orphan_returns"], 0u) << p.dump();
  EXPECT_EQ(p["events_lost"], 0u) << p.dump();
}

// Every call of work on the caller's thread: before, the child of vfork/posix_spawn, which
// runs on the caller's thread pointer, took every record written after it appeared (19 of 20).
void expect_callers_own(const Recording& r, long n) {
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_exact(r.probe("work"), 2 * n);
  auto calls = r.events("work");
  ASSERT_EQ(calls.size(), static_cast<std::size_t>(2 * n));
  for (const auto& e : calls) ASSERT_EQ(e["tid"], e["pid"]) << e.dump();
}

TEST(RecordPairingRun, PosixSpawnsCallerKeepsItsRecords) {
  Recording r;
  r.launch({"work"}, "spawn", 10);
  expect_callers_own(r, 10);
}

TEST(RecordPairingRun, VforksCallerKeepsItsRecords) {
  Recording r;
  r.launch({"work"}, "vfork", 10);
  expect_callers_own(r, 10);
}

TEST(RecordPairingRun, SystemsCallerKeepsItsRecords) {
  Recording r;
  r.launch({"work"}, "system", 10);
  expect_callers_own(r, 10);
}

TEST(RecordPairingRun, PosixSpawnsCallerKeepsItsRecordsAttached) {
  Recording r;
  r.attach({"work"}, "spawn", 10);
  expect_callers_own(r, 10);
}

TEST(RecordPairingRun, RecursionDeeperThan65536LevelsPairsEveryFrame) {
  // Before: 65,536 returns and 34,465 unmatched (a cap evicted live frames).
  Recording r;
  r.launch({"rec"}, "deep", 100000);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_exact(r.probe("rec"), 100001);
}

TEST(RecordPairingRun, CoroutinesYieldingMidCallPairOnTheirStacks) {
  // Before: 20 of 20 calls unmatched (each exit closed the other coroutine's frame as unwound
  // past, and was itself an orphan).
  for (bool attached : {false, true}) {
    Recording r;
    if (attached)
      r.attach({"yielder"}, "coro", 20);
    else
      r.launch({"yielder"}, "coro", 20);
    ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
    EXPECT_EQ(r.run.out, r.plain.out);
    expect_exact(r.probe("yielder"), 20);
  }
}

TEST(RecordPairingRun, AFunctionEndingInATailCallIsMarked) {
  Recording r;
  r.launch({"libc.so.6:strtold", "work"}, "tail", 50);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  const Json& s = r.probe("strtold");
  expect_exact(s, 50);
  EXPECT_GE(s["tail_call_exits"], 1u) << s.dump();
  EXPECT_EQ(r.probe("work")["tail_call_exits"], 0u);
  EXPECT_NE(r.run.err.find("strtold *"), std::string::npos) << r.run.err;
  EXPECT_NE(r.run.err.find("* libc.so.6:strtold: 1 of its"), std::string::npos) << r.run.err;
  EXPECT_NE(r.run.err.find("a tail call"), std::string::npos) << r.run.err;
}

TEST(RecordPairingRun, ThreadsAreNamedAsTheyRan) {
  // Before: the worker showed main's new name (taken when it appeared, before its own
  // PR_SET_NAME), and main's later rename was missed.
  Recording r;
  r.launch({"work"}, "names", 100);
  ASSERT_EQ(r.run.exit_code, 0) << r.run.err;
  EXPECT_EQ(r.run.out, r.plain.out);
  expect_exact(r.probe("work"), 300);
  auto names = r.thread_names();
  std::set<long> tids;
  long pid = 0;
  for (const auto& e : r.events("work")) {
    tids.insert(e["tid"].get<long>());
    pid = e["pid"];
  }
  ASSERT_EQ(tids.size(), 2u);
  for (long tid : tids) {
    ASSERT_FALSE(names[tid].empty()) << tid;
    EXPECT_EQ(names[tid].back(), tid == pid ? "main-late" : "worker") << tid;
  }
}

TEST(RecordPairingRun, ThreadsAreNamedAsTheyRanInCtf) {
  if (std::system("babeltrace2 --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no babeltrace2";
  TempDir dir("probecost-pairing");
  std::string ctf = dir / "ctf";
  Result run = run_command({PROBECOST_BIN, "record", "-b", "work", "-o", ctf + "/", "--",
                            PAIRING_TARGET, "names", "10"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Result bt = run_command({"/usr/bin/babeltrace2", ctf});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  // The last name of each thread, in time order.
  std::map<std::string, std::string> last;  // tid -> name
  std::istringstream lines(bt.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("probecost:thread_name") == std::string::npos) continue;
    auto tid_at = line.find("tid = "), name_at = line.find("name = \"");
    ASSERT_NE(tid_at, std::string::npos) << line;
    ASSERT_NE(name_at, std::string::npos) << line;
    std::string tid = line.substr(tid_at + 6, line.find_first_of(" ,}", tid_at + 6) - tid_at - 6);
    std::string name = line.substr(name_at + 8, line.find('"', name_at + 8) - name_at - 8);
    last[tid] = name;
  }
  std::multiset<std::string> names;
  for (const auto& [tid, name] : last) names.insert(name);
  EXPECT_EQ(names, (std::multiset<std::string>{"main-late", "worker"})) << bt.out;
}

}  // namespace
}  // namespace probecost::test
