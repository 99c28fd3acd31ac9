// `probecost trace -F/--follow-forks` (issue 10): every process of a tree counted exactly, by
// process, against each process's own count; shell pipelines counted through their children's
// execs; an attached process's children followed and let go intact.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_capture.hpp"
#include "trace_harness.hpp"

using probecost::test::run_command;
using Json = nlohmann::json;

namespace {

struct TempFile {
  TempFile() {
    char p[] = "/tmp/probecost-forks-XXXXXX";
    ::close(::mkstemp(p));
    path = p;
  }
  ~TempFile() { ::unlink(path.c_str()); }
  Json json() const {
    std::ifstream in(path);
    return Json::parse(in);
  }
  std::string path;
};

// "pid=<pid> calls=<n>" lines: each process's own count of its probe_me() calls.
std::map<long, std::uint64_t> own_counts(const std::string& out) {
  std::map<long, std::uint64_t> counts;
  std::regex line("pid=(\\d+) calls=(\\d+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    counts[std::stol((*it)[1])] = std::stoull((*it)[2]);
  }
  return counts;
}

std::map<long, std::uint64_t> hits_by_process(const Json& j, const std::string& spec) {
  std::map<long, std::uint64_t> hits;
  for (const auto& p : j["probes"]) {
    if (p["spec"] == spec) hits[p["pid"].get<long>()] += p["hits"].get<std::uint64_t>();
  }
  return hits;
}

struct Mode {
  std::string via, step_over;
};

class ForkTree : public ::testing::TestWithParam<Mode> {};

}  // namespace

// Root, 3 fork children (one with a grandchild, one with two threads) and a vfork + exec child:
// six processes, each counted exactly as it counts itself, and the total the sum.
TEST_P(ForkTree, EveryProcessIsCountedExactly) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-F", "-q", "--via", GetParam().via, "--step-over",
                        GetParam().step_over, "-f", "json", "-o", report.path, "-b", "probe_me",
                        "--", FORK_TREE, "10", "4", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto want = own_counts(r.out);
  ASSERT_EQ(want.size(), 6u) << r.out;
  Json j = report.json();
  auto got = hits_by_process(j, "probe_me");
  EXPECT_EQ(got, want) << j.dump(2);
  std::uint64_t total = 0;
  for (const auto& [pid, n] : want) total += n;
  EXPECT_EQ(j["hits"].get<std::uint64_t>(), total);
  ASSERT_EQ(j["processes"].size(), 6u) << j.dump(2);
  EXPECT_EQ(j["processes"][0]["parent"], 0);
  for (std::size_t i = 1; i < j["processes"].size(); ++i) {
    EXPECT_NE(j["processes"][i]["parent"], 0) << j["processes"][i].dump();
    EXPECT_EQ(j["processes"][i]["end"], "exited with status 0") << j["processes"][i].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, ForkTree,
                         ::testing::Values(Mode{"int3", "singlestep"}, Mode{"int3", "emulate"},
                                           Mode{"int3", "outline"}, Mode{"auto", "auto"},
                                           Mode{"jump", "auto"}),
                         [](const auto& info) {
                           return info.param.via + "_" + info.param.step_over;
                         });

// Without -F the children are cleaned of our bytes and let go: only the root is counted, and
// every child still runs to its end with the right count.
TEST(FollowForks, WithoutItOnlyTheRootIsCounted) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "-f", "json", "-o", report.path, "-b",
                        "probe_me", "--", FORK_TREE, "10", "4", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto want = own_counts(r.out);
  ASSERT_EQ(want.size(), 6u) << r.out;
  Json j = report.json();
  EXPECT_EQ(j["hits"], 10) << j.dump(2);
  EXPECT_EQ(j["processes"].size(), 1u);
}

// fork_tree vfork-cpu's rounds: (the vfork child's rseq cpu_id, the parent's after it).
std::vector<std::pair<int, int>> vfork_cpus(const std::string& out) {
  std::vector<std::pair<int, int>> rounds;
  std::istringstream in(out);
  std::string line;
  int child = 0, parent = 0;
  while (std::getline(in, line)) {
    if (std::sscanf(line.c_str(), "child_cpu=%d parent_cpu=%d", &child, &parent) == 2)
      rounds.emplace_back(child, parent);
  }
  return rounds;
}

