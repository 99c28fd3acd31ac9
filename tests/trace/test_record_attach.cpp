// `probecost record -p PID`: the ways out (SIGINT, SIGTERM, --duration) leave the process
// running as before, its text as its file holds it, and the trace complete; bad input exits 2
// before anything is touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

// A running `probecost record -p PID ... -o DIR/t.json --summary-json DIR/s.json`.
struct RecordRun {
  RecordRun(pid_t target, const std::vector<std::string>& extra) : run(args(target, extra)) {}
  std::vector<std::string> args(pid_t target, const std::vector<std::string>& extra) const {
    std::vector<std::string> a = {PROBECOST_BIN,          "record",      "-p",
                                  std::to_string(target), "-o",          dir / "t.json",
                                  "--summary-json",       dir / "s.json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  Json json(const std::string& name) const {
    std::ifstream in(dir / name);
    return Json::parse(in);
  }
  TempDir dir{"probecost-record"};  // before `run`: it names files in it
  Running run;
};

// Every executable mapping of the target's own file holds the file's bytes.
void expect_text_intact(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int checked = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("r-xp") == std::string::npos || line.find("calls_target") == std::string::npos)
      continue;
    std::uint64_t start = std::stoull(line, nullptr, 16);
    std::uint64_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    expect_text_matches_file(pid, start, end - start);
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

std::string serve_sum(long k) {
  long s = 0;
  for (long i = 0; i < k; ++i) s += i + 3;
  return std::to_string(s);
}

void record_and_leave(int sig, std::vector<std::string> extra) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  extra.insert(extra.begin(), {"-b", "add3", "--args", "2"});
  RecordRun rec(target.pid, extra);
  ASSERT_TRUE(rec.run.ready) << rec.run.stderr_text;
  EXPECT_EQ(target.ask("1000"), serve_sum(1000));
  EXPECT_EQ(rec.run.finish(sig), 0) << rec.run.stderr_text;
  // Untraced from here on, and unharmed.
  EXPECT_EQ(target.ask("10"), serve_sum(10));
  expect_text_intact(target.pid);
  Json p = rec.json("s.json")["probes"][0];
  EXPECT_EQ(p["calls"], 1000u) << p.dump();
  EXPECT_EQ(p["returns"], 1000u) << p.dump();
  Json trace = rec.json("t.json");
  std::size_t x = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["args"]["arg1"], 1);
    EXPECT_EQ(e["args"]["ret"], e["args"]["arg0"].get<long>() + 3);
    ++x;
  }
  EXPECT_EQ(x, 1000u);
  EXPECT_NE(rec.run.stderr_text.find("@latency_ns[add3]"), std::string::npos)
      << rec.run.stderr_text;
}

TEST(RecordAttach, SigintLeavesTheProcessIntact) {
  record_and_leave(SIGINT, {});
}

TEST(RecordAttach, SigtermLeavesTheProcessIntact) {
  record_and_leave(SIGTERM, {});
}

TEST(RecordAttach, DurationEndsIt) {
  // A generous duration: the process answers within it; probecost then ends by itself.
  record_and_leave(0, {"--duration", "2"});
}

long minor_faults(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  std::istringstream fields(
      stat.substr(stat.rfind(')') + 2));  // after the name, which may hold ' '
  std::string f;
  for (int i = 3; i < 10; ++i) fields >> f;  // state .. flags: fields 3 to 9
  long minflt = -1;
  fields >> minflt;
  return minflt;
}

// Issue 24 item 6: the rings are in the program's page tables, and written once by it, before
// the first record: 400,000 records (12.8 MB, most of a 16 MiB ring) take no page fault in the
// program, and the call buffer was written through (no note says it was not).
TEST(RecordAttach, NoPageFaultInTheProgramAfterTheAttach) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  long f0 = minor_faults(target.pid);
  EXPECT_EQ(target.ask("200000"), serve_sum(200000));  // its own pages touched once, untraced
  long f1 = minor_faults(target.pid);
  EXPECT_EQ(target.ask("200000"), serve_sum(200000));
  ASSERT_EQ(minor_faults(target.pid), f1) << "untraced, the program faults by itself";
  RecordRun rec(target.pid, {"-b", "add3"});
  ASSERT_TRUE(rec.run.ready) << rec.run.stderr_text;
  long attached = minor_faults(target.pid);
  EXPECT_EQ(target.ask("200000"), serve_sum(200000));
  EXPECT_EQ(minor_faults(target.pid), attached) << "page faults while recording";
  EXPECT_EQ(rec.run.finish(SIGINT), 0) << rec.run.stderr_text;
  EXPECT_EQ(rec.json("s.json")["probes"][0]["calls"], 200000u);
  EXPECT_EQ(rec.run.stderr_text.find("not written through"), std::string::npos)
      << rec.run.stderr_text;
  EXPECT_GE(f1, f0);
}

TEST(RecordAttach, BadInputExits2Untouched) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  std::string pid = std::to_string(target.pid);
  TempDir dir{"probecost-record-bad"};
  const std::string out = dir / "t.json", never = dir / "never.json", used = dir / "used";
  fs::create_directory(used);
  std::ofstream(dir / "used/file") << "taken\n";
  std::vector<std::vector<std::string>> bad = {
      {"-b", "add3"},                                      // no -o
      {"-b", "add3", "-o", "/nonexistent/dir/t.json"},     // unwritable
      {"-b", "add3", "-o", out, "--args", "7"},            // too many arguments
      {"-b", "add3", "-o", out, "--format", "xml"},        // no such format
      {"-o", out},                                         // no probe
      {"-b", "no_such_function", "-o", never},             // names nothing
      {"-b", "add3", "-o", "/proc/version"},               // a CTF directory that is a file
      {"-b", "add3", "-o", used, "--format", "ctf"},       // a directory in use
      {"-b", "add3", "-o", "/proc/probecost-never.json"},  // the kernel's file system
      {"-b", "add3", "-o", "/proc/probecost-never-ctf"},   // likewise, for a CTF directory
      {"-b", "add3", "-o", never, "--summary-json", "/proc/version"},
      {"-b", "add3", "-o", dir.path.string(), "--format", "chrome"},  // a directory for a file
      {"-b", "add3", "-o", never, "--buffer-size", "16K"},            // too small
      {"-b", "add3", "-o", never, "--buffer-size", "2G"},             // too big
      {"-b", "add3", "-o", never, "--buffer-size", "4X"},             // no such unit
      {"-b", "add3", "-o", never, "--buffer-size", "-1M"},
  };
  for (auto args : bad) {
    args.insert(args.begin(), {PROBECOST_BIN, "record", "-p", pid});
    Result r = run_command(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.err;
    EXPECT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find("tracing process"), std::string::npos) << r.err;  // never attached
    EXPECT_EQ(target.ask("5"), serve_sum(5));
  }
  expect_text_intact(target.pid);
  // Nothing written: the directory holds what the test put there.
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    left.push_back(e.path().lexically_relative(dir.path).string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"used", "used/file"}));
}

}  // namespace
}  // namespace probecost::test
