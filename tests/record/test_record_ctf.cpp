// The CTF writer (record/ctf.hpp), read back by babeltrace2: event count, field values and
// timestamps (raw TSC cycles, and seconds since the epoch through the metadata's clock offset).
// Runs babeltrace2 as a child process; skipped where it is not installed (CI installs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/error.hpp"
#include "record/ctf.hpp"
#include "record/recorder.hpp"
#include "tests/record/record_fixtures.hpp"

namespace probecost::record {
namespace {

using testing::entry;
using testing::exit;

struct Output {
  int status = -1;
  std::vector<std::string> lines;
  std::string errors;
};

Output run(const std::string& command, const std::filesystem::path& errfile) {
  Output out;
  FILE* p = popen((command + " 2>" + errfile.string()).c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::string line;
  while (fgets(buf, sizeof buf, p)) {
    line += buf;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      out.lines.push_back(line);
      line.clear();
    }
  }
  out.status = pclose(p);
  std::ifstream err(errfile);
  out.errors.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return out;
}

// babeltrace2 --clock-cycles's timestamp: "[00000000000000001000] ".
std::string cycles(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "[%020llu] ", static_cast<unsigned long long>(n));
  return buf;
}

bool have_babeltrace2() {
  return std::system("command -v babeltrace2 >/dev/null 2>&1") == 0;
}

class RecordCtf : public ::testing::Test {
 protected:
  std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / ("probecost-ctf-" + std::to_string(getpid()));
  std::filesystem::path dir = tmp / "trace";
  void SetUp() override {
    if (!have_babeltrace2()) GTEST_SKIP() << "babeltrace2 is not installed";
    std::filesystem::create_directories(tmp);
  }
  void TearDown() override { std::filesystem::remove_all(tmp); }

  Output babeltrace(const std::string& options) {
    return run("babeltrace2 " + options + " " + dir.string(), tmp / "stderr");
  }
};

constexpr int kLoop = 5000;  // calls on thread 3: ~380 KB of events, several packets

// Thread 1: f(5, -1) returns 42; thread 2: g unwound; thread 3: kLoop calls of f, 7 records lost.
void write_trace(const std::filesystem::path& dir) {
  RunInfo run = testing::run_of({"f(long, long)", "g"}, 2);
  Recorder rec(run, TraceFormat::ctf, dir.string());
  rec.thread_name(100, 1, "main", 900);
  rec.add(entry(1, 0, 1000, 0, {5, static_cast<std::uint64_t>(-1)}));
  rec.add(entry(2, 1, 1050));
  rec.add(exit(1, 0, 1100, 42));
  rec.add(testing::unwound(2, 1, 1200));
  for (std::uint64_t i = 0; i < kLoop; ++i) {
    rec.add(entry(3, 0, 2000 + 10 * i, 0, {i, 0}));
    rec.add(exit(3, 0, 2005 + 10 * i, i * 2));
  }
  rec.lost({100, 3, 0, 7});
  rec.add(entry(3, 0, 2000 + 10 * kLoop));  // after the loss: the next packet reports it
  rec.finish();
}

TEST_F(RecordCtf, BabeltraceReadsEveryEvent) {
  write_trace(dir);
  Output out = babeltrace("--clock-cycles");
  ASSERT_EQ(out.status, 0) << out.errors;
  std::map<std::string, int> count;
  std::regex name(R"(probecost:(\w+):)");
  for (const auto& line : out.lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, name)) << line;
    ++count[m[1]];
  }
  EXPECT_EQ(count["entry"], 2 + kLoop + 1);
  EXPECT_EQ(count["return"], 1 + kLoop);
  EXPECT_EQ(count["unwound"], 1);
  EXPECT_EQ(count["thread_name"], 1);
  EXPECT_NE(out.errors.find("discarded"), std::string::npos) << out.errors;
  EXPECT_GT(std::distance(std::filesystem::directory_iterator(dir),
                          std::filesystem::directory_iterator()),
            3);  // metadata and three threads' streams
}

