// `probecost trace` given bad input: a clear message, exit 2 (or 1), and the target untouched.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "run_capture.hpp"
#include "trace_harness.hpp"

using namespace probecost::test;

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

TEST(TraceErrors, AThreadIdNamesItsProcess) {
  // A thread of this test process, parked on a pipe until the check is done.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::atomic<pid_t> tid{0};
  std::thread parked([&] {
    tid = ::gettid();
    char c;
    [[maybe_unused]] ssize_t n = ::read(p[0], &c, 1);
  });
  ASSERT_TRUE(eventually([&] { return tid.load() != 0; }));
  std::string self = std::to_string(::getpid());
  expect_error(trace_expecting_failure({"-p", std::to_string(tid.load()), "-b", "main"}), 2,
               "PID " + std::to_string(tid.load()) + " is a thread of process " + self +
                   "; give the process: -p " + self);
  ASSERT_EQ(::write(p[1], "x", 1), 1);
  parked.join();
  ::close(p[0]);
  ::close(p[1]);
}

TEST(TraceErrors, AProcessTracedByAnotherTracer) {
  Target target(SERVE_PIE, 1);
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, target.pid, nullptr, nullptr), 0);
  // The kernel's refusal is a runtime failure (exit 1), not bad usage.
  expect_error(trace_expecting_failure({"-p", std::to_string(target.pid), "-b", "main"}), 1,
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

// The engine's refusals (CannotTrace for the process, CannotProbe for a probe) are bad usage for
// record as for trace: exit 2, the reason said, no file written, the target untouched.
TEST(TraceErrors, RecordRefusesAsTraceDoes) {
  std::string out = "/tmp/probecost-refused-" + std::to_string(::getpid()) + ".json";
  auto record = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {PROBECOST_BIN, "record", "-q", "-o", out});
    auto r = probecost::test::run_command(args);
    return Outcome{r.exit_code, r.err};
  };
  pid_t none = free_pid();
  expect_error(record({"-p", std::to_string(none), "-b", "main"}), 2,
               "no process with PID " + std::to_string(none));
  Target target(SERVE_PIE, 1);
  std::string pid = std::to_string(target.pid);
  expect_error(record({"-p", pid, "-b", "no_such_function"}), 2,
               "no function symbol 'no_such_function' in process " + pid);
  struct stat st;
  EXPECT_NE(::stat(out.c_str(), &st), 0) << out;
  EXPECT_EQ(target.ask("go 1"), "calls=1");
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
