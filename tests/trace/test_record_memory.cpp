// Issue 23, item 3: a process traced and recorded again and again keeps the memory and the
// mappings it had. Every detach takes out the trampoline areas and the call buffer (its rings
// were CPUs x 16 MiB, resident, for good, before); `probecost restore` takes out what a killed
// probecost left.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

// The bound the README states: after a detach, as many mappings as before, and at most this
// much more resident memory (the program's own stack and heap pages that the injected calls
// and its work touch; a ring is 16 MiB per CPU).
constexpr std::uint64_t kRssBoundKiB = 1024;

struct Footprint {
  std::size_t maps = 0;
  std::uint64_t rss_kib = 0;
  std::uint64_t anon_shmem_kib = 0;  // RssAnon + RssShmem: not the file pages of its text
  std::size_t ours = 0;              // mappings of a probecost memfd
};

Footprint footprint(pid_t pid) {
  Footprint f;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    ++f.maps;
    f.ours += line.find("/memfd:probecost-") != std::string::npos;
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) f.rss_kib = std::stoull(line.substr(6));
    if (line.rfind("RssAnon:", 0) == 0 || line.rfind("RssShmem:", 0) == 0)
      f.anon_shmem_kib += std::stoull(line.substr(line.find(':') + 1));
  }
  return f;
}

std::string serve_sum(long k) {
  long s = 0;
  for (long i = 0; i < k; ++i) s += i + 3;
  return std::to_string(s);
}

std::vector<std::string> record_args(pid_t pid, const TempDir& dir) {
  return {PROBECOST_BIN, "record", "-p", std::to_string(pid), "-b", "add3",
          "--args",      "2",      "-o", dir / "t.json"};
}

std::string describe(const Footprint& f) {
  std::ostringstream s;
  s << f.maps << " mappings (" << f.ours << " of probecost), " << f.rss_kib << " KiB resident ("
    << f.anon_shmem_kib << " anonymous and shared)";
  return s.str();
}

TEST(RecordMemory, TraceRecordDetachCyclesLeaveTheProcessAsItWas) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  EXPECT_EQ(target.ask("1000"), serve_sum(1000));  // its own pages touched once, untraced
  const Footprint before = footprint(target.pid);
  TempDir dir{"probecost-record-memory"};
  for (int cycle = 1; cycle <= 20; ++cycle) {
    {
      Trace trace({"-p", std::to_string(target.pid), "-b", "add3", "--via", "jump"});
      ASSERT_TRUE(trace.ready) << trace.stderr_text;
      EXPECT_EQ(target.ask("100"), serve_sum(100));
      ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
    }
    {
      Running rec(record_args(target.pid, dir));
      ASSERT_TRUE(rec.ready) << rec.stderr_text;
      EXPECT_EQ(target.ask("100"), serve_sum(100));
      ASSERT_EQ(rec.finish(SIGINT), 0) << rec.stderr_text;
      EXPECT_EQ(rec.stderr_text.find("kept the"), std::string::npos) << rec.stderr_text;
    }
    Footprint now = footprint(target.pid);
    EXPECT_EQ(now.maps, before.maps)
        << "cycle " << cycle << ": " << describe(now) << ", before " << describe(before);
    EXPECT_EQ(now.ours, 0u) << "cycle " << cycle;
    EXPECT_LE(now.rss_kib, before.rss_kib + kRssBoundKiB)
        << "cycle " << cycle << ": " << describe(now) << ", before " << describe(before);
    if (HasFailure()) break;
  }
  EXPECT_EQ(target.ask("10"), serve_sum(10));
}

// Anonymous mappings of `pid` that begin with the trap area's magic (breakpoint/in_tracee/
// trap_area.hpp), read through /proc/PID/mem.
std::size_t trap_areas(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::ifstream mem("/proc/" + std::to_string(pid) + "/mem", std::ios::binary);
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    if (!path.empty() || perms[0] != 'r') continue;
    char magic[8] = {};
    mem.clear();
    mem.seekg(static_cast<std::streamoff>(std::stoull(range, nullptr, 16)));
    if (mem.read(magic, sizeof magic) && std::string(magic, 8) == "probeint") ++n;
  }
  return n;
}

// Each attach with an int3 probe mapped a trap area for the in-process SIGTRAP handler and left
// it: merged with the one before, VmRSS grew by its pages (python3: +16 KiB a `trace --via
// int3`). It goes at detach now, once the program's disposition is back and no thread is in it.
// --step-over emulate: no scratch page (those stay, one page an attach).
TEST(RecordMemory, Int3AttachesLeaveNoTrapArea) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  EXPECT_EQ(target.ask("1000"), serve_sum(1000));
  const Footprint before = footprint(target.pid);
  for (int cycle = 1; cycle <= 5; ++cycle) {
    Trace trace({"-p", std::to_string(target.pid), "-b", "add3", "--via", "int3", "--step-over",
                 "emulate"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    EXPECT_EQ(trap_areas(target.pid), 1u);
    EXPECT_EQ(target.ask("100"), serve_sum(100));
    ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
    EXPECT_EQ(trap_areas(target.pid), 0u) << "cycle " << cycle << ": " << trace.stderr_text;
    Footprint now = footprint(target.pid);
    EXPECT_EQ(now.maps, before.maps)
        << "cycle " << cycle << ": " << describe(now) << ", before " << describe(before);
    if (HasFailure()) break;
  }
  EXPECT_EQ(target.ask("10"), serve_sum(10));
}

TEST(RecordMemory, RestoreAfterAKilledRecordTakesOutItsRingsAndTrampolines) {
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  ASSERT_EQ(target.ready_line, "ready");
  EXPECT_EQ(target.ask("1000"), serve_sum(1000));
  const Footprint before = footprint(target.pid);
  TempDir dir{"probecost-record-memory"};
  {
    Running rec(record_args(target.pid, dir));
    ASSERT_TRUE(rec.ready) << rec.stderr_text;
    EXPECT_EQ(target.ask("100"), serve_sum(100));
    ::kill(rec.pid, SIGKILL);
    rec.finish(0);
  }
  // The jumps still lead to the trampolines, which write into the rings: all still there.
  EXPECT_EQ(target.ask("100"), serve_sum(100));
  Footprint left = footprint(target.pid);
  EXPECT_GT(left.ours, 0u) << describe(left);
  EXPECT_GT(left.rss_kib, before.rss_kib + 8192) << describe(left);  // the populated rings

  Result r =
      run_command({PROBECOST_BIN, "restore", "-p", std::to_string(target.pid), "-f", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json report = Json::parse(r.out);
  EXPECT_GT(report["unmapped_bytes"].get<std::uint64_t>(), 16u << 20) << report.dump(1);
  Footprint now = footprint(target.pid);
  EXPECT_EQ(now.maps, before.maps) << describe(now) << ", before " << describe(before);
  EXPECT_EQ(now.ours, 0u) << describe(now);
  // restore compares every executable mapping with its file, read through /proc/PID/mem: the
  // text's file pages come in (page cache, not memory of the program's own).
  EXPECT_LE(now.anon_shmem_kib, before.anon_shmem_kib + kRssBoundKiB)
      << describe(now) << ", before " << describe(before);
  EXPECT_EQ(target.ask("10"), serve_sum(10));
  // A second restore finds nothing left.
  Result again =
      run_command({PROBECOST_BIN, "restore", "-p", std::to_string(target.pid), "-f", "json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Json::parse(again.out)["unmapped_bytes"], 0u);
}

}  // namespace
}  // namespace probecost::test
