// `probecost trace` as a user runs it, against serve_target (driven on stdin) and real
// processes: exact counts, libraries, signals, group-stop, exit, exec, fork, detach leaving
// the text as in the ELF file, and every kind of bad input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "run_capture.hpp"

namespace {

using Json = nlohmann::json;

std::string read_line(FILE* f) {
  char buf[4096];
  if (!std::fgets(buf, sizeof buf, f)) return "<eof>";
  std::string s(buf);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

pid_t spawn(const std::vector<std::string>& argv, int in, int out, int err) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) ::dup2(out, 1);
    if (err >= 0) ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// serve_target, talked to line by line.
class Target {
 public:
  Target(const std::string& path, int threads) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid = spawn({path, std::to_string(threads)}, in[0], out[1], -1);
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = ::fdopen(out[0], "r");
    ready_line = read_line(out_);
  }
  ~Target() {
    if (pid > 0 && !reaped_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::close(in_);
    std::fclose(out_);
  }
  std::string ask(const std::string& cmd) {
    std::string line = cmd + "\n";
    EXPECT_EQ(::write(in_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return read_line(out_);
  }
  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaped_ = true;
    return status;
  }
  pid_t pid = -1;
  std::string ready_line;

 private:
  int in_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

// A running `probecost trace ... -f json -o FILE`, ready once it says "tracing process".
class Trace {
 public:
  explicit Trace(std::vector<std::string> args) {
    char path[] = "/tmp/probecost-trace-XXXXXX";
    int fd = ::mkstemp(path);
    ::close(fd);
    json_path = path;
    args.insert(args.begin(), {PROBECOST_BIN, "trace", "-f", "json", "-o", json_path});
    int err[2];
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid = spawn(args, -1, -1, err[1]);
    ::close(err[1]);
    err_ = ::fdopen(err[0], "r");
    for (;;) {
      std::string line = read_line(err_);
      if (line == "<eof>") break;
      stderr_text += line + "\n";
      if (line.find("tracing process") != std::string::npos) {
        ready = true;
        break;
      }
    }
  }
  ~Trace() {
    if (!reaped_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::fclose(err_);
    ::unlink(json_path.c_str());
  }
  // Sends `sig` (0: none, it ends by itself) and returns probecost's exit code.
  int finish(int sig = SIGINT) {
    if (sig) ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    reaped_ = true;
    for (std::string line; (line = read_line(err_)) != "<eof>";) stderr_text += line + "\n";
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  Json report() const {
    std::ifstream in(json_path);
    return Json::parse(in);
  }
  pid_t pid = -1;
  bool ready = false;
  std::string json_path, stderr_text;

 private:
  FILE* err_ = nullptr;
  bool reaped_ = false;
};

// The `n` bytes at `addr` in the live process equal those of the ELF file mapped there.
void expect_text_matches_file(pid_t pid, std::uint64_t addr, std::size_t n = 16) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    std::uint64_t start, end, offset;
    char perms[8], path[512] = "";
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*u %511s", &start, &end, perms, &offset,
                    path) < 4 ||
        addr < start || addr >= end) {
      continue;
    }
    ASSERT_NE(path[0], '\0') << line;
    std::vector<char> live(n), file(n);
    int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY);
    ASSERT_EQ(::pread(mem, live.data(), n, static_cast<off_t>(addr)), static_cast<ssize_t>(n));
    ::close(mem);
    int elf = ::open(path, O_RDONLY);
    ASSERT_EQ(::pread(elf, file.data(), n, static_cast<off_t>(addr - start + offset)),
              static_cast<ssize_t>(n));
    ::close(elf);
    EXPECT_EQ(live, file) << "text at 0x" << std::hex << addr << " differs from " << path;
    return;
  }
  FAIL() << "no mapping holds 0x" << std::hex << addr;
}

std::uint64_t address_of(const Json& probe) {
  return std::stoull(probe["address"].get<std::string>(), nullptr, 16);
}

char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  return close == std::string::npos ? '?' : stat[close + 2];
}

// Polls a condition the kernel changes asynchronously (a process state), up to 10 s.
template <typename F>
bool eventually(F&& f) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!f()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    sched_yield();
  }
  return true;
}

class TraceTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(TraceTest, AttachCountsExactlyWhatTheProcessCountedThenDetachesClean) {
  Target target(GetParam(), 4);
  ASSERT_EQ(target.ready_line, "ready " + std::to_string(target.pid));
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // The four threads are created while traced, and each calls the site 2500 times.
  ASSERT_EQ(target.ask("go 2500"), "calls=10000");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["pid"], target.pid);
  ASSERT_EQ(r["probes"].size(), 1u);
  EXPECT_EQ(r["probes"][0]["hits"], 10000);
  EXPECT_EQ(r["probes"][0]["threads"], 4);
  EXPECT_EQ(r["probes"][0]["symbol"], "probecost_test_site");
  std::uint64_t per_thread = 0;
  for (const auto& t : r["threads"]) per_thread += t["hits"].get<std::uint64_t>();
  EXPECT_EQ(per_thread, 10000u);
  EXPECT_NE(r["ending"].get<std::string>().find("interrupted"), std::string::npos);
  // Detached: the text is the ELF file's again, and the process runs on, untraced.
  expect_text_matches_file(target.pid, address_of(r["probes"][0]));
  EXPECT_EQ(target.ask("go 10"), "calls=10040");
  EXPECT_EQ(target.ask("exit"), "bye");
  int status = target.wait_exit();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(TraceTest, ProbesASharedLibraryByModuleAndSymbol) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "libserve_lib.so:probecost_lib_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("lib 700"), "lib=700");
  ASSERT_EQ(trace.finish(SIGTERM), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 700);
  std::string module = r["probes"][0]["module"];
  EXPECT_NE(module.find("libserve_lib.so"), std::string::npos) << module;
  expect_text_matches_file(target.pid, address_of(r["probes"][0]));
  EXPECT_EQ(target.ask("lib 1"), "lib=701");
}

TEST_P(TraceTest, SignalsReachTheTraceeAndGroupStopWorks) {
  Target target(GetParam(), 2);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("signals 40"), "signals=40");
  // SIGSTOP from a shell stops the process as it would untraced; SIGCONT lets it go on.
  ASSERT_EQ(::kill(target.pid, SIGSTOP), 0);
  EXPECT_TRUE(
      eventually([&] { return proc_state(target.pid) == 'T' || proc_state(target.pid) == 't'; }));
  ASSERT_EQ(::kill(target.pid, SIGCONT), 0);
  EXPECT_EQ(target.ask("go 100"), "calls=200");
  ASSERT_EQ(trace.finish(SIGHUP), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 200);
  EXPECT_EQ(target.ask("signals 2"), "signals=42");
}

TEST_P(TraceTest, ATraceeThatExitsEndsTheTraceWithItsCounts) {
  Target target(GetParam(), 3);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 300"), "calls=900");
  ASSERT_EQ(target.ask("exit"), "bye");
  target.wait_exit();  // probecost reports the exit; the real parent reaps
  ASSERT_EQ(trace.finish(0), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 900);
  EXPECT_NE(r["ending"].get<std::string>().find("exited"), std::string::npos) << r["ending"];
}

TEST_P(TraceTest, ATraceeThatExecsEndsTheTraceWithItsCounts) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("go 50"), "calls=50");
  ASSERT_EQ(target.ask("exec"), "exec");
  ASSERT_EQ(trace.finish(0), 0) << trace.stderr_text;
  Json r = trace.report();
  EXPECT_EQ(r["probes"][0]["hits"], 50);
  EXPECT_NE(r["ending"].get<std::string>().find("exec"), std::string::npos) << r["ending"];
  int status = target.wait_exit();  // /bin/true ran, untraced
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(TraceTest, AForkedChildDoesNotInheritLiveBreakpoints) {
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  // Without the int3 bytes removed, the child would die of SIGTRAP at its first call.
  EXPECT_EQ(target.ask("fork 100"), "child=exited 0");
  EXPECT_EQ(target.ask("go 10"), "calls=10");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 10);
}

