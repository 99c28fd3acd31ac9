// One regression test per failure the fault suite found (issue 7): "never harm the traced
// process, never hang, never lose the report". Each drives the fault-injection targets through
// the same cycles as the suite, in a loop long enough that a race that fails a few percent of
// the time fails the test almost surely. The input checks are tested in cli/test_input_checks.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "cycles.hpp"
#include "harness.hpp"
#include "text_check.hpp"

namespace {

fault::Config config() {
  fault::Config cfg;
  cfg.probecost = PROBECOST_BIN;
  cfg.bin_dir = FAULT_BIN_DIR;
#ifdef PROBECOST_SANITIZED
  // ASan + UBSan at load 14 to 20: probecost ended 2.1 to 4.9 s after the exec of fault_exec
  // (the new image probed, then the exit); at load 27 to 33 past 5 s, taken for hangs.
  cfg.bound = 15;
  // And its start: 1 launched start of 40 in NoReportLost took more than 15 s at load 30 to 40.
  cfg.start_bound = 30;
#else
  cfg.bound = 5;
#endif
  static const bool restore = [] {
    fault::Child c({PROBECOST_BIN, "restore", "--help"}, fault::SpawnFds{});
    auto status = c.wait(fault::after(30));
    return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  }();
  cfg.restore_available = restore;
  return cfg;
}

// Runs `n` cycles of `one` (strategy `strategy`) and returns the outcomes that went wrong in
// the way `bad` picks, as "#i: why" lines.
template <typename One, typename Bad>
std::vector<std::string> failures(int n, const std::string& strategy, One&& one, Bad&& bad) {
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed() + 7);
  std::vector<std::string> out;
  fault::Config cfg = config();
  for (int i = 0; i < n; ++i) {
    fault::Cycle c;
    c.index = i;
    // "rotate": each strategy in turn (the races do not depend on the strategy, but their
    // odds do: singlestep stops every thread on every hit).
    c.strategy =
        strategy == "rotate" ? fault::kStrategies[i % fault::kStrategies.size()] : strategy;
    c.rng = &rng;
    fault::Outcome o = one(cfg, c);
    fault::reap_orphans();
    if (bad(o)) out.push_back("#" + std::to_string(i) + ": " + o.why);
  }
  return out;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

bool harmed(const fault::Outcome& o) {
  return o.harmed;
}
bool hung(const fault::Outcome& o) {
  return o.hung;
}
bool not_clean(const fault::Outcome& o) {
  return !o.clean();
}

// A sanitizer build runs each cycle several times slower: fewer cycles keep the long tests
// inside their timeout (the fault suite's --long form is where the thousands are run).
#ifdef PROBECOST_SANITIZED
constexpr int kCycleDivisor = 2;
#else
constexpr int kCycleDivisor = 1;
#endif

#define EXPECT_NONE(list, n) EXPECT_TRUE(list.empty()) << list.size() << " of " << n << join(list)

}  // namespace

// 1. Killed by SIGTRAP after a clean detach: an int3 SIGTRAP queued behind the interrupt stop
//    of detach is delivered after PTRACE_DETACH (si_code=128, RIP at probe_fn+1).
TEST(NoStraySigtrap, AfterDetachFromABusyProcess) {
  const int n = 80 / kCycleDivisor;
  auto f = failures(
      n, "auto",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::attach_for_duration(cfg, c, {"fault_busy", "--threads", "2"}, 0.05);
      },
      harmed);
  EXPECT_NONE(f, n);
}

TEST(NoStraySigtrap, AfterDetachFromChurningThreads) {
  const int n = 100 / kCycleDivisor;
  auto f = failures(
      n, "rotate",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::attach_for_duration(cfg, c, {"fault_busy", "--churn"},
                                          c.index % 2 ? 0.01 : 0.05);
      },
      harmed);
  EXPECT_NONE(f, n);
}

// 2. Hangs in stop_all's waitpid: the leader is a zombie, or inside exec or vfork.
TEST(NoHang, WhenTheProcessExitsWhileHit) {
  auto f = failures(
      24, "rotate",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::exit_cycle(cfg, c, false, c.index / 4 % 2 == 1, 3);
      },
      hung);
  EXPECT_NONE(f, 24);
}

// Under ASan + UBSan a cycle takes 6 to 9 s at load 10 to 17 (most of it probecost's start):
// 24 of them took 145 to 219 s of the test's 300.
TEST(NoHang, WhenTheMainThreadExecsWhileOthersHit) {
  const int n = 24 / kCycleDivisor;
  auto f = failures(
      n, "rotate",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::exec_cycle(cfg, c, false, false);
      },
      not_clean);
  EXPECT_NONE(f, n);
}

TEST(NoHang, WhenTheProcessExitsDuringAttach) {
  auto f = failures(32, "rotate", fault::exit_during_attach, not_clean);
  EXPECT_NONE(f, 32);
}

