// Issue 26 item 4: `record --stacks` on stacks_target, whose stack_leaf is reached by call paths
// of known counts (path_a 3, path_b 5, path_c -> path_b 7, qsort in libc.so.6 calling back
// once per comparison, a second thread's path_a 4). Each entry's stack comes from the snapshot
// its jump takes (no trap), unwound while the program runs. Every entry must have one, and the
// stacks with their counts must be those `trace --stacks --via int3` finds by stopping the
// thread at each hit (a copy of its stack, checked against libunwind over ptrace by
// TraceStacks.Int3HitsUnwoundFromACopyGiveThePtraceStacks): in the Chrome JSON (stackFrames / sf,
// parsed with nlohmann) and in the CTF (the entry's `stack`, read back by babeltrace2); and
// `probecost replay` still reads both. An entry an int3 serves gets its stack from a copy the
// ptrace thread makes of the stopped thread's stack.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"

using namespace probecost::test;
using Json = nlohmann::json;
using Stacks = std::map<std::vector<std::string>, long>;  // innermost frame first

namespace {

constexpr long kLeafCalls = 53;  // 3 + 5 + 7 + 34 (qsort's 17 comparisons, 2 calls each) + 4

// The int3 path's stacks of the same program: the thread stopped at each hit.
Stacks int3_stacks(const TempDir& dir) {
  std::string out = (dir.path / "int3.json").string();
  Result r = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "--via", "int3",
                          "-f", "json", "-o", out, "--", STACKS_TARGET});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  Json report = Json::parse(in);
  Stacks got;
  for (const auto& s : report["stacks"]["stack_leaf"])
    got[s["frames"].get<std::vector<std::string>>()] += s["count"].get<long>();
  return got;
}