TEST_P(TraceTest, AVforkChildSharingTheTextRunsThroughIt) {
  // posix_spawn clones with CLONE_VM|CLONE_VFORK: the child runs in the parent's memory, int3
  // bytes included, until its exec; it is traced until then.
  Target target(GetParam(), 1);
  Trace trace({"-p", std::to_string(target.pid), "-b", "probecost_test_site"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("spawn"), "spawned=exited 0");
  EXPECT_EQ(target.ask("go 5"), "calls=5");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(trace.report()["probes"][0]["hits"], 5);
  EXPECT_EQ(target.ask("spawn"), "spawned=exited 0");
}

TEST_P(TraceTest, ASymbolInTwoLibrariesIsAmbiguousUnlessAllMatches) {
  Target target(GetParam(), 1);
  std::string pid = std::to_string(target.pid);
  auto r = probecost::test::run_command(
      {PROBECOST_BIN, "trace", "-q", "-p", pid, "-b", "probecost_lib_site"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("is ambiguous"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libserve_lib.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("libserve_lib2.so"), std::string::npos) << r.err;
  Trace trace({"-p", pid, "-b", "probecost_lib_site", "--all-matches"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  EXPECT_EQ(target.ask("lib 30"), "lib=30");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json report = trace.report();
  ASSERT_EQ(report["probes"].size(), 2u);
  std::uint64_t in_first = 0, in_second = 0;
  for (const auto& p : report["probes"]) {
    std::string module = p["module"];
    (module.find("libserve_lib2.so") != std::string::npos ? in_second : in_first) +=
        p["hits"].get<std::uint64_t>();
  }
  EXPECT_EQ(in_first, 30u);  // the program's calls bind to libserve_lib.so's definition
  EXPECT_EQ(in_second, 0u);
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, TraceTest,
                         ::testing::Values(std::string(SERVE_PIE), std::string(SERVE_NOPIE)),
                         [](const auto& info) {
                           return info.param.find("nopie") != std::string::npos ? "NonPie" : "Pie";
                         });

TEST(TraceCommand, LaunchedCommandCountsAndKeepsItsOutput) {
  using probecost::test::run_command;
  auto untraced = run_command({LOOP_TARGET_PIE, "500", "2"});
  char path[] = "/tmp/probecost-trace-XXXXXX";
  ::close(::mkstemp(path));
  auto traced = run_command({PROBECOST_BIN, "trace", "-q", "-b", "probecost_test_site", "-f",
                             "json", "-o", path, "--", LOOP_TARGET_PIE, "500", "2"});
  EXPECT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_EQ(traced.out, untraced.out);
  std::ifstream in(path);
  Json r = Json::parse(in);
  ::unlink(path);
  EXPECT_EQ(r["probes"][0]["hits"], 1000);
  EXPECT_EQ(r["command_end"], "exited with status 0");
}

TEST(TraceCommand, KillOnExitEndsALaunchedCommand) {
  char path[] = "/tmp/probecost-trace-XXXXXX";
  ::close(::mkstemp(path));
  auto r = probecost::test::run_command({PROBECOST_BIN, "trace", "-q", "--kill-on-exit",
                                         "--duration", "0.3", "-b", "libc.so.6:clock_nanosleep",
                                         "-f", "json", "-o", path, "--", "/bin/sleep", "60"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(path);
  Json j = Json::parse(in);
  ::unlink(path);
  EXPECT_EQ(j["ending"], "--duration reached");
  EXPECT_EQ(j["command_end"], "killed by probecost (--kill-on-exit)");
  EXPECT_EQ(j["probes"][0]["hits"], 1);  // sleep's one clock_nanosleep
}

TEST(TraceCommand, ListsSymbolsByGlob) {
  auto r = probecost::test::run_command(
      {PROBECOST_BIN, "trace", "--list", "probecost_*", "--", SERVE_PIE, "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("probecost_test_site"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probecost_lib_site libserve_lib.so"), std::string::npos) << r.out;
}

TEST(TraceCommand, StacksNameTheCallers) {
  Target target(SERVE_PIE, 1);
  Trace trace(
      {"-p", std::to_string(target.pid), "-b", "libserve_lib.so:probecost_lib_site", "--stacks"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  ASSERT_EQ(target.ask("lib 20"), "lib=20");
  ASSERT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  Json r = trace.report();
  const auto& stacks = r["stacks"]["libserve_lib.so:probecost_lib_site"];
  ASSERT_EQ(stacks.size(), 1u) << r.dump();
  EXPECT_EQ(stacks[0]["count"], 20);
  std::string frames = stacks[0]["frames"].dump();
  EXPECT_NE(frames.find("probecost_lib_site in libserve_lib.so"), std::string::npos) << frames;
  EXPECT_NE(frames.find("main"), std::string::npos) << frames;
}

// Bad input: a clear message, exit 2 (or 1), and the target untouched.
namespace {

struct Outcome {
  int code;
  std::string err;
};

Outcome trace_expecting_failure(std::vector<std::string> args) {
  args.insert(args.begin(), {PROBECOST_BIN, "trace", "-q"});
  auto r = probecost::test::run_command(args);
  return {r.exit_code, r.err};
}

void expect_error(const Outcome& o, int code, const std::string& text) {
  EXPECT_EQ(o.code, code) << o.err;
  EXPECT_NE(o.err.find(text), std::string::npos) << "stderr: " << o.err;
}

pid_t free_pid() {
  std::ifstream in("/proc/sys/kernel/pid_max");
  pid_t max = 32768;
  in >> max;
  for (pid_t p = max - 1; p > 1; --p) {
    if (::kill(p, 0) < 0 && errno == ESRCH) return p;
  }
  return -1;
}

}  // namespace

TEST(TraceErrors, NoSuchPidKernelThreadZombie) {
  pid_t none = free_pid();
  expect_error(trace_expecting_failure({"-p", std::to_string(none), "-b", "main"}), 2,
               "no process with PID " + std::to_string(none));
  expect_error(trace_expecting_failure({"-p", "2", "-b", "main"}), 2, "is a kernel thread");
  pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  ASSERT_TRUE(eventually([&] { return proc_state(zombie) == 'Z'; }));
  expect_error(trace_expecting_failure({"-p", std::to_string(zombie), "-b", "main"}), 2,
               "is a zombie");
  ::waitpid(zombie, nullptr, 0);
}

TEST(TraceErrors, AProcessTracedByAnotherTracer) {
  Target target(SERVE_PIE, 1);
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, target.pid, nullptr, nullptr), 0);
  expect_error(trace_expecting_failure({"-p", std::to_string(target.pid), "-b", "main"}), 2,
               "Operation not permitted");
  // PTRACE_DETACH wants a ptrace-stop: interrupt first.
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, target.pid, nullptr, nullptr), 0);
  ASSERT_EQ(::waitpid(target.pid, nullptr, __WALL), target.pid);
  ASSERT_EQ(::ptrace(PTRACE_DETACH, target.pid, nullptr, nullptr), 0);
  EXPECT_EQ(target.ask("go 1"), "calls=1");
}

TEST(TraceErrors, BadProbesLeaveTheTargetUntouched) {
  Target target(SERVE_PIE, 1);
  std::string pid = std::to_string(target.pid);
  expect_error(trace_expecting_failure({"-p", pid, "-b", "no_such_function"}), 2,
               "no function symbol 'no_such_function' in process " + pid);
  expect_error(trace_expecting_failure({"-p", pid, "-b", "probecost_long_insn+3"}), 2,
               "is inside the instruction at");
  // The stack: mapped, not executable.
  std::ifstream maps("/proc/" + pid + "/maps");
  std::string stack;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("[stack]") != std::string::npos) stack = "0x" + line.substr(0, line.find('-'));
  }
  expect_error(trace_expecting_failure({"-p", pid, "-b", stack}), 2, "is not executable");
  expect_error(trace_expecting_failure({"-p", pid, "-b", "libserve_lib.so:"}), 2, "bad probe");
  // Nothing was written: the text is the file's, and the program works.
  Trace probe({"-p", pid, "-b", "probecost_test_site", "-b", "no_such_function"});
  EXPECT_FALSE(probe.ready);
  EXPECT_EQ(probe.finish(0), 2);
  EXPECT_EQ(target.ask("go 3"), "calls=3");
}

TEST(TraceErrors, StrippedBinaryAndNotElf) {
  {
    Target target(SERVE_STRIPPED, 1);
    ASSERT_EQ(target.ready_line, "ready " + std::to_string(target.pid));
    expect_error(
        trace_expecting_failure({"-p", std::to_string(target.pid), "-b", "probecost_test_site"}), 2,
        "stripped");
    // .dynsym is still there for what the executable imports from its library.
    EXPECT_EQ(target.ask("go 2"), "calls=2");
  }
  char path[] = "/tmp/probecost-notelf-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_EQ(::write(fd, "not an ELF file\n", 16), 16);
  ::fchmod(fd, 0755);
  ::close(fd);
  expect_error(trace_expecting_failure({"-b", "main", "--", path}), 1, "Exec format error");
  ::unlink(path);
  expect_error(trace_expecting_failure({"-b", "main", "--", "no-such-program-here"}), 2,
               "no such program in PATH");
  expect_error(trace_expecting_failure({"-b", "main"}), 2, "nothing to trace");
  expect_error(trace_expecting_failure({"-p", "1", "-b", "main", "--", "/bin/true"}), 2,
               "not both");
}