// A vfork() child runs on its parent's struct rseq and has no registration of its own: it read
// the CPU its parent last ran on, and our per-CPU commits in it raced with the threads on that
// CPU (counts lost, records torn). Traced with jumps, it reads cpu_id -1 and takes the
// trampolines' path for a thread without rseq; its parent has its own number back after.
TEST(FollowForks, AVforkChildSeesNoCpuNumberWhileJumpsCountPerCpu) {
  auto untraced = vfork_cpus(run_command({FORK_TREE, "vfork-cpu", "3"}).out);
  ASSERT_EQ(untraced.size(), 3u);
  if (untraced[0].first == -2) GTEST_SKIP() << "glibc registered no rseq";
  for (auto [child, parent] : untraced) EXPECT_GE(child, 0) << "the parent's number, untraced";
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-q", "--via", "jump", "-f", "json", "-o",
                        report.path, "-b", "probe_me", "--", FORK_TREE, "vfork-cpu", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto traced = vfork_cpus(r.out);
  ASSERT_EQ(traced.size(), 3u) << r.out;
  for (auto [child, parent] : traced) {
    EXPECT_EQ(child, -1) << r.out;
    EXPECT_GE(parent, 0) << r.out;
  }
  EXPECT_EQ(report.json()["hits"], 3) << report.json().dump(2);
}

// The program's output is the same traced and untraced (its pids aside).
TEST(FollowForks, OutputIsTheProgramsOwn) {
  auto plain = run_command({FORK_TREE, "7", "3", "50"});
  auto traced = run_command({PROBECOST_BIN, "trace", "-F", "-q", "-o", "/dev/null", "-b",
                             "probe_me", "--", FORK_TREE, "7", "3", "50"});
  ASSERT_EQ(plain.exit_code, 0);
  ASSERT_EQ(traced.exit_code, 0) << traced.err;
  auto counts = [](const std::string& out) {
    std::multiset<std::uint64_t> c;
    for (const auto& [pid, n] : own_counts(out)) c.insert(n);
    return c;
  };
  EXPECT_EQ(counts(plain.out), counts(traced.out));
  EXPECT_EQ(std::count(plain.out.begin(), plain.out.end(), '\n'),
            std::count(traced.out.begin(), traced.out.end(), '\n'));
}

