// `probecost trace` used as strace -c and perf stat are (issue 10): IFUNC symbols counted exactly,
// the command's output its own, its exit status passed on, -q keeping the report, and write()
// counted through `sh -c 'exec gzip ...'` as strace counts it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "run_capture.hpp"

using probecost::test::run_command;
using Json = nlohmann::json;

namespace {

// A file that lives as long as the test.
struct TempFile {
  TempFile() {
    char p[] = "/tmp/probecost-usage-XXXXXX";
    ::close(::mkstemp(p));
    path = p;
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::string read() const {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string path;
};

// ~4 MB of text that compresses to several of gzip's 256 KiB writes, the same on every run.
void write_gzip_input(const std::string& path) {
  std::mt19937 gen(10);
  std::ofstream out(path, std::ios::binary);
  for (int line = 0; line < 160000; ++line) {
    out << "line " << line << ":";
    for (int w = 0; w < 4; ++w) out << " w" << gen() % 5000;
    out << "\n";
  }
}

bool executable(const char* path) {
  return ::access(path, X_OK) == 0;
}

// The sum of the hits of every row (one per image) of the probe `spec`.
std::uint64_t hits_of(const Json& report, const std::string& spec) {
  std::uint64_t n = 0;
  for (const auto& p : report["probes"]) {
    if (p["spec"] == spec) n += p["hits"].get<std::uint64_t>();
  }
  return n;
}

class IfuncTest : public ::testing::TestWithParam<std::string> {};

}  // namespace

// strlen and memcpy are STT_GNU_IFUNC symbols in glibc: the probe goes to the implementation the
// process uses, and counts exactly the calls the program made (and counted) through its PLT.
TEST_P(IfuncTest, StrlenAndMemcpyCountExactlyTheCallsOfTheProgram) {
  TempFile report;
  auto r =
      run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", report.path, "-b",
                   "libc.so.6:strlen", "-b", "libc.so.6:memcpy", "--", GetParam(), "1234", "567"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  unsigned long strlen_calls = 0, memcpy_calls = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str(), "strlen=%lu memcpy=%lu", &strlen_calls, &memcpy_calls), 2)
      << r.out;
  EXPECT_EQ(strlen_calls, 1234u);
  EXPECT_EQ(memcpy_calls, 567u);
  Json j = Json::parse(report.read());
  ASSERT_EQ(j["probes"].size(), 2u) << j.dump(2);
  EXPECT_EQ(hits_of(j, "libc.so.6:strlen"), strlen_calls) << j.dump(2);
  EXPECT_EQ(hits_of(j, "libc.so.6:memcpy"), memcpy_calls) << j.dump(2);
  for (const auto& p : j["probes"]) {
    // The implementation is named (__strlen_evex, __memmove_avx_unaligned_erms...) where the
    // library's symbols are at hand, else given by its address.
    std::string impl = p.value("implementation", "");
    EXPECT_FALSE(impl.empty()) << p.dump(2);
    std::string name = p["spec"] == "libc.so.6:strlen" ? "strlen" : "m";
    EXPECT_TRUE(impl.rfind("0x", 0) == 0 || impl.rfind("libc.so.6+0x", 0) == 0 ||
                impl.find(name) != std::string::npos)
        << impl;
    EXPECT_FALSE(p.value("resolved_by", "").empty()) << p.dump(2);
    EXPECT_EQ(p["via"], "int3") << "hand-written entries jump into IFUNC implementations";
  }
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, IfuncTest,
                         ::testing::Values(std::string(IFUNC_CALLS_PIE),
                                           std::string(IFUNC_CALLS_NOPIE)),
                         [](const auto& info) {
                           return info.param.find("nopie") != std::string::npos ? "NonPie" : "Pie";
                         });

// The compat memcpy@GLIBC_2.2.5 is not what a program linked today calls: memcpy means the default
// version, memcpy@@GLIBC_2.14, and its implementation.
TEST(TraceUsage, MemcpyIsTheDefaultVersion) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", report.path, "-b",
                        "libc.so.6:memcpy", "--", IFUNC_CALLS_PIE, "0", "40"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(report.read());
  EXPECT_EQ(hits_of(j, "libc.so.6:memcpy"), 40u) << j.dump(2);
}