TEST_F(RecordCtf, LossOfNoKnownThreadIsShownWhenItWasCounted) {
  // The tracer's rings count lost records per CPU: their threads are unknown (tid 0).
  RunInfo run = testing::run_of({"f"}, 0);
  {
    Recorder rec(run, TraceFormat::ctf, dir.string());
    rec.add(entry(1, 0, 1000));
    rec.add(exit(1, 0, 1100, 0));
    rec.lost({100, 0, 0, 5, 3000});
    rec.finish();
  }
  Output out = babeltrace("--clock-cycles");
  ASSERT_EQ(out.status, 0) << out.errors;
  EXPECT_NE(out.errors.find("discarded"), std::string::npos) << out.errors;
  // Between the count's time and itself (the test clock runs at 1 GHz), not the clock's zero.
  EXPECT_EQ(out.errors.find(".000000000]"), std::string::npos) << out.errors;
  EXPECT_NE(out.errors.find(".000003000] and ["), std::string::npos) << out.errors;
}

TEST_F(RecordCtf, FieldsAndRawTimestamps) {
  write_trace(dir);
  Output out = babeltrace("--clock-cycles");
  ASSERT_EQ(out.status, 0) << out.errors;
  ASSERT_GE(out.lines.size(), 5u);
  // Muxed in time order across the threads' streams.
  EXPECT_NE(out.lines[0].find(cycles(900)), std::string::npos) << out.lines[0];
  EXPECT_NE(out.lines[0].find("probecost:thread_name: { pid = 100, tid = 1 }, { name = \"main\" }"),
            std::string::npos)
      << out.lines[0];
  EXPECT_NE(out.lines[1].find(cycles(1000)), std::string::npos) << out.lines[1];
  EXPECT_NE(out.lines[1].find("probecost:entry: { pid = 100, tid = 1 }, { probe = ( \"f(long, "
                              "long)\" : container = 0 ), arg0 = 5, arg1 = -1 }"),
            std::string::npos)
      << out.lines[1];
  EXPECT_NE(out.lines[2].find(cycles(1050)), std::string::npos) << out.lines[2];
  EXPECT_NE(out.lines[2].find("{ pid = 100, tid = 2 }, { probe = ( \"g\" : container = 1 ), arg0 = "
                              "0, arg1 = 0 }"),
            std::string::npos)
      << out.lines[2];
  EXPECT_NE(out.lines[3].find(cycles(1100)), std::string::npos);
  EXPECT_NE(out.lines[3].find("probecost:return: { pid = 100, tid = 1 }, { probe = ( \"f(long, "
                              "long)\" : container = 0 ), ret = 42 }"),
            std::string::npos)
      << out.lines[3];
  EXPECT_NE(out.lines[4].find(cycles(1200)), std::string::npos);
  EXPECT_NE(out.lines[4].find("probecost:unwound: { pid = 100, tid = 2 }, { probe = ( \"g\" : "
                              "container = 1 ) }"),
            std::string::npos)
      << out.lines[4];
  // The loop's last call, in the stream's last packets.
  std::string last_exit = cycles(2005 + 10 * (kLoop - 1));
  auto it = std::find_if(out.lines.begin(), out.lines.end(),
                         [&](const std::string& l) { return l.find(last_exit) == 0; });
  ASSERT_NE(it, out.lines.end());
  EXPECT_NE(it->find("ret = " + std::to_string(2 * (kLoop - 1)) + " }"), std::string::npos) << *it;
}

TEST_F(RecordCtf, EpochTimestampsThroughTheClockOffset) {
  write_trace(dir);
  Output out = babeltrace("--clock-seconds");
  ASSERT_EQ(out.status, 0) << out.errors;
  ASSERT_GE(out.lines.size(), 2u);
  // TSC 1000 at 1 GHz from TSC 0 = CLOCK_MONOTONIC 0, realtime offset 1.7e9 s: 1000 ns after.
  EXPECT_EQ(out.lines[1].find("[1700000000.000001000] "), 0u) << out.lines[1];
}