TEST(NoHang, OnAVforkLoopWithDuration) {
  auto f = failures(
      4, "auto",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::children_cycle(cfg, c, "vfork", false);
      },
      not_clean);
  EXPECT_NONE(f, 4);
}

TEST(NoHang, WithSinglestepOnForksAndVforks) {
  auto f = failures(
      8, "singlestep",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::children_cycle(cfg, c, c.index % 2 ? "vfork" : "fork", c.index / 2 % 2 == 1);
      },
      not_clean);
  EXPECT_NONE(f, 8);
}

// 3. "reading RIP of thread N: No such process", exit 1 and no counts, when a launched
//    4-thread program calls exit() while the others hit the probe.
TEST(NoReportLost, WhenALaunchedProgramExitsWhileHit) {
  for (const char* strategy : {"auto", "singlestep"}) {
    auto f = failures(
        20, strategy,
        [](const fault::Config& cfg, const fault::Cycle& c) {
          return fault::exit_cycle(cfg, c, true, true, 4);
        },
        [](const fault::Outcome& o) { return o.lost || o.hung; });
    EXPECT_NONE(f, 20) << " with " << strategy;
  }
}

// 4. --duration looked at only when waitpid returns EINTR: under constant hits it never does.
//    Judged by when the process is let go (TracerPid back to 0), counted from the "tracing
//    process" line: probecost's own start and exit (a sanitizer build's leak check at exit
//    takes a second or more on a loaded machine) are not the duration's overshoot.
static int tracer_pid(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("TracerPid:", 0) == 0) return std::stoi(line.substr(10));
  }
  return -1;
}

TEST(Duration, IsKeptUnderConstantHits) {
#ifdef PROBECOST_SANITIZED
  constexpr double kLate = 2;  // ASan + UBSan: every ptrace stop costs several times more
#else
  constexpr double kLate = 1;  // 0.05 s asked: a second late is an overshoot, not noise
#endif
  fault::Config cfg = config();
  std::vector<std::string> late;
  for (int i = 0; i < 6; ++i) {
    auto target = fault::start_target(cfg, {"fault_busy", "--threads", "8"});
    fault::TraceRun run(cfg, fault::trace_args("auto", {"-p", std::to_string(target->pid), "-b",
                                                        "probe_fn", "--duration", "0.05"}));
    ASSERT_TRUE(run.wait_tracing(fault::after(30))) << run.stderr_text();
    auto started = fault::Clock::now();
    bool let_go =
        fault::poll_until([&] { return tracer_pid(target->pid) == 0; }, fault::after(0.05 + kLate));
    if (!let_go) {
      late.push_back("#" + std::to_string(i) + ": still traced " +
                     std::to_string(fault::seconds_since(started)) + " s after --duration 0.05");
    }
    fault::Outcome o;
    run.finish(fault::after(cfg.bound), o, "after --duration 0.05");
    fault::stop_and_check(*target, cfg, o);
    EXPECT_TRUE(o.clean()) << o.why;
  }
  EXPECT_TRUE(late.empty()) << join(late);
}

// 5. SIGKILL of probecost leaves 0xCC in an attached process; running probecost again must
//    name the PID and symbol and point to `probecost restore`, which puts the bytes back.
TEST(Restore, AfterSigkillPutsTheTextBack) {
  fault::Config cfg = config();
  auto target = fault::start_target(cfg, {"fault_busy", "--threads", "2", "--idle"});
  std::string pid = std::to_string(target->pid);
  {
    fault::TraceRun run(cfg, {"-p", pid, "-b", "probe_fn"});
    ASSERT_TRUE(run.wait_tracing(fault::after(10))) << run.stderr_text();
    target->send("go 10");
    ASSERT_TRUE(target->wait_line("done", fault::after(10)));
    run.kill();
  }
  ASSERT_FALSE(fault::text_differences(target->pid).empty()) << "SIGKILL left no int3?";
  // A second trace finds the int3 and says where and what to do.
  fault::Outcome o;
  fault::TraceRun again(cfg, {"-p", pid, "-b", "probe_fn", "--duration", "0.01"});
  again.finish(fault::after(10), o, "", {1, 2});
  std::string err = again.stderr_text();
  EXPECT_NE(err.find(pid), std::string::npos) << err;
  EXPECT_NE(err.find("probe_fn"), std::string::npos) << err;
  EXPECT_NE(err.find("probecost restore"), std::string::npos) << err;
  // restore puts the file's bytes back, and says which.
  ASSERT_TRUE(cfg.restore_available) << "probecost has no 'restore' command";
  fault::Pipe out;
  fault::SpawnFds fds;
  fds.out = out.write;
  fault::Child restore({cfg.probecost, "restore", "-p", pid}, fds);
  out.close_write();
  fault::LineReader lines(out.read);
  while (lines.next(fault::after(10))) {
  }
  auto status = restore.wait(fault::after(10));
  ASSERT_TRUE(status && WIFEXITED(*status)) << "restore did not end";
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_NE(lines.seen().find("probe_fn"), std::string::npos) << lines.seen();
  EXPECT_TRUE(fault::text_differences(target->pid).empty());
  fault::Outcome end;
  target->send("go 10");
  EXPECT_TRUE(target->wait_line("done", fault::after(10)));
  fault::stop_and_check(*target, cfg, end);
  EXPECT_TRUE(end.clean()) << end.why;
}