TEST(TraceUsage, AJumpAtAnIfuncIsRefusedWithItsReason) {
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "--via", "jump", "-b", "libc.so.6:memcpy",
                        "--", IFUNC_CALLS_PIE, "0", "4"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("IFUNC implementation"), std::string::npos) << r.err;
}

// As with strace and perf stat: probecost exits with the command's status, or 128 + its signal.
TEST(TraceUsage, TheCommandsExitStatusIsPassedOn) {
  auto exit3 = run_command(
      {PROBECOST_BIN, "trace", "-q", "-b", "libc.so.6:malloc", "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(exit3.exit_code, 3) << exit3.err;
  auto killed = run_command({PROBECOST_BIN, "trace", "-q", "-b", "libc.so.6:malloc", "--",
                             "/bin/sh", "-c", "kill -9 $$"});
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.err;
  EXPECT_NE(killed.err.find("killed by signal 9"), std::string::npos) << killed.err;
}

// -q drops the notes and the progress line, never the report.
TEST(TraceUsage, QuietKeepsTheTable) {
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-b", "probecost_test_site", "--",
                        LOOP_TARGET_PIE, "500", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("tracing process"), std::string::npos) << r.err;
  std::istringstream lines(r.err);
  bool row = false;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string spec, address, module, symbol;
    unsigned long hits = 0;
    if (words >> spec >> address >> module >> symbol >> hits && spec == "probecost_test_site") {
      EXPECT_EQ(hits, 1000u) << line;
      row = true;
    }
  }
  EXPECT_TRUE(row) << r.err;
}

// `gzip -c f > out` under trace writes the same bytes as without: the report goes to stderr.
TEST(TraceUsage, GzipOutputIsByteIdenticalToTheUntracedRun) {
  if (!executable("/bin/gzip")) GTEST_SKIP() << "no /bin/gzip";
  TempFile input;
  write_gzip_input(input.path);
  auto untraced = run_command({"/bin/gzip", "-c", input.path});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  auto traced = run_command(
      {PROBECOST_BIN, "trace", "-b", "libc.so.6:write", "--", "/bin/gzip", "-c", input.path});
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  EXPECT_GT(untraced.out.size(), 1000u);
  EXPECT_TRUE(traced.out == untraced.out)
      << "traced output " << traced.out.size() << " bytes, untraced " << untraced.out.size();
  EXPECT_NE(traced.err.find("libc.so.6:write"), std::string::npos) << traced.err;
}

// Through a shell that execs gzip, write() is counted in the image that calls it, as many times
// as strace sees the system call.
TEST(TraceUsage, ShExecGzipCountsTheWritesStraceCounts) {
  if (!executable("/bin/gzip") || !executable("/usr/bin/strace")) {
    GTEST_SKIP() << "needs /bin/gzip and /usr/bin/strace";
  }
  TempFile input, strace_log, report;
  write_gzip_input(input.path);
  std::string script = "exec /bin/gzip -c " + input.path;
  auto straced = run_command({"/usr/bin/strace", "-f", "-qq", "-e", "trace=write", "-o",
                              strace_log.path, "/bin/sh", "-c", script});
  if (straced.exit_code != 0) GTEST_SKIP() << "strace cannot run here: " << straced.err;
  std::uint64_t writes = 0;
  std::istringstream log(strace_log.read());
  for (std::string line; std::getline(log, line);) {
    if (line.find(" write(") != std::string::npos) ++writes;  // "PID write(1, ..."
  }
  auto traced = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", report.path, "-b",
                             "libc.so.6:write", "--", "/bin/sh", "-c", script});
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  Json j = Json::parse(report.read());
  ASSERT_EQ(j["images"].size(), 2u) << j.dump(2);
  EXPECT_GT(writes, 3u);
  EXPECT_EQ(hits_of(j, "libc.so.6:write"), writes) << j.dump(2);
  EXPECT_EQ(traced.out, straced.out);
}