TEST_F(RecordCtf, ReusedThreadIdGetsAStreamOfItsOwn) {
  {
    Recorder rec(testing::run_of({"f"}), TraceFormat::ctf, dir.string());
    rec.add(entry(5, 0, 100));
    rec.add(exit(5, 0, 200));
    rec.thread_exited(100, 5);
    rec.add(entry(5, 0, 150));  // a new thread, given the tid again; its own clock order
    rec.add(exit(5, 0, 250));
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "thread-100-5"));
  EXPECT_TRUE(std::filesystem::exists(dir / "thread-100-5.1"));
  Output out = babeltrace("--clock-cycles");
  ASSERT_EQ(out.status, 0) << out.errors;
  ASSERT_EQ(out.lines.size(), 4u);
  EXPECT_EQ(out.lines[1].find(cycles(150)), 0u) << out.lines[1];
}

TEST_F(RecordCtf, RefusesADirectoryInUse) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "something") << "x";
  EXPECT_THROW(CtfWriter(dir, testing::run_of({"f"})), Error);
}

TEST(RecordCtfMetadata, ClockAndProbeNames) {
  RunInfo run = testing::run_of({"f", "f", "say \"hi\""}, 0);
  run.probes[1].spec = "libx.so:f";
  run.clock.hz = 3'000'000'000;
  run.clock.anchor = {3'000'000'000, 1'000'000'000};  // TSC 0 = CLOCK_MONOTONIC 0
  run.clock.realtime_offset_ns = 1'700'000'000'250'000'000;
  std::string m = ctf_metadata(run, Uuid{});
  EXPECT_EQ(m.rfind("/* CTF 1.8 */\n", 0), 0u);
  EXPECT_NE(m.find("freq = 3000000000;"), std::string::npos);
  EXPECT_NE(m.find("offset_s = 1700000000;"), std::string::npos);
  EXPECT_NE(m.find("offset = 750000000;"), std::string::npos);  // 0.25 s of 3 GHz cycles
  EXPECT_NE(m.find("\"f\" = 0,"), std::string::npos);
  EXPECT_NE(m.find("\"f (libx.so:f)\" = 1,"), std::string::npos);
  EXPECT_NE(m.find("\"say \\\"hi\\\"\" = 2"), std::string::npos);
  EXPECT_EQ(m.find("arg0"), std::string::npos);
}

// --stacks: an entry's `stack` string, folded (outermost first), or why it has none; replay's
// reader skips it.
TEST_F(RecordCtf, AnEntrysStackIsAFoldedString) {
  RunInfo run = testing::run_of({"leaf"});
  run.stacks = true;
  {
    Recorder rec(run, TraceFormat::ctf, dir.string());
    rec.stack(1, {"main in p", "a in p", "leaf in p"});
    Event e1 = entry(1, 0, 1000), e2 = entry(1, 0, 2000);
    e1.stack = 1;
    e2.no_stack = StackMissing::off_stack;
    rec.add(e1);
    rec.add(exit(1, 0, 1100, 7));
    rec.add(e2);
    rec.add(exit(1, 0, 2100, 8));
    rec.finish();
  }
  Output out = babeltrace("");
  ASSERT_EQ(out.status, 0) << out.errors;
  ASSERT_EQ(out.lines.size(), 4u);
  EXPECT_NE(out.lines[0].find("stack = \"main in p;a in p;leaf in p\""), std::string::npos)
      << out.lines[0];
  EXPECT_NE(out.lines[1].find("ret = 7"), std::string::npos) << out.lines[1];
  // babeltrace2 escapes the apostrophe that follows.
  EXPECT_NE(out.lines[2].find("stack = \"[not copied: off its thread"), std::string::npos)
      << out.lines[2];
  EXPECT_NE(out.lines[3].find("ret = 8"), std::string::npos) << out.lines[3];
}

}  // namespace
}  // namespace probecost::record
