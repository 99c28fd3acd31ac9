// Issue 7, item 9: input and output checks that happen before anything runs, and errors that
// are never silent. Each command with -o, each count option, each command's stray arguments.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "run_capture.hpp"

using probecost::test::Result;
using probecost::test::run_command;

namespace {

Result run_probecost(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  return run_command(args);
}

void expect_exit(const std::vector<std::string>& args, int code, const std::string& message) {
  Result r = run_probecost(args);
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr was: " << r.err;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A path in a fresh directory, removed at the end of the test.
struct TempPath {
  TempPath() {
    char dir[] = "/tmp/probecost-cli-XXXXXX";
    this->dir = ::mkdtemp(dir);
    path = this->dir + "/report";
  }
  ~TempPath() {
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  }
  std::string dir, path;
};

// Each command with -o, with the smallest arguments that would run it.
const std::vector<std::vector<std::string>>& commands_with_output() {
  static const std::vector<std::vector<std::string>> all = {
      {"overhead", "--cost", "2.01us"},
      {"compare", "-m", "marker", "-n", "2000", "-r", "1"},
      {"bench", "step-over", "-k", "nop", "-s", "auto", "-n", "100", "-r", "1"},
      {"trace", "-q", "-b", "probecost_test_site", "--", LOOP_TARGET_PIE, "10", "1"},
  };
  return all;
}

// `args` with "-o FILE" added among the options (before a trace's "--").
std::vector<std::string> with_output(std::vector<std::string> args, const std::string& file) {
  auto at = std::find(args.begin(), args.end(), "--");
  args.insert(at, {"-o", file});
  return args;
}

}  // namespace

TEST(CliChecks, AnUnwritableOutputFailsBeforeAnythingRuns) {
  for (const auto& args : commands_with_output()) {
    for (const char* bad : {"/nonexistent/x", "/tmp", "/proc/version"}) {
      expect_exit(with_output(args, bad), 2,
                  "cannot write the report to '" + std::string(bad) + "'");
    }
  }
}

TEST(CliChecks, TraceWithAnUnwritableOutputLaunchesNothing) {
  TempPath t;
  std::string touched = t.dir + "/launched";
  expect_exit({"trace", "-o", "/tmp", "-b", "main", "--", "/usr/bin/touch", touched}, 2,
              "cannot write the report to '/tmp'");
  EXPECT_FALSE(exists(touched)) << "the command ran although the report could not be written";
  ::unlink(touched.c_str());
}

// Issue 15 item 8: a file of the kernel's (root may open /proc/version for writing; every write
// then fails) is refused before anything runs, not found out after the whole trace.
TEST(CliChecks, AReportIntoAKernelFileIsRefusedBeforeAnythingRuns) {
  TempPath t;
  std::string touched = t.dir + "/launched";
  expect_exit({"trace", "-o", "/proc/version", "-b", "main", "--", "/usr/bin/touch", touched}, 2,
              "cannot write the report to '/proc/version': it is a file of the kernel's proc");
  EXPECT_FALSE(exists(touched)) << "the command ran although the report could not be written";
  // A writable one would take the report as a setting.
  const char* setting = "/sys/kernel/mm/transparent_hugepage/enabled";
  if (exists(setting)) {
    expect_exit({"overhead", "--cost", "1us", "-o", setting}, 2,
                "file of the kernel's sysfs file system");
  }
  ::unlink(touched.c_str());
}

// Issue 15 item 8: numbers beyond any meaning are refused with the bounds, exit 2, before
// anything runs (--duration 1e20 ran for ever; --cost 1e30us printed 40-digit shares).
TEST(CliChecks, OutOfBoundsNumbersAreRefusedWithTheirBounds) {
  TempPath t;
  std::string touched = t.dir + "/launched";
  for (const char* d : {"1e20", "inf", "nan", "0", "-1", "0.0001", "2592001"}) {
    expect_exit({"trace", "-q", "--duration", d, "-b", "main", "--", "/usr/bin/touch", touched}, 2,
                "bad --duration '" + std::string(d) + "': want seconds from 0.001 to 2592000");
    EXPECT_FALSE(exists(touched)) << d;
    expect_exit({"overhead", "-p", "1", "-b", "main", "--duration", d}, 2,
                "bad --duration '" + std::string(d) + "'");
  }
  // Issue 28 item 6: a time with its unit, as bpftrace and systemd write them; a unit alone, an
  // unknown one or a space inside is refused like any other bad time.
  for (const char* d : {"5x", "ms", "1 s", "1e-4s", "31d", "721h"}) {
    expect_exit({"trace", "-q", "--duration", d, "-b", "main", "--", "/usr/bin/touch", touched}, 2,
                "bad --duration '" + std::string(d) + "': want seconds from 0.001 to 2592000");
    EXPECT_FALSE(exists(touched)) << d;
  }
  for (const char* d : {"500ms", "0.2s", "1m", "1h"}) {
    Result r = run_probecost(
        {"trace", "-q", "--duration", d, "-b", "libc.so.6:malloc", "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 0) << d << ": " << r.err;
  }
  expect_exit({"overhead", "--cost", "1e30us", "--rate", "1e30"}, 2,
              "bad cost '1e30us': want a time per event from 0.001ns to 1s");
  expect_exit({"overhead", "--cost", "0.0001ns"}, 2, "bad cost '0.0001ns'");
  expect_exit({"overhead", "--cost", "2us", "--rate", "1e30"}, 2,
              "bad rate '1e30': want events per second from 0.001 to 10G");
  expect_exit({"overhead", "--cost", "2us", "--rate", "11G"}, 2, "bad rate '11G'");
  expect_exit({"compare", "-m", "marker", "--rate", "1e30"}, 2, "bad rate '1e30'");
  // The bounds themselves are fine.
  Result r = run_probecost({"overhead", "--cost", "1s", "--rate", "10G"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("10,000,000,000 events/s x 1.00 s/event"), std::string::npos) << r.out;
}

// Issue 28 item 6: every --duration (trace, record, overhead) takes 1s, 500ms, 2m as it takes
// seconds, and refuses the same bad ones.
TEST(CliChecks, EveryDurationTakesAUnit) {
  TempPath t;
  for (const char* d : {"1s", "500ms", "2m"}) {
    Result r = run_probecost({"record", "-q", "-d", d, "-b", "libc.so.6:malloc", "-o",
                              t.dir + "/t.json", "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 0) << d << ": " << r.err;
    r = run_probecost({"trace", "-q", "-d", d, "-b", "libc.so.6:malloc", "--", "/bin/true"});
    EXPECT_EQ(r.exit_code, 0) << d << ": " << r.err;
  }
  // overhead -p: the duration is taken, and the PID (a child already reaped) is what fails.
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ::waitpid(gone, nullptr, 0);
  for (const char* d : {"1s", "500ms", "2m"}) {
    expect_exit({"overhead", "-p", std::to_string(gone), "-b", "main", "-d", d}, 2,
                "no process with PID " + std::to_string(gone));
  }
  for (const char* cmd : {"record", "overhead"}) {
    expect_exit(
        {cmd, "-p", std::to_string(gone), "-b", "main", "-o", t.dir + "/u.json", "-d", "5x"}, 2,
        "bad --duration '5x': want seconds from 0.001 to 2592000");
  }
}

TEST(CliChecks, AFailedWriteIsAnError) {
  for (const auto& args : commands_with_output()) {
    Result r = run_probecost(with_output(args, "/dev/full"));
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  }
}

TEST(CliChecks, AReportIsWrittenAndAFailedRunLeavesNoFile) {
  TempPath t;
  Result r = run_probecost({"overhead", "--cost", "2.01us", "-o", t.path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(t.path);
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("150.7% of a CPU"), std::string::npos) << line;
  ::unlink(t.path.c_str());
  // A run that fails after the file was opened does not leave an empty report behind.
  r = run_probecost(
      {"trace", "-q", "-o", t.path, "-b", "no_such_symbol", "--", LOOP_TARGET_PIE, "1", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(exists(t.path));
}

TEST(CliChecks, NegativeCountsAreRefused) {
  const std::vector<std::vector<std::string>> cases = {
      {"compare", "-t", "-1"},
      {"compare", "--threads", "-1"},
      {"compare", "-n", "-1"},
      {"compare", "-r", "-1"},
      {"compare", "-r", "0"},
      {"compare", "-t", "1.5"},
      {"bench", "step-over", "-n", "-1"},
      {"bench", "step-over", "-t", "-1"},
      {"bench", "step-over", "-r", "-1"},
      {"trace", "--stack-depth", "-1", "-p", "1", "-b", "x"},
      {"trace", "--top", "-1", "-p", "1", "-b", "x"},
  };
  for (const auto& args : cases) {
    Result r = run_probecost(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << " " << args[2] << ": " << r.err;
    EXPECT_NE(r.err.find("want a whole number"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("4294967295"), std::string::npos) << r.err;
  }
}

TEST(CliChecks, BadWorkIsRefusedByProbecostItself) {
  for (const char* w : {"memcpy:0", "memcpy:-1", "memcpy:abc", "memcpy:", "memcpy", "copy:8"}) {
    Result r = run_probecost({"compare", "-w", w, "--inferior", "/no/such/inferior"});
    EXPECT_EQ(r.exit_code, 2) << w << ": " << r.err;
    // Named as probecost's own error, before it looks for the inferior.
    EXPECT_NE(r.err.find("probecost compare: bad --work '" + std::string(w) + "'"),
              std::string::npos)
        << r.err;
  }
}

TEST(CliChecks, StrayArgumentsAreErrors) {
  expect_exit({"compare", "foo"}, 2, "unexpected argument 'foo'");
  expect_exit({"overhead", "--cost", "1us", "bar"}, 2, "unexpected argument 'bar'");
  expect_exit({"bench", "step-over", "extra"}, 2, "unexpected argument 'extra'");
  expect_exit({"trace", "-p", "1", "stray", "-b", "main"}, 2, "unexpected argument 'stray'");
  // After "--" everything is the command's.
  Result r = run_probecost(
      {"trace", "-q", "-b", "probecost_test_site", "--", LOOP_TARGET_PIE, "5", "1", "--pause"});
  EXPECT_NE(r.exit_code, 2) << r.err;
}

// A figure that is noise (here: too few iterations to be a cost) is a warning, exit 0: the
// measurement completed, every hit counted. --strict makes it exit 1 (issue 28 §4).
TEST(CliChecks, CompareWarnsOnUntrustworthyFiguresAndExits1OnlyWhenStrict) {
  Result strict = run_probecost({"compare", "-m", "marker", "-n", "1", "-r", "1", "--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.err;
  EXPECT_NE(strict.err.find("some figures are noise"), std::string::npos) << strict.err;
  Result r = run_probecost({"compare", "-m", "marker", "-n", "1", "-r", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("WARNING marker:"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: some figures are noise"), std::string::npos) << r.err;
  // The rows that are ~0 by design are said to be so, and not warned about.
  EXPECT_NE(r.out.find("baseline: ~0 by design"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("WARNING baseline"), std::string::npos) << r.out;
}

TEST(CliChecks, AnEarlyStopSignalNeverKillsProbecostUnexplained) {
  // SIGTERM sent while the child has it blocked stays pending across the exec; probecost must
  // take it with its handler (not die of it) and say what happened.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    probecost::test::MemFile out, err;
    pid_t pid = ::fork();
    if (pid == 0) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, sig);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      ::kill(::getpid(), sig);
      ::dup2(out.fd, 1);
      ::dup2(err.fd, 2);
      ::execl(PROBECOST_BIN, PROBECOST_BIN, "trace", "-q", "-b", "probecost_test_site", "--",
              LOOP_TARGET_PIE, "100", "1", nullptr);
      ::_exit(127);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_FALSE(WIFSIGNALED(status)) << "probecost died of signal " << WTERMSIG(status);
    std::string all = out.contents() + err.contents();
    EXPECT_NE(all.find("interrupted"), std::string::npos) << all;
  }
}
