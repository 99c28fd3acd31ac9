// `probecost record` loses nothing by default (issue 24): with a ring far too small for a tight
// loop's records, the writers wait for the drain, and every call is in the trace, under 1, 2
// and 8 threads; with --drop, every record is written or counted lost. Every way out (SIGINT,
// SIGTERM, --duration, the program's exit) leaves every record in the file.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

Json read(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

// The X events (closed calls) of the Chrome trace.
std::size_t closed_calls(const Json& trace) {
  std::size_t n = 0;
  for (const auto& e : trace["traceEvents"]) n += e["ph"] == "X";
  return n;
}

struct Threads {
  long calls;
  int threads;
  Result run, plain;
  Json summary, trace;
  Threads(long n, int k, std::vector<std::string> extra) : calls(n * k), threads(k) {
    TempDir dir{"probecost-lossless"};
    std::vector<std::string> target = {CALLS_TARGET, "nthreads", std::to_string(n),
                                       std::to_string(k)};
    plain = run_command(target);
    std::vector<std::string> argv = {PROBECOST_BIN, "record", "-q", "-b", "add3", "-o",
                                     dir / "t.json", "--summary-json", dir / "s.json",
                                     // 64 KiB per CPU: 2,048 records, 16 sub-buffers of 128
                                     "--buffer-size", "64K"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back("--");
    argv.insert(argv.end(), target.begin(), target.end());
    run = run_command(argv);
    summary = read(dir / "s.json");
    trace = read(dir / "t.json");
  }
  const Json& add3() const { return summary["probes"][0]; }
};

class Lossless : public ::testing::TestWithParam<int> {};

TEST_P(Lossless, EveryCallIsRecordedByDefault) {
  Threads t(50000, GetParam(), {});
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, t.plain.out);
  const Json& p = t.add3();
  EXPECT_EQ(p["calls"], t.calls) << p.dump();
  EXPECT_EQ(p["returns"], t.calls) << p.dump();
  EXPECT_EQ(p["events_lost"], 0) << p.dump();
  EXPECT_EQ(p["events_written"], 2 * t.calls) << p.dump();
  EXPECT_EQ(closed_calls(t.trace), static_cast<std::size_t>(t.calls));
}

TEST_P(Lossless, DropWritesOrCountsEveryRecord) {
  Threads t(50000, GetParam(), {"--drop"});
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.run.out, t.plain.out);
  const Json& p = t.add3();
  EXPECT_EQ(p["events_written"].get<long>() + p["events_lost"].get<long>(), 2 * t.calls)
      << p.dump();
  // In calls, as calls is: an entry dropped is a call lost; an exit dropped, a return lost (an
  // exit whose entry was dropped returns without it).
  EXPECT_EQ(p["calls"].get<long>() + p["calls_lost"].get<long>(), t.calls) << p.dump();
  EXPECT_EQ(
      p["returns"].get<long>() + p["orphan_returns"].get<long>() + p["returns_lost"].get<long>(),
      t.calls)
      << p.dump();
  EXPECT_EQ(p["calls_lost"].get<long>() + p["returns_lost"].get<long>(), p["events_lost"])
      << p.dump();
  if (p["events_lost"] != 0) {
    EXPECT_NE(t.run.err.find(" calls (their entries"), std::string::npos) << t.run.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, Lossless, ::testing::Values(1, 2, 8));

std::string serve_sum(long k) {
  long s = 0;
  for (long i = 0; i < k; ++i) s += i + 3;
  return std::to_string(s);
}

// serve_target-like: calls_target serve, recorded by PID with a small ring; `k` calls asked
// for, then probecost ended by `sig` (0: its --duration): all k calls are in the file.
void every_record_in_the_file(int sig, std::vector<std::string> extra) {
  const long k = 300000;
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  TempDir dir{"probecost-lossless-attach"};
  std::vector<std::string> argv = {
      PROBECOST_BIN,   "record", "-p",           std::to_string(target.pid), "-b",
      "add3",          "-o",     dir / "t.json", "--summary-json",           dir / "s.json",
      "--buffer-size", "64K"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Running rec(argv);
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  EXPECT_EQ(target.ask(std::to_string(k)), serve_sum(k));
  EXPECT_EQ(rec.finish(sig), 0) << rec.stderr_text;
  EXPECT_EQ(target.ask("10"), serve_sum(10));  // let go, unharmed
  Json p = read(dir / "s.json")["probes"][0];
  EXPECT_EQ(p["calls"], k) << p.dump();
  EXPECT_EQ(p["returns"], k) << p.dump();
  EXPECT_EQ(p["events_lost"], 0) << p.dump();
  EXPECT_EQ(closed_calls(read(dir / "t.json")), static_cast<std::size_t>(k));
}

TEST(RecordLossless, SigintLeavesEveryRecordInTheFile) {
  every_record_in_the_file(SIGINT, {});
}

TEST(RecordLossless, SigtermLeavesEveryRecordInTheFile) {
  every_record_in_the_file(SIGTERM, {});
}

TEST(RecordLossless, DurationLeavesEveryRecordInTheFile) {
  every_record_in_the_file(0, {"--duration", "3"});
}

TEST(RecordLossless, ACommandsExitLeavesEveryRecordInTheFile) {
  // The launched command's exit: Lossless.EveryCallIsRecordedByDefault's runs end so; this one
  // with the ring's records left in partly filled sub-buffers (a count that is no multiple).
  Threads t(12345, 1, {});
  ASSERT_EQ(t.run.exit_code, 0) << t.run.err;
  EXPECT_EQ(t.add3()["calls"], 12345);
  EXPECT_EQ(t.add3()["returns"], 12345);
}

TEST(RecordLossless, ASigkilledProbecostLeavesNoWriterWaiting) {
  // Writers that find the 64 KiB ring full wait for a drain that is gone: each waits at most
  // the bound (1 s), the first to time out turns blocking off, and the rest drop at once. The
  // program answers, and serves again. (When the kill comes before any wait, there is none.)
  const long k = 3000000;
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  TempDir dir{"probecost-lossless-kill"};
  Running rec({PROBECOST_BIN, "record", "-p", std::to_string(target.pid), "-b", "add3", "-o",
               dir / "t.json", "--buffer-size", "64K"});
  ASSERT_TRUE(rec.ready) << rec.stderr_text;
  std::string answer;
  std::thread asking([&] { answer = target.ask(std::to_string(k)); });
  rec.finish(SIGKILL);
  asking.join();
  EXPECT_EQ(answer, serve_sum(k));
  EXPECT_EQ(target.ask("10"), serve_sum(10));
}

}  // namespace
}  // namespace probecost::test
