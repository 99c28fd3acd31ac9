// Progress of compare, experiment and overhead on a terminal (issue 28 §4): a line on stderr as
// each run ends, nothing with -q, and standard output holding the report alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "overhead_fixture.hpp"
#include "run_capture.hpp"

using probecost::test::Json;
using probecost::test::MemFile;

namespace {

struct OnTerminal {
  int exit_code = -1;
  std::string terminal, out;  // what stderr (a terminal) and stdout (a file) got
};

// Runs probecost with stderr on a new pseudo-terminal and stdout in a file.
OnTerminal run_on_terminal(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(slave, 0);
  MemFile out;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out.fd, 1);
    ::dup2(slave, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(slave);
  OnTerminal r;
  char buf[4096];
  // EIO once probecost, the last holder of the terminal, has exited.
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) r.terminal.append(buf, n);
  int status = probecost::test::wait_child(pid);
  ::close(master);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = out.contents();
  return r;
}

}  // namespace

// One line per run as it ends, numbered of all the runs; the JSON on stdout parses whole.
TEST(Progress, CompareSaysEachRunAsItEndsOnATerminal) {
  OnTerminal r =
      run_on_terminal({"compare", "-m", "marker", "-n", "2000", "-r", "2", "-f", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.terminal;
  for (const char* line :
       {"probecost compare: [1/4] baseline run 1/2: ", "probecost compare: [2/4] marker run 1/2: ",
        "probecost compare: [3/4] baseline run 2/2: ",
        "probecost compare: [4/4] marker run 2/2: "}) {
    EXPECT_NE(r.terminal.find(line), std::string::npos) << line << "\n" << r.terminal;
  }
  Json j = Json::parse(r.out);  // throws if anything else is on stdout
  EXPECT_EQ(j["mechanisms"].size(), 2u);
}

TEST(Progress, QuietSaysNothingOnTheTerminal) {
  OnTerminal r =
      run_on_terminal({"compare", "-q", "-m", "marker", "-n", "2000", "-r", "1", "-f", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.terminal;
  EXPECT_EQ(r.terminal.find("probecost compare: ["), std::string::npos) << r.terminal;
  EXPECT_EQ(Json::parse(r.out)["mechanisms"].size(), 2u);
  r = run_on_terminal({"experiment", "markers", "--quick", "-q", "-f", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.terminal;
  EXPECT_TRUE(r.terminal.empty()) << r.terminal;
  EXPECT_EQ(Json::parse(r.out)["name"], "markers");
}

// Off a terminal compare says nothing while it runs.
TEST(Progress, CompareOffATerminalSaysNothingWhileItRuns) {
  auto r = probecost::test::run_probecost({"compare", "-m", "marker", "-n", "2000", "-r", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("probecost compare: ["), std::string::npos) << r.err;
}

// overhead: the warm-up, then each traced and untraced run, as each ends.
TEST(Progress, OverheadSaysEachRunAsItEnds) {
  std::string cal = probecost::test::fixture_calibration();
  OnTerminal r = run_on_terminal({"overhead", "-b", "probecost_event", "-r", "2", "--calibration",
                                  cal, "-f", "json", "--", EVENTS_TARGET, "1000"});
  ::unlink(cal.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.terminal;
  for (const char* line :
       {"probecost overhead: warm-up run 1/1: ", "probecost overhead: traced run 1/2: ",
        "probecost overhead: untraced run 2/2: "}) {
    EXPECT_NE(r.terminal.find(line), std::string::npos) << line << "\n" << r.terminal;
  }
  EXPECT_EQ(Json::parse(r.out)["hits"], 1000);
}
