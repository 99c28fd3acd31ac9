// Issue 23 item 6: outputs checked before anything is touched, and nothing half-written left
// behind. A FIFO nobody reads is refused at once (its open would wait for ever, the target never
// attached); the same file given twice (by name, symlink or hard link) is refused; a full file
// system gives a clear error and removes the files this run created; a runtime failure of
// `record` lets a launched command run on instead of killing it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

// `argv` under timeout(1): a probecost that hangs (as on a FIFO without a reader, before) is
// killed and the test fails instead of the whole binary timing out.
Result bounded(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/timeout", "-s", "KILL", "60"});
  return run_command(argv);
}

std::vector<std::string> calls(long n) {
  return {"--", CALLS_TARGET, "calls", std::to_string(n)};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Outputs, AFifoWithoutAReaderIsRefusedBeforeTheTargetIsTouched) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0600), 0);
  for (auto cmd : {std::vector<std::string>{PROBECOST_BIN, "trace", "-b", "add3", "-o"},
                   std::vector<std::string>{PROBECOST_BIN, "record", "-b", "add3", "-o"},
                   std::vector<std::string>{PROBECOST_BIN, "record", "-b", "add3", "-o",
                                            dir / "t.json", "--summary-json"}}) {
    Result r = bounded(cat(cat(cmd, {dir / "fifo.json"}), calls(3)));
    EXPECT_EQ(r.exit_code, 2) << cmd[1] << ": " << r.err;
    EXPECT_NE(r.err.find("FIFO that no process reads"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "the command must not have run";
    EXPECT_FALSE(fs::exists(dir / "t.json"));
  }
}

TEST(Outputs, AFifoWithAReaderGetsTheReport) {
  TempDir dir;
  std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Our own reader, opened without blocking before probecost opens the FIFO for writing.
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  Result r = bounded(
      cat({PROBECOST_BIN, "trace", "-q", "-f", "json", "-b", "add3", "-o", fifo}, calls(3)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) text.append(buf, n);
  ::close(reader);
  Json report = Json::parse(text);
  EXPECT_EQ(report["probes"][0]["hits"], 3u);
}

TEST(Outputs, TheSameFileTwiceIsRefused) {
  TempDir dir;
  std::string t = dir / "t.json";
  {
    Result r = bounded(
        cat({PROBECOST_BIN, "record", "-b", "add3", "-o", t, "--summary-json", t}, calls(3)));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("are the same file"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "the command must not have run";
    EXPECT_FALSE(fs::exists(t)) << "created by the refused run, so removed";
  }
  { std::ofstream(t) << "before\n"; }
  fs::create_symlink(t, dir / "symlink.json");
  fs::create_hard_link(t, dir / "hardlink.json");
  for (const char* other : {"symlink.json", "hardlink.json"}) {
    Result r = bounded(cat(
        {PROBECOST_BIN, "record", "-b", "add3", "-o", t, "--summary-json", dir / other}, calls(3)));
    EXPECT_EQ(r.exit_code, 2) << other << ": " << r.err;
    EXPECT_NE(r.err.find("are the same file"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    Result f = bounded(
        cat({PROBECOST_BIN, "trace", "--stacks", "-b", "add3", "-o", t, "--folded", dir / other},
            calls(3)));
    EXPECT_EQ(f.exit_code, 2) << other << ": " << f.err;
    EXPECT_NE(f.err.find("are the same file"), std::string::npos) << f.err;
  }
  std::ifstream in(t);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "before") << "the refused runs left the file as it was";
  // /dev/null twice is no clash.
  Result r = bounded(cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", "/dev/null",
                          "--format", "chrome", "--summary-json", "/dev/null"},
                         calls(3)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A tmpfs of 64 KiB, already full, mounted in a mount namespace of probecost's own
// (unshare -m): every write there fails with ENOSPC. Skipped where mounting is not allowed.
struct FullFs {
  TempDir dir;
  std::string mnt = dir / "full";
  bool usable = false;
  FullFs() {
    fs::create_directory(mnt);
    Result r = run_command(
        {"/usr/bin/unshare", "-m", "/bin/sh", "-c", "mount -t tmpfs -o size=64k none \"$0\"", mnt});
    usable = r.exit_code == 0;
  }
  // `probecost ARGS` with the full tmpfs mounted on mnt, which is then looked into; prints
  // "left:" and each file left there after probecost's end.
  Result run(const std::vector<std::string>& args) {
    std::string script =
        "mount -t tmpfs -o size=64k none \"$0\" && "
        "head -c 65536 /dev/zero >\"$0/filler\" 2>/dev/null; \"$@\"; rc=$?; "
        "cd \"$0\" && echo left: $(find . -mindepth 1 ! -name filler | sort) >&2; exit $rc";
    std::vector<std::string> argv = {
        "/usr/bin/timeout", "-s", "KILL", "60", "/usr/bin/unshare", "-m",
        "/bin/sh",          "-c", script, mnt};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
  }
};

TEST(Outputs, AFullFileSystemLeavesNoPartialFiles) {
  FullFs full;
  if (!full.usable) GTEST_SKIP() << "cannot mount a tmpfs here (unshare -m; mount)";
  struct Case {
    std::vector<std::string> args;
  };
  std::string m = full.mnt;
  for (const auto& args :
       {cat({PROBECOST_BIN, "trace", "-q", "-f", "json", "-b", "add3", "-o", m + "/o.json"},
            calls(3)),
        cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", m + "/t.json"}, calls(3000)),
        cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", "/dev/null", "--format", "chrome",
             "--summary-json", m + "/s.json"},
            calls(3)),
        cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "--format", "ctf", "-o", m + "/ctf"},
            calls(3))}) {
    Result r = full.run(args);
    EXPECT_EQ(r.exit_code, 1) << args[1] << " " << args.back() << ": " << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("left:\n"), std::string::npos) << r.err;
  }
}

