// Issue 26: `trace --stacks` on jump probes (stack snapshots unwound after the run) against the
// int3 path (the thread stopped, unwound over ptrace), on stacks_target: three call paths of
// known counts into stack_leaf, a qsort in libc.so.6 calling back into it, and a second thread.
// Every distinct stack and its count must be the same both ways, and the counts the program's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "run_capture.hpp"
#include "temp_dir.hpp"

using namespace probecost::test;
using Json = nlohmann::json;

namespace {

std::map<std::vector<std::string>, long> stacks_via(const std::string& via, const TempDir& dir,
                                                    Json& report) {
  std::string out = (dir.path / (via + ".json")).string();
  Result r = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "--via", via,
                          "-f", "json", "-o", out, "--", STACKS_TARGET});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("leaf=53 "), std::string::npos) << r.out;  // the program's own counts
  std::ifstream in(out);
  report = Json::parse(in);
  std::map<std::vector<std::string>, long> got;
  for (const auto& s : report["stacks"]["stack_leaf"])
    got[s["frames"].get<std::vector<std::string>>()] += s["count"].get<long>();
  return got;
}

TEST(TraceStacks, JumpSnapshotsGiveTheStacksAndCountsOfTheInt3Path) {
  TempDir dir;
  Json jr, ir;
  auto jump = stacks_via("jump", dir, jr);
  auto int3 = stacks_via("int3", dir, ir);
  EXPECT_EQ(jr["probes"][0]["via"], "jump");
  EXPECT_EQ(ir["probes"][0]["via"], "int3");
  long total = 0, in_libc = 0, threaded = 0;
  for (const auto& [frames, n] : jump) {
    total += n;
    std::string all;
    for (const auto& f : frames) all += f + ";";
    if (all.find("qsort_r+") != std::string::npos) in_libc += n;
    if (all.find("thread_main") != std::string::npos) threaded += n;
  }
  EXPECT_EQ(total, 53);
  EXPECT_EQ(threaded, 4);
  EXPECT_EQ(in_libc, 34);
  EXPECT_EQ(jump, int3);
  EXPECT_EQ(jr["snapshots"]["taken"], 53);
  EXPECT_EQ(jr["snapshots"]["unwound"], 53);
  EXPECT_EQ(jr["snapshots"]["truncated"], 0);
}

// The thread table holds 8 threads per slot: 12 threads one after the other whose thread
// pointers share a slot each get a copy only when an exited thread's entry is freed (before:
// the 9th to 12th were "a thread probecost did not see start", 4 stacks missing).
TEST(TraceStacks, AnExitedThreadsEntryIsFreedForTheNextThread) {
  TempDir dir;
  std::string out = (dir.path / "slots.json").string();
  Result r = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "-f", "json",
                          "-o", out, "--", STACKS_TARGET, "slots"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("slots threads=12 leaf=12"), std::string::npos) << r.out;
  std::ifstream in(out);
  Json report = Json::parse(in);
  EXPECT_EQ(report["probes"][0]["via"], "jump");
  EXPECT_EQ(report["snapshots"]["taken"], 12);
  EXPECT_EQ(report["snapshots"]["unwound"], 12) << report["snapshots"].dump();
  EXPECT_TRUE(report["snapshots"]["not_copied"].empty()) << report["snapshots"].dump();
}

// A library dlopened once the probes are in: the unwinder must read the maps again (the
// trace watches r_brk for it with --stacks), and the names too. Before: no watch, and the 5
// stacks ended at an address in no module, cut short.
TEST(TraceStacks, AFrameInALibraryLoadedLaterIsUnwoundAndNamed) {
  TempDir dir;
  std::string out = (dir.path / "dlopen.json").string();
  Result r = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "-f", "json",
                          "-o", out, "--", STACKS_TARGET, "dlopen", STACKS_LIB});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("dlopen lib=5 leaf=5"), std::string::npos) << r.out;
  std::ifstream in(out);
  Json report = Json::parse(in);
  EXPECT_EQ(report["snapshots"]["unwound"], 5);
  EXPECT_EQ(report["snapshots"]["truncated"], 0) << report["snapshots"].dump();
  long through = 0;
  for (const auto& s : report["stacks"]["stack_leaf"]) {
    std::string all;
    for (const auto& f : s["frames"]) all += f.get<std::string>() + ";";
    if (all.find("stacks_lib_call+") != std::string::npos && all.find("main") != std::string::npos)
      through += s["count"].get<long>();
  }
  EXPECT_EQ(through, 5) << report["stacks"].dump();
}

// Issue 26 item 5: an int3 hit's stack comes from one process_vm_readv of the stopped thread's
// stack, unwound by the jump snapshots' unwinder; PROBECOST_STACKS_CHECK=1 unwinds each hit
// over ptrace (libunwind) too and counts those whose stacks differ. On the known paths, and
// through a library dlopened after the probes went in (the unwinder reads the maps again).
TEST(TraceStacks, Int3HitsUnwoundFromACopyGiveThePtraceStacks) {
  ::setenv("PROBECOST_STACKS_CHECK", "1", 1);
  Result r = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "--via", "int3",
                          "--", STACKS_TARGET});
  Result lib = run_command({PROBECOST_BIN, "trace", "-b", "stack_leaf", "--stacks", "--via", "int3",
                            "--", STACKS_TARGET, "dlopen", STACKS_LIB});
  ::unsetenv("PROBECOST_STACKS_CHECK");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("stacks of int3 hits: 53 from a copy of the stack, 0 over ptrace"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("53 unwound both ways, 0 differed"), std::string::npos) << r.err;
  ASSERT_EQ(lib.exit_code, 0) << lib.err;
  EXPECT_NE(lib.err.find("stacks of int3 hits: 5 from a copy of the stack, 0 over ptrace"),
            std::string::npos)
      << lib.err;
  EXPECT_NE(lib.err.find("5 unwound both ways, 0 differed"), std::string::npos) << lib.err;
}

}  // namespace