// A shell's children exec the probed program: its probes are named only in the children's image
// (not in sh's), which -F accepts; each exec'd child is counted as itself.
TEST(FollowForks, AShellScriptsChildrenAreCounted) {
  TempFile report;
  std::string tree = FORK_TREE;
  std::string script = "for i in 1 2 3 4 5; do " + tree + " leaf $i; done; " + tree +
                       " leaf 7 | cat; " + tree + " 2 2 5";
  auto r = run_command({PROBECOST_BIN, "trace", "-F", "-q", "-f", "json", "-o", report.path, "-b",
                        "probe_me", "--", "/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto want = own_counts(r.out);
  ASSERT_EQ(want.size(), 10u) << r.out;  // 6 leaves, and fork_tree 2 2 5: four processes
  Json j = report.json();
  auto got = hits_by_process(j, "probe_me");
  std::erase_if(got, [](const auto& kv) { return kv.second == 0; });  // sh and its copies
  EXPECT_EQ(got, want) << j.dump(2);
  EXPECT_TRUE(j["never_probed"].empty());
}

// A clone(CLONE_VM) child is a process of its own that runs in our memory, over our int3: its
// hits are its own process's, not its parent's.
TEST(FollowForks, AProcessSharingTheMemoryIsCountedAsItself) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-F", "-q", "--via", "int3", "-f", "json", "-o",
                        report.path, "-b", "probe_me", "--", FORK_TREE, "vm", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto want = own_counts(r.out);
  ASSERT_EQ(want.size(), 2u) << r.out;
  Json j = report.json();
  EXPECT_EQ(hits_by_process(j, "probe_me"), want) << j.dump(2);
  EXPECT_EQ(j["processes"].size(), 2u) << j.dump(2);
}

// A probe that names nothing anywhere is said so, not silently dropped.
TEST(FollowForks, AProbeThatNamesNothingAnywhereIsReported) {
  TempFile report;
  auto r = run_command({PROBECOST_BIN, "trace", "-F", "-q", "-f", "json", "-o", report.path, "-b",
                        "probe_me", "-b", "no_such_function_xyz", "--", FORK_TREE, "1", "1", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = report.json();
  ASSERT_EQ(j["never_probed"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["never_probed"][0], "no_such_function_xyz");
}

// Attached with -F: the children it forks while traced are counted, each one exits normally,
// and after the detach the process (and its text) is as it was.
TEST(FollowForks, AttachedProcessChildrenAreCountedAndLeftIntact) {
  int in[2], out[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t pid = probecost::test::spawn({FORK_TREE, "serve"}, in[0], out[1], -1);
  ::close(in[0]);
  ::close(out[1]);
  FILE* from = ::fdopen(out[0], "r");
  ASSERT_EQ(probecost::test::read_line(from), "ready");
  auto ask = [&](const std::string& cmd) {
    std::string line = cmd + "\n";
    EXPECT_EQ(::write(in[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return probecost::test::read_line(from);
  };
  std::vector<long> children;
  {
    probecost::test::Trace trace({"-F", "-p", std::to_string(pid), "-b", "probe_me"});
    ASSERT_TRUE(trace.ready) << trace.stderr_text;
    for (int k : {10, 20, 30}) {
      std::string answer = ask("fork " + std::to_string(k));
      long child = 0;
      int status = -1;
      ASSERT_EQ(std::sscanf(answer.c_str(), "child=%ld status=%d", &child, &status), 2) << answer;
      EXPECT_EQ(status, 0) << "child " << child << " of a traced process did not exit cleanly";
      children.push_back(child);
    }
    EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
    Json j = trace.report();
    auto got = hits_by_process(j, "probe_me");
    EXPECT_EQ(got[pid], 3u) << j.dump(2);
    EXPECT_EQ(got[children[0]], 10u) << j.dump(2);
    EXPECT_EQ(got[children[1]], 20u) << j.dump(2);
    EXPECT_EQ(got[children[2]], 30u) << j.dump(2);
  }
  // Untraced again: it still forks children that exit cleanly.
  std::string answer = ask("fork 5");
  EXPECT_NE(answer.find("status=0"), std::string::npos) << answer;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("TracerPid:", 0) == 0) {
      EXPECT_EQ(line, "TracerPid:\t0");
    }
  }
  ::close(in[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::fclose(from);
}

namespace {

// fork_tree serve, with its stdin and stdout on pipes.
struct Server {
  Server() {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid = probecost::test::spawn({FORK_TREE, "serve"}, in[0], out[1], -1);
    ::close(in[0]);
    ::close(out[1]);
    to = in[1];
    from = ::fdopen(out[0], "r");
    first = probecost::test::read_line(from);
  }
  ~Server() {
    ::close(to);
    int st = 0;
    ::waitpid(pid, &st, 0);
    std::fclose(from);
  }
  std::string ask(const std::string& cmd) {
    std::string line = cmd + "\n";
    EXPECT_EQ(::write(to, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    return probecost::test::read_line(from);
  }
  std::string next_line() { return probecost::test::read_line(from); }
  pid_t pid;
  int to;
  FILE* from;
  std::string first;
};

// The state letter of /proc/PID/stat ('?' when it is gone).
char state_of(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = all.rfind(')');
  return close == std::string::npos || close + 2 >= all.size() ? '?' : all[close + 2];
}

}  // namespace

// Not followed, a fork child of a process with int3 probes is let go at its first stop with
// the program's own SIGTRAP disposition, not the trap area's handler that fork copied into it
// (the child exits 3 if its disposition is not the program's).
TEST(FollowForks, AChildLetGoHasTheProgramsSigtrapDisposition) {
  Server s;
  ASSERT_EQ(s.first, "ready");
  probecost::test::Trace trace({"-p", std::to_string(s.pid), "--via", "int3", "-b", "probe_me"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  std::string answer = s.ask("forksig 5");
  EXPECT_NE(answer.find("status=0"), std::string::npos) << answer;
  EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(hits_by_process(trace.report(), "probe_me")[s.pid], 1u);
}

// Followed, a child whose only thread is stopped (SIGSTOP) when probecost lets go still gets
// the program's SIGTRAP disposition back, and stays stopped until it is continued.
TEST(FollowForks, AStoppedChildLetGoHasTheProgramsSigtrapDisposition) {
  Server s;
  ASSERT_EQ(s.first, "ready");
  probecost::test::Trace trace(
      {"-F", "-p", std::to_string(s.pid), "--via", "int3", "-b", "probe_me"});
  ASSERT_TRUE(trace.ready) << trace.stderr_text;
  std::string stopping = s.ask("forkstop 5");
  long child = 0;
  ASSERT_EQ(std::sscanf(stopping.c_str(), "stopping=%ld", &child), 1) << stopping;
  // Past its probe calls: the next stop is its SIGSTOP's (traced: 't'); bounded by the timeout.
  while (state_of(child) != 't' && state_of(child) != 'T') ::sched_yield();
  EXPECT_EQ(trace.finish(SIGINT), 0) << trace.stderr_text;
  EXPECT_EQ(state_of(child), 'T') << "the child is no longer stopped after the detach";
  EXPECT_EQ(::kill(static_cast<pid_t>(child), SIGCONT), 0);
  std::string answer = s.next_line();
  EXPECT_NE(answer.find("status=0"), std::string::npos) << answer;
}