// A trace that cannot be written at the end (/dev/full: every write ENOSPC; a full tmpfs, where
// the spool fails too) loses nothing else: the summary, with every count, is printed and
// written, then the error, exit 1.
TEST(Outputs, AFailedTraceWriteKeepsTheSummary) {
  TempDir dir;
  std::string s = dir / "s.json";
  Result r = bounded(
      cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", "/dev/full", "--summary-json", s},
          calls(3000)));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write /dev/full: No space left on device"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("3000       3000"), std::string::npos) << r.err;
  Json j = Json::parse(std::ifstream(s));
  EXPECT_EQ(j["probes"][0]["calls"], 3000u);
  EXPECT_EQ(j["probes"][0]["returns"], 3000u);
  EXPECT_NE(j["trace_error"].get<std::string>().find("No space left"), std::string::npos);

  FullFs full;
  if (!full.usable) GTEST_SKIP() << "cannot mount a tmpfs here (unshare -m; mount)";
  r = full.run(cat({PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", full.mnt + "/t.json",
                    "--summary-json", s},
                   calls(3000)));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("probe      calls"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("left:\n"), std::string::npos) << "no partial trace: " << r.err;
  j = Json::parse(std::ifstream(s));
  EXPECT_TRUE(j.contains("trace_error")) << j.dump();
}

TEST(Outputs, ARuntimeFailureOfRecordLetsTheCommandRunOn) {
  FullFs full;
  if (!full.usable) GTEST_SKIP() << "cannot mount a tmpfs here (unshare -m; mount)";
  Result plain = run_command({CALLS_TARGET, "calls", "3"});
  // The CTF metadata cannot be written: the recording fails at its start, the command runs on.
  Result r = full.run(
      cat({PROBECOST_BIN, "record", "-b", "add3", "--format", "ctf", "-o", full.mnt + "/ctf"},
          calls(3)));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is let go and runs on, untraced"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, plain.out) << "the command ran to its end, its output whole";
}

}  // namespace
}  // namespace probecost::test