// Two probes at one address are one probe, counted once, under both names: memcpy and memmove
// resolve to one implementation; readdir and readdir64 are one function.
TEST(TraceUsage, AnAddressIsCountedOnceUnderAllItsNames) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", report.path, "-b",
                        "libc.so.6:memcpy", "-b", "libc.so.6:memmove", "--", IFUNC_CALLS_PIE, "0",
                        "50"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(report.read());
  ASSERT_EQ(j["probes"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["probes"][0]["spec"], "libc.so.6:memcpy, libc.so.6:memmove");
  EXPECT_EQ(j["probes"][0]["hits"], 50);
  EXPECT_EQ(j["hits"], 50);

  TempFile dir_report;
  auto ls = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", dir_report.path, "-b",
                         "libc.so.6:readdir", "-b", "libc.so.6:readdir64", "--", "/bin/ls", "/"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  Json d = Json::parse(dir_report.read());
  ASSERT_EQ(d["probes"].size(), 1u) << d.dump(2);
  std::string names = d["probes"][0]["names"].dump();
  EXPECT_NE(names.find("\"readdir\""), std::string::npos) << names;
  EXPECT_NE(names.find("\"readdir64\""), std::string::npos) << names;
  EXPECT_GT(d["probes"][0]["hits"].get<std::uint64_t>(), 2u);
  EXPECT_EQ(d["probes"][0]["hits"], d["hits"]);
}

