// `probecost record` never leaves a broken trace at -o PATH: the trace is written under a
// temporary (an unnamed O_TMPFILE file, or `.NAME.probecost-XXXXXX` for a CTF directory) and
// renamed to PATH once complete, so a SIGKILL at any moment leaves no file at PATH or a whole
// one; a failed write keeps the summary; -o takes what a perf or uftrace user gives it
// (/dev/null, a FIFO, t.out: Chrome JSON; a directory: CTF).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "run_capture.hpp"
#include "temp_dir.hpp"
#include "trace_harness.hpp"

namespace probecost::test {
namespace {

namespace fs = std::filesystem;

Result bounded(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/timeout", "-s", "KILL", "120"});
  return run_command(argv);
}

std::vector<std::string> record(const std::string& out, std::vector<std::string> more,
                                const std::string& calls = "3") {
  std::vector<std::string> a = {PROBECOST_BIN, "record", "-b", "add3", "-o", out};
  a.insert(a.end(), more.begin(), more.end());
  for (const char* s : {"--", CALLS_TARGET, "calls"}) a.push_back(s);
  a.push_back(calls);
  return a;
}

// Strings joined (not a + chain, on which GCC 12's -Wrestrict warns wrongly).
std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const auto& p : parts) out.append(p);
  return out;
}

Json parse_file(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);  // throws unless the whole file is JSON
}

