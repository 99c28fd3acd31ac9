// probecost as a user runs it: exit codes, messages, and the reports' content.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"

using probecost::test::Result;
using probecost::test::run_command;

namespace {

Result run_probecost(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  return run_command(args);
}

void expect_usage_error(const std::vector<std::string>& args, const std::string& message) {
  Result r = run_probecost(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr was: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Short runs on a busy machine can be untrustworthy (a spread wider than the median): then
// compare says so, with a problem in the row marked noisy, and a warning on stderr, but exit 0:
// the measurement completed. Hit counts must be exact either way.
void expect_exit_code_matches_problems(const Result& r, const nlohmann::json& j) {
  bool problems = false;
  for (const auto& m : j["mechanisms"]) {
    if (m["problem"].is_null()) continue;
    problems = true;
    std::string why = m["problem"];
    EXPECT_TRUE(why.find("spread") != std::string::npos ||
                why.find("negative") != std::string::npos)
        << m["name"] << ": " << why;
    EXPECT_TRUE(m["noisy"].get<bool>()) << m["name"] << ": " << why;
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("some figures are noise") != std::string::npos, problems) << r.err;
}

// Exit 0, whether or not a figure was judged noise (a warning on stderr then).
void expect_measured(const Result& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace

TEST(CliErrors, UnknownMechanism) {
  expect_usage_error({"compare", "-m", "kprobe"}, "unknown mechanism 'kprobe'");
}
TEST(CliErrors, BadRate) {
  expect_usage_error({"compare", "--rate", "12x"}, "bad rate '12x'");
}
TEST(CliErrors, ZeroIterations) {
  expect_usage_error({"compare", "--iterations", "0"}, "bad --iterations '0'");
}
TEST(CliErrors, InferiorMissing) {
  expect_usage_error({"compare", "--inferior", "/no/such/inferior"},
                     "'/no/such/inferior' is missing");
}
TEST(CliErrors, BadPlacementAndFormat) {
  expect_usage_error({"compare", "--placement", "moon"}, "bad placement 'moon'");
  expect_usage_error({"compare", "-f", "xml"}, "bad format 'xml'");
}
TEST(CliErrors, UnknownCommandAndOption) {
  EXPECT_EQ(run_probecost({"frobnicate"}).exit_code, 2);
  expect_usage_error({"compare", "--frob"}, "unrecognised option '--frob'");
  expect_usage_error({"overhead"}, "--cost is required for the arithmetic alone");
}

// `probecost help COMMAND` is `probecost COMMAND --help`, for every command; every option listed
// says what it is for.
TEST(CliHelp, EveryCommandHasHelpAndEveryOptionADescription) {
  for (const char* command :
       {"trace", "compare", "overhead", "experiment", "report", "restore", "bench"}) {
    Result help = run_probecost({"help", command});
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
    EXPECT_NE(help.out.find(std::string("probecost ") + command), std::string::npos) << help.out;
    Result dash = run_probecost({command, "--help"});
    EXPECT_EQ(dash.exit_code, 0) << command << ": " << dash.err;
    EXPECT_EQ(dash.out, help.out) << command;
    // An option line ("  --name arg", "  -x [ --name ] arg") with nothing after it.
    std::istringstream lines(help.out);
    for (std::string line; std::getline(lines, line);) {
      bool option = line.rfind("  -", 0) == 0;
      bool bare =
          line.find_last_not_of(' ') < line.find("arg") + 3 && line.find("arg") != line.npos;
      EXPECT_FALSE(option && bare) << command << ": '" << line << "'";
    }
  }
  EXPECT_EQ(run_probecost({"help", "experiment"}).out.find("--name"), std::string::npos);
  Result none = run_probecost({"help", "frobnicate"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("unknown command 'frobnicate'"), std::string::npos) << none.err;
}

TEST(Overhead, The2006Arithmetic) {
  Result r = run_probecost({"overhead", "--cost", "2.01us", "--rate", "749994"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("150.7% of a CPU"), std::string::npos) << r.out;
  r = run_probecost({"overhead", "--cost", "220ns", "--rate", "749994", "-f", "json"});
  auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["extrapolation"][0]["cpu_percent"].get<double>(), 16.5, 0.01);
}

TEST(Compare, JsonReportHasEveryMechanismWithExactHits) {
  Result r = run_probecost(
      {"compare", "-n", "3000", "-r", "2", "-f", "json", "--rate", "750k", "--rate", "1.2M"});
  auto j = nlohmann::json::parse(r.out);
  expect_exit_code_matches_problems(r, j);
  for (const char* key : {"cpu_model", "kernel", "tsc_hz", "cpus"}) {
    EXPECT_TRUE(j["machine"].contains(key)) << key;
  }
  EXPECT_EQ(j["config"]["placement"], "same-cpu");
  std::vector<std::string> names;
  for (const auto& m : j["mechanisms"]) {
    names.push_back(m["name"]);
    if (!m["skipped"].is_null()) continue;  // the uprobe rows, where the kernel refuses them
    EXPECT_EQ(m["hits"], 3000) << m["name"];
    EXPECT_EQ(m["iterations"], 3000);
    EXPECT_TRUE(m["hits_exact"].get<bool>());
    EXPECT_TRUE(m["per_hit_ns"].contains("median"));
    EXPECT_TRUE(m["per_hit_ns"].contains("min"));
    EXPECT_TRUE(m["per_hit_ns"].contains("max"));
    EXPECT_TRUE(m["per_hit_cycles"].contains("median"));
    EXPECT_TRUE(m["cpu_ns_per_hit"].contains("median"));
    ASSERT_EQ(m["extrapolation"].size(), 2u);
    EXPECT_EQ(m["extrapolation"][1]["rate_per_s"], 1.2e6);
    double cost = m["cpu_ns_per_hit"]["median"];
    EXPECT_NEAR(m["extrapolation"][0]["cpu_percent"].get<double>(), 750000 * cost / 1e7, 1e-6);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"baseline", "marker-off", "marker", "int3-signal",
                                      "int3-ptrace", "int3-ptrace-fast", "jump", "record", "uprobe",
                                      "uprobe-nop5", "uprobe-push", "ptrace-floor"}));
}

TEST(Compare, PtraceCountsEveryHitOfFourThreads) {
  Result r =
      run_probecost({"compare", "-m", "int3-ptrace,int3-signal,marker,int3-ptrace-fast", "-m",
                     "ptrace-floor,jump,record", "-t", "4", "-n", "2000", "-r", "1", "-f", "json"});
  auto j = nlohmann::json::parse(r.out);
  expect_exit_code_matches_problems(r, j);
  ASSERT_EQ(j["mechanisms"].size(), 8u);
  for (const auto& m : j["mechanisms"]) EXPECT_EQ(m["hits"], 8000) << m["name"];
}

// Issue 24 item 6: the rings and the trampolines are in the program's page tables before its
// timed loop starts, so no hit pays for a page fault: the loop takes no more than it does
// untraced (the inferior counts its loop's with getrusage(RUSAGE_THREAD): 2 or 3 of its own,
// its first calls), and the text report says them.
TEST(Compare, JumpAndRecordTakeNoPageFaultInTheLoop) {
  Result r =
      run_probecost({"compare", "-m", "jump,record", "-n", "200000", "-r", "1", "-f", "json"});
  auto j = nlohmann::json::parse(r.out);
  expect_exit_code_matches_problems(r, j);
  ASSERT_EQ(j["mechanisms"].size(), 3u);
  const auto untraced = j["mechanisms"][0]["tracee_minor_faults"].get<int>();
  EXPECT_LE(untraced, 8);
  for (const auto& m : j["mechanisms"]) {
    EXPECT_EQ(m["hits"], 200000) << m["name"];
    EXPECT_LE(m["tracee_minor_faults"].get<int>(), untraced) << m["name"];
  }
  Result text = run_probecost({"compare", "-m", "record", "-n", "20000", "-r", "1"});
  EXPECT_NE(text.out.find("minor page faults in its timed loop (the most of any run): baseline "),
            std::string::npos)
      << text.out;
}

// The kernel's uprobe counts every hit of every thread, on each kind of first instruction, and
// the report says how the kernel runs the site.
TEST(Compare, UprobeCountsEveryHitOfThreeThreads) {
  Result r = run_probecost({"compare", "-m", "uprobe,uprobe-nop5,uprobe-push", "-t", "3", "-n",
                            "1500", "-r", "1", "-f", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["mechanisms"].size(), 4u);
  for (const auto& m : j["mechanisms"]) {
    if (!m["skipped"].is_null()) GTEST_SKIP() << m["name"] << ": " << m["skipped"];
    EXPECT_EQ(m["hits"], 4500) << m["name"];
    EXPECT_TRUE(m["hits_exact"].get<bool>()) << m["name"];
  }
  EXPECT_NE(j["mechanisms"][1]["step_over"].get<std::string>().find("single-stepped"),
            std::string::npos);
  EXPECT_NE(j["mechanisms"][2]["step_over"].get<std::string>().find("5-byte NOP"),
            std::string::npos);
  EXPECT_NE(j["mechanisms"][3]["step_over"].get<std::string>().find("emulated"), std::string::npos);
}

// Where perf_event_open refuses the uprobe PMU (here: probecost run as nobody, without
// CAP_PERFMON), the row is skipped with the reason and the run still succeeds. Nobody runs
// copies of the binaries in a directory of its own, from /: the tree may be where nobody cannot
// reach (a root's clone under /root, mode 0700).
TEST(Compare, UprobeRefusedIsSkippedWithTheReason) {
  const char* setpriv = "/usr/bin/setpriv";
  if (::geteuid() != 0 || ::access(setpriv, X_OK) != 0) {
    GTEST_SKIP() << "needs root and setpriv to run probecost without CAP_PERFMON";
  }
  namespace fs = std::filesystem;
  probecost::test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  std::string probecost = dir / "probecost", inferior = dir / "probecost-inferior";
  fs::copy_file(PROBECOST_BIN, probecost);
  fs::copy_file(INFERIOR_BIN, inferior);
  std::vector<std::string> argv = {
      "/usr/bin/env",   "-C", "/", setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
      "--inh-caps=-all"};
  argv.insert(argv.end(), {probecost, "compare", "-m", "uprobe", "-n", "2000", "-r", "1", "-f",
                           "json", "--inferior", inferior});
  Result r = run_command(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["mechanisms"].size(), 2u);
  const auto& up = j["mechanisms"][1];
  EXPECT_EQ(up["name"], "uprobe");
  ASSERT_TRUE(up["skipped"].is_string()) << up.dump();
  EXPECT_NE(up["skipped"].get<std::string>().find("CAP_PERFMON"), std::string::npos)
      << up["skipped"];
}

TEST(Compare, TextAndCsvReports) {
  char path[] = "/tmp/probecost-test-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  Result r =
      run_probecost({"compare", "-m", "marker", "-n", "2000", "-r", "1", "-f", "csv", "-o", path});
  expect_measured(r);
  std::ifstream in(path);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  ::unlink(path);
  EXPECT_EQ(header.rfind("mechanism,iterations,threads,hits", 0), 0u) << header;
  EXPECT_EQ(row.rfind("baseline,2000,1,2000", 0), 0u) << row;

  r = run_probecost({"compare", "-m", "marker", "-n", "2000", "-r", "1", "--placement", "free"});
  expect_measured(r);
  EXPECT_NE(r.out.find("placement: free"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Verdict:"), std::string::npos) << r.out;
}

TEST(Bench, StepOverRunsAndReportsSameResults) {
  Result r = run_probecost(
      {"bench", "step-over", "-k", "push,call,load_rip", "-n", "300", "-r", "1", "-f", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 12u);
  for (const auto& row : j["rows"]) {
    EXPECT_TRUE(row["same_result"].get<bool>()) << row.dump();
    EXPECT_EQ(row["hits"], 300) << row.dump();
  }
  expect_usage_error({"bench", "step-over", "-s", "teleport"}, "unknown step-over strategy");
  expect_usage_error({"bench", "step-over", "-k", "hlt"}, "unknown instruction kind 'hlt'");
}