// 6. clone() with unusual flags: CLONE_VM|SIGCHLD shares the memory (its hits count, the
//    parent's probe stays in); clone(0) is a fork-like child (its copy of the text is cleaned).
TEST(CloneChild, WithCloneVmSharesTheProbe) {
  auto f = failures(
      4, "auto",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::children_cycle(cfg, c, "clone-vm", true);
      },
      not_clean);
  EXPECT_NONE(f, 4);
}

TEST(CloneChild, WithoutCloneVmIsAFork) {
  auto f = failures(
      6, "auto",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::children_cycle(cfg, c, "clone-nosig", c.index % 2 == 1);
      },
      not_clean);
  EXPECT_NONE(f, 6);
}

// A fork child whose copy was made before the probes went in (harm3, item 1): a thread inside
// fork() when probecost attaches reports its fork event once its copy is made, and the probes
// go in while it is held there. The child was taken over as if its copy held them: writing
// the records of a trap area it did not have failed (EIO) at detach, and -F ended with no
// report (1 to 2 of 8 follow-forks cycles at load 30; 18 of 40 clone-sigchld cycles at load
// 15 to 20). The window is the one between the seize and the stop, so this test catches it under
// load only: the fault suite's follow-forks scenario is its long form.
TEST(FollowForks, AChildForkedDuringTheAttachIsNotTakenForACopyOfTheProbes) {
  auto f = failures(
      6, "rotate",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::follow_cycle(cfg, c, "clone-sigchld", false,
                                   {"--threads", "0", "--child-calls", "1"});
      },
      not_clean);
  EXPECT_NONE(f, 6);
}

// 7. A rep-prefixed first instruction: one hit per call under every strategy.
TEST(RepSite, CountsOneHitPerCall) {
  for (const char* strategy : {"singlestep", "emulate", "outline", "auto"}) {
    for (const char* kind : {"movsb", "stosb"}) {
      auto f = failures(
          1, strategy,
          [kind](const fault::Config& cfg, const fault::Cycle& c) {
            return fault::rep_cycle(cfg, c, kind);
          },
          not_clean);
      EXPECT_NONE(f, 1) << " (" << kind << ", " << strategy << ")";
    }
  }
}

// 8. A stopped process can be traced with the default strategy, and stays stopped.
TEST(StoppedProcess, IsTracedAndStaysStopped) {
  auto f = failures(
      4, "auto",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::stopped_cycle(cfg, c, 0.05);
      },
      not_clean);
  EXPECT_NONE(f, 4);
}

// 9. Detaches from a busy process kept a jump area and the 32 MiB call buffer whenever a
//    thread was inside a trampoline (9 of 20 trace/record cycles with one thread, 13 of 20
//    with three; 47 -> 82 mappings after 10 cycles): now each such thread is brought out
//    first (tracer/core/process_run_out.cpp). 20 cycles with 3 threads calling probe_fn without
//    pause (112 s at load 16; the fault suite's memory-busy runs 1 and 3 threads, 25 cycles): the
//    same mappings and resident memory within 1 MiB after, and probe_fn counted exactly the
//    calls its callers made.
TEST(MemoryBusy, TraceAndRecordCyclesLeaveABusyProcessAsItWas) {
  auto f = failures(
      1, "jump",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        // Under the sanitizers an iteration takes ~27 s at load 12 (8 s a trace, 19 s a record
        // of 0.01 s, most of both before and after the probes): 4 of them.
        return fault::memory_busy_cycle(cfg, c, 3, kCycleDivisor == 1 ? 20 : 4);
      },
      not_clean);
  EXPECT_NONE(f, 1);
}

// 10. harm4: each `trace --via int3` whose step-over ran a copy out of line left its scratch
//     page (one r-x page, resident) in the process for good, one more per attach. Now the
//     detach unmaps it with the other mappings of ours, where no thread is in it. 10 cycles of
//     an outline-stepped trace of an idle process: the same mappings and resident memory
//     within 1 MiB after (before the fix: harmed, 1 mapping more).
TEST(MemoryCycles, Int3OutlineTracesLeaveNoScratchPage) {
  auto f = failures(
      1, "outline",
      [](const fault::Config& cfg, const fault::Cycle& c) {
        return fault::memory_cycle(cfg, c, 10, {"outline"}, false);
      },
      not_clean);
  EXPECT_NONE(f, 1);
}