std::size_t calls_in(const Json& chrome) {
  std::size_t n = 0;
  for (const auto& e : chrome["traceEvents"]) n += e["ph"] == "X";
  return n;
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool babeltrace_reads(const std::string& dir, std::size_t entries) {
  Result bt = run_command({"/usr/bin/babeltrace2", dir});
  std::size_t n = 0;
  for (std::size_t at = 0; (at = bt.out.find("probecost:entry", at)) != std::string::npos; ++at)
    ++n;
  return bt.exit_code == 0 && n == entries;
}

TEST(RecordPlace, EachKindOfOutput) {
  TempDir dir{"probecost-record-place"};
  // Any other name: Chrome JSON, said in a note.
  Result r = bounded(record(dir / "t.out", {}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(join({"-o ", dir / "t.out", ": Chrome JSON"})), std::string::npos) << r.err;
  EXPECT_EQ(calls_in(parse_file(dir / "t.out")), 3u);
  // A character device, and a FIFO with a reader: streams.
  EXPECT_EQ(bounded(record("/dev/null", {"-q"})).exit_code, 0);
  std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  r = bounded(record(fifo, {"-q"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) got.append(buf, n);
  EXPECT_EQ(calls_in(Json::parse(got)), 3u);
  ::close(reader);
  // An existing file is replaced whole, its mode kept; through a symlink, the link stays.
  { std::ofstream(dir / "old.json") << "before\n"; }
  ::chmod((dir / "old.json").c_str(), 0640);
  fs::create_symlink(dir / "old.json", dir / "link.json");
  ASSERT_EQ(bounded(record(dir / "link.json", {"-q"})).exit_code, 0);
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(calls_in(parse_file(dir / "old.json")), 3u);
  struct stat st;
  ASSERT_EQ(::stat((dir / "old.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // A directory: CTF, an existing empty one or a new name ending in '/'.
  fs::create_directory(dir / "ctf");
  ASSERT_EQ(bounded(record(dir / "ctf", {"-q"})).exit_code, 0);
  ASSERT_EQ(bounded(record(dir / "new/", {"-q"})).exit_code, 0);
  for (const char* d : {"ctf", "new"}) {
    EXPECT_TRUE(fs::exists(join({dir / d, "/metadata"}))) << d;
    if (fs::exists("/usr/bin/babeltrace2")) {
      EXPECT_TRUE(babeltrace_reads(dir / d, 3)) << d;
    }
  }
  // --format against the path: usage errors naming it and why, nothing run.
  r = bounded(record(dir / "ctf", {"--format", "chrome"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(join({dir / "ctf", ": is a directory"})), std::string::npos) << r.err;
  r = bounded(record(dir / "t.out", {"-f", "ctf"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(join({dir / "t.out", ": not a directory"})), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "the command must not have run";
  // No temporary left anywhere.
  EXPECT_EQ(names_in(dir.path.string()),
            (std::vector<std::string>{"ctf", "fifo", "link.json", "new", "old.json", "t.out"}));
}

// probecost record, launched, its pid.
pid_t spawn(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Polls (1 ms apart) until `done` or 60 s; false when the bound passed. A poll of a condition,
// not a sleep for an ordering: nothing notifies us when another process's file grows, and the
// test's assertion is the condition itself, whatever the machine's load.
bool poll_until(const std::function<bool()>& done) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The size of `pid`'s file open for writing only in `dir` and unlinked (the O_TMPFILE trace:
// the spools are open for reading too), or -1.
long long temp_trace_size(pid_t pid, const std::string& dir) {
  std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fds, ec)) {
    std::string link = fs::read_symlink(e.path(), ec).string();
    if (link.rfind(dir + "/", 0) != 0 || link.find("(deleted)") == std::string::npos) continue;
    std::ifstream info("/proc/" + std::to_string(pid) + "/fdinfo/" + e.path().filename().string());
    std::string key, flags;
    while (info >> key >> flags && key != "flags:") {
    }
    if ((std::stoul(flags, nullptr, 8) & 3) != 1) continue;  // O_WRONLY
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) return st.st_size;
  }
  return -1;
}

// calls_target serve's answer to "k": add3(i, 1, 2) summed.
std::string serve_sum(long k) {
  long s = 0;
  for (long i = 0; i < k; ++i) s += i + 3;
  return std::to_string(s);
}

int kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  return wait_child(pid);
}

TEST(RecordPlace, ASigkillLeavesNoChromeFileOrAWholeOne) {
  TempDir dir{"probecost-record-kill"};
  const std::string t = dir / "t.json";
  const std::string calls = "300000";
  // Killed as the trace's file exists (the run), once it holds 1 MiB (the writing), and once
  // it holds most of it.
  for (long long at : {0ll, 1ll << 20, 16ll << 20}) {
    pid_t pid = spawn(record(t, {"-q"}, calls));
    bool reached = poll_until([&] { return temp_trace_size(pid, dir.path.string()) >= at; });
    int status = kill_and_reap(pid);
    // Killed while it records, long before the trace is complete: no file at PATH.
    EXPECT_TRUE(at != 0 || !fs::exists(t));
    if (fs::exists(t)) {
      // The kill came after the rename: a whole trace.
      EXPECT_EQ(calls_in(parse_file(t)), 300000u) << at;
      fs::remove(t);
    } else {
      EXPECT_TRUE(reached) << "never saw " << at << " bytes of the trace";
      EXPECT_TRUE(WIFSIGNALED(status)) << at;
    }
    EXPECT_EQ(names_in(dir.path.string()), std::vector<std::string>{}) << at;
  }
  // Not killed: whole.
  ASSERT_EQ(bounded(record(t, {"-q"}, calls)).exit_code, 0);
  EXPECT_EQ(calls_in(parse_file(t)), 300000u);
}

TEST(RecordPlace, ASigkillOfACtfRecordLeavesOnlyATemporaryTheNextRunRemoves) {
  TempDir dir{"probecost-record-kill"};
  const std::string ctf = dir / "ctf";
  pid_t pid = spawn(record(ctf, {"-q", "-f", "ctf"}, "300000"));
  ASSERT_TRUE(poll_until([&] { return !names_in(dir.path.string()).empty(); }));
  kill_and_reap(pid);
  std::vector<std::string> left = names_in(dir.path.string());
  if (!fs::exists(ctf)) {
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].rfind(".ctf.probecost-", 0), 0u) << left[0];
    // The next run to the same PATH: the dead run's temporary goes, and says so.
    Result r = bounded(record(ctf, {"-f", "ctf"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(join({"removed ", dir / left[0]})), std::string::npos) << r.err;
  }
  EXPECT_EQ(names_in(dir.path.string()), std::vector<std::string>{"ctf"});
  EXPECT_TRUE(fs::exists(join({ctf, "/metadata"})));
}

// SIGINT and SIGTERM end a record cleanly: the trace is whole at PATH.
TEST(RecordPlace, SigintAndSigtermGiveAWholeTrace) {
  TempDir dir{"probecost-record-signal"};
  Target target(std::vector<std::string>{CALLS_TARGET, "serve"});
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string t = dir / join({"t", std::to_string(sig), ".json"});
    pid_t pid = spawn(
        {PROBECOST_BIN, "record", "-q", "-b", "add3", "-o", t, "-p", std::to_string(target.pid)});
    // Once it records (the trace's file exists and the calls are seen), the signal.
    ASSERT_TRUE(poll_until([&] { return temp_trace_size(pid, dir.path.string()) >= 0; }));
    EXPECT_EQ(target.ask("5"), serve_sum(5));
    ::kill(pid, sig);
    int status = wait_child(pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << sig << ": " << status;
    std::size_t calls = calls_in(parse_file(t));
    EXPECT_TRUE(calls == 0 || calls == 5) << sig << ": " << calls;
  }
}

}  // namespace
}  // namespace probecost::test