Result record(const std::vector<std::string>& options) {
  std::vector<std::string> argv = {PROBECOST_BIN, "record", "-b", "stack_leaf", "--stacks"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--", STACKS_TARGET});
  return run_command(argv);
}

// sf's chain through stackFrames, innermost first.
std::vector<std::string> frames_of(const Json& frames, std::string id) {
  std::vector<std::string> out;
  for (int guard = 0; !id.empty() && guard < 10000; ++guard) {
    const Json& f = frames.at(id);
    out.push_back(f["name"].get<std::string>());
    id = f.contains("parent") ? f["parent"].get<std::string>() : "";
  }
  return out;
}

std::string joined(const std::vector<std::string>& frames) {
  std::string all;
  for (const auto& f : frames) all += f + ";";
  return all;
}

TEST(RecordStacks, EachSliceOfTheChromeTraceHasTheStackTheInt3PathSees) {
  TempDir dir;
  std::string out = (dir.path / "t.json").string();
  Result r = record({"-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("leaf=53 "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("stacks: 53 entries with one (0 cut short"), std::string::npos) << r.err;
  std::ifstream in(out);
  Json trace = Json::parse(in);
  ASSERT_TRUE(trace.contains("stackFrames")) << r.err;
  Stacks got;
  long slices = 0, threaded = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++slices;
    ASSERT_TRUE(e.contains("sf")) << e.dump();
    auto frames = frames_of(trace["stackFrames"], std::to_string(e["sf"].get<long>()));
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames.front().rfind("stack_leaf in ", 0), 0u) << frames.front();
    threaded += joined(frames).find("thread_main") != std::string::npos;
    ++got[frames];
  }
  EXPECT_EQ(slices, kLeafCalls);
  EXPECT_EQ(threaded, 4);
  EXPECT_EQ(got, int3_stacks(dir));
}

// babeltrace2's path ("" when it is not installed): run_command does not search PATH.
std::string babeltrace2() {
  for (const char* at : {"/usr/bin/babeltrace2", "/usr/local/bin/babeltrace2"})
    if (::access(at, X_OK) == 0) return at;
  return "";
}

TEST(RecordStacks, EachEntryOfTheCtfTraceHasItsStackAndReplayStillReadsIt) {
  if (babeltrace2().empty()) GTEST_SKIP() << "babeltrace2 is not installed";
  TempDir dir;
  std::string out = (dir.path / "ctf").string();
  Result r = record({"-f", "ctf", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Result bt = run_command({babeltrace2(), out});
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  Stacks got;
  long entries = 0;
  std::istringstream lines(bt.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("probecost:entry") == std::string::npos) continue;
    ++entries;
    auto at = line.find("stack = \"");
    ASSERT_NE(at, std::string::npos) << line;
    std::string folded = line.substr(at + 9, line.find('"', at + 9) - at - 9);
    std::vector<std::string> frames;  // folded is outermost first
    for (std::size_t from = 0; from <= folded.size();) {
      std::size_t semi = folded.find(';', from);
      if (semi == std::string::npos) semi = folded.size();
      frames.insert(frames.begin(), folded.substr(from, semi - from));
      from = semi + 1;
    }
    ++got[frames];
  }
  EXPECT_EQ(entries, kLeafCalls);
  EXPECT_EQ(got, int3_stacks(dir));
  Result replay = run_command({PROBECOST_BIN, "replay", "--report", out});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find("stack_leaf"), std::string::npos) << replay.out;
}

TEST(RecordStacks, ReplayReadsAChromeTraceWithStacks) {
  TempDir dir;
  std::string out = (dir.path / "t.json").string();
  ASSERT_EQ(record({"-o", out}).exit_code, 0);
  Result replay = run_command({PROBECOST_BIN, "replay", "--report", out});
  EXPECT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find("stack_leaf"), std::string::npos) << replay.out;
}

TEST(RecordStacks, StackOptionsWithoutStacksAreUsageErrors) {
  for (const char* o : {"--stack-size", "--stack-depth"}) {
    Result r = run_command(
        {PROBECOST_BIN, "record", "-b", "stack_leaf", o, "64", "-o", "/dev/null", "--", "true"});
    EXPECT_EQ(r.exit_code, 2) << o << r.err;
    EXPECT_NE(r.err.find("needs --stacks"), std::string::npos) << r.err;
  }
}

// A library dlopened once the probes are in: record watches r_brk with --stacks, and the
// unwinder reads the maps again there (else the 5 stacks would end in no module).
TEST(RecordStacks, AFrameInALibraryLoadedLaterIsUnwoundAndNamed) {
  TempDir dir;
  std::string out = (dir.path / "lib.json").string();
  Result r = run_command({PROBECOST_BIN, "record", "-b", "stack_leaf", "--stacks", "-o", out, "--",
                          STACKS_TARGET, "dlopen", STACKS_LIB});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("dlopen lib=5 leaf=5"), std::string::npos) << r.out;
  std::ifstream in(out);
  Json trace = Json::parse(in);
  long through = 0, slices = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++slices;
    ASSERT_TRUE(e.contains("sf")) << e.dump();
    std::string all = joined(frames_of(trace["stackFrames"], std::to_string(e["sf"].get<long>())));
    through += all.find("stacks_lib_call+") != std::string::npos &&
               all.find("main+") != std::string::npos &&
               all.find("[cut short") == std::string::npos;
  }
  EXPECT_EQ(slices, 5);
  EXPECT_EQ(through, 5) << trace["stackFrames"].dump();
}

// A function too short for a jump: an int3 serves its entry, and the ptrace thread copies the
// stopped thread's stack there, which the feed's thread unwinds as it unwinds the jumps'
// snapshots. short_target calls big (a jump) and short3 (3 bytes: an int3) 10 times each.
TEST(RecordStacks, AnEntryAnInt3ServesHasItsStackToo) {
  TempDir dir;
  std::string out = (dir.path / "short.json").string();
  Result r = run_command({PROBECOST_BIN, "record", "-b", "big", "-b", "short3", "--stacks", "-o",
                          out, "--", SHORT_TARGET, "run", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.err.find("short3: an int3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stacks: 20 entries with one (0 cut short"), std::string::npos) << r.err;
  std::ifstream in(out);
  Json trace = Json::parse(in);
  std::map<std::string, long> by_leaf;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e.contains("sf")) << e.dump();
    auto frames = frames_of(trace["stackFrames"], std::to_string(e["sf"].get<long>()));
    EXPECT_NE(joined(frames).find("main+"), std::string::npos) << joined(frames);
    ++by_leaf[frames.front()];
  }
  EXPECT_EQ(by_leaf["big in short_target"], 10);
  EXPECT_EQ(by_leaf["short3 in short_target"], 10);
}

}  // namespace