TEST(TraceUsage, HelpTraceIsTheTraceHelp) {
  auto help = run_command({PROBECOST_BIN, "help", "trace"});
  auto direct = run_command({PROBECOST_BIN, "trace", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out, direct.out);
  EXPECT_NE(help.out.find("exit status"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--no-follow-exec"), std::string::npos) << help.out;
  EXPECT_EQ(run_command({PROBECOST_BIN, "help", "nonsense"}).exit_code, 2);
}

TEST(TraceUsage, CsvHasOneRowPerProbe) {
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-f", "csv", "-b", "probecost_test_site",
                        "-b", "libc.so.6:memcpy", "-b", "libc.so.6:memmove", "--", LOOP_TARGET_PIE,
                        "500", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.err);
  std::string header, first, second, extra;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_FALSE(std::getline(lines, extra)) << r.err;
  EXPECT_EQ(header,
            "pid,image,spec,address,module,symbol,implementation,via,hits,traced_hits_per_s,"
            "threads");
  // Most hits first; the merged spec is quoted (it has a comma).
  EXPECT_NE(first.find(",probecost_test_site,"), std::string::npos) << first;
  EXPECT_NE(first.find(",1000,"), std::string::npos) << first;
  EXPECT_NE(second.find(",\"libc.so.6:memcpy, libc.so.6:memmove\","), std::string::npos) << second;
}

// Each int3 probe's hits by thread, with the thread's name: in JSON always, in the text with -v.
TEST(TraceUsage, HitsByProbeAndThreadWithNames) {
  TempFile report;
  auto r =
      run_command({PROBECOST_BIN, "trace", "-q", "--via", "int3", "-f", "json", "-o", report.path,
                   "-b", "probecost_test_site", "--", LOOP_TARGET_PIE, "400", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(report.read());
  const auto& by_thread = j["probes"][0]["by_thread"];
  ASSERT_EQ(by_thread.size(), 3u) << j.dump(2);
  for (const auto& t : by_thread) {
    EXPECT_EQ(t["hits"], 400) << t.dump();
    EXPECT_EQ(t["name"], "loop_target_pie") << t.dump();  // comm: the program's name
  }
  auto text = run_command({PROBECOST_BIN, "trace", "-q", "-v", "--via", "int3", "-b",
                           "probecost_test_site", "--", LOOP_TARGET_PIE, "400", "3"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  auto at = text.err.find("hits by probe and thread:\n  probecost_test_site:\n");
  ASSERT_NE(at, std::string::npos) << text.err;
  std::istringstream rows(text.err.substr(at));
  std::string line;
  std::getline(rows, line);
  std::getline(rows, line);
  int threads = 0;
  while (std::getline(rows, line) && line.rfind("    ", 0) == 0) {
    EXPECT_NE(line.find(" loop_target_pie = 400"), std::string::npos) << line;
    ++threads;
  }
  EXPECT_EQ(threads, 3) << text.err;
}

namespace {

// Runs probecost with standard error on a new terminal, and standard output on that terminal
// too or not; returns everything written to the terminal. The command waits on a pipe nobody
// writes to, so the trace lasts its --duration (2 s: one progress line is due after 1 s).
std::string terminal_output(bool stdout_on_terminal) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(slave, 0);
  int in[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  probecost::test::MemFile out;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(stdout_on_terminal ? slave : out.fd, 1);
    ::dup2(slave, 2);
    ::execl(PROBECOST_BIN, PROBECOST_BIN, "trace", "--duration", "2", "--kill-on-exit", "-b",
            "probecost_test_site", "--", LOOP_TARGET_PIE, "10", "1", "--pause", nullptr);
    ::_exit(127);
  }
  ::close(slave);
  ::close(in[0]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) text.append(buf, n);  // EIO: done
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << text;
  ::close(in[1]);
  ::close(master);
  return text;
}

}  // namespace

// The progress line goes to a terminal only when the traced program is not drawing on it.
TEST(TraceUsage, ProgressLineOnlyOnATerminalTheProgramDoesNotUse) {
  std::string alone = terminal_output(false);
  EXPECT_NE(alone.find("hits ("), std::string::npos) << alone;
  EXPECT_NE(alone.find("probecost_test_site"), std::string::npos) << alone;
  std::string shared = terminal_output(true);
  EXPECT_EQ(shared.find("hits ("), std::string::npos) << shared;
  EXPECT_NE(shared.find("phase1 calls=10"), std::string::npos) << shared;
  EXPECT_NE(shared.find("probecost_test_site"), std::string::npos) << shared;
}

// --folded writes the stacks as flamegraph.pl and speedscope read them: outermost frame first,
// ';' between frames, each its function (--folded-offsets: as the report prints it), the count
// last; the counts add up to the hits.
TEST(TraceUsage, FoldedStacksAddUpToTheHits) {
  TempFile folded;
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "--stacks", "--folded", folded.path, "-b",
                        "probecost_test_site", "--", LOOP_TARGET_PIE, "300", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(folded.read());
  std::uint64_t total = 0;
  int stacks = 0;
  for (std::string line; std::getline(lines, line); ++stacks) {
    auto space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    total += std::stoull(line.substr(space + 1));
    // By function: the leaf is the probed function itself, no frame has an offset or module.
    EXPECT_EQ(line.substr(line.rfind(';') + 1, space - line.rfind(';') - 1), "probecost_test_site")
        << line;
    EXPECT_EQ(line.find("+0x"), std::string::npos) << line;
    EXPECT_EQ(line.find(" in "), std::string::npos) << line;
    EXPECT_NE(line.find(";"), std::string::npos) << line;
  }
  EXPECT_GE(stacks, 1);
  EXPECT_EQ(total, 600u);
  auto offsets = run_command({PROBECOST_BIN, "trace", "-q", "--stacks", "--folded", folded.path,
                              "--folded-offsets", "-b", "probecost_test_site", "--",
                              LOOP_TARGET_PIE, "3", "1"});
  ASSERT_EQ(offsets.exit_code, 0) << offsets.err;
  EXPECT_NE(folded.read().find(" in "), std::string::npos);  // "main+0x1f in loop_target_pie"
  EXPECT_EQ(run_command({PROBECOST_BIN, "trace", "--stacks", "--folded-offsets", "-b",
                         "probecost_test_site", "--", LOOP_TARGET_PIE, "1", "1"})
                .exit_code,
            2);
  // Jump probes' stacks: no int3 hit, so no line of "ns per int3 hit" (it said 0 ns before).
  EXPECT_NE(r.err.find("stacks of jump hits: 600 snapshots"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("per int3 hit"), std::string::npos) << r.err;
  auto no_stacks = run_command({PROBECOST_BIN, "trace", "--folded", folded.path, "-b",
                                "probecost_test_site", "--", LOOP_TARGET_PIE, "1", "1"});
  EXPECT_EQ(no_stacks.exit_code, 2) << no_stacks.err;
}

// The stack options mean nothing without --stacks, and a jump probe writes its event or its
// stack, not both: usage errors (exit 2) before the command is launched, not an accepted option
// (--stack-size) or a runtime failure after the attach (--events, exit 1 before).
TEST(TraceUsage, StackOptionsWithoutStacksAndEventsWithStacksAreUsageErrors) {
  TempFile ran;
  for (std::vector<std::string> extra : {std::vector<std::string>{"--stack-size", "4096"},
                                         {"--stack-depth", "8"},
                                         {"--stacks", "--events"}}) {
    std::vector<std::string> argv = {PROBECOST_BIN, "trace", "-b", "probecost_test_site"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", "echo ran > " + ran.path});
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << extra.front() << ": " << r.err;
    EXPECT_NE(r.err.find("--stacks"), std::string::npos) << r.err;
    EXPECT_EQ(ran.read(), "") << "the command was launched with " << extra.front();
  }
}
