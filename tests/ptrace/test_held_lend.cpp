// Issue 23: calls injected into a thread held at its int3 hit (its SIGTRAP stop only peeked at,
// so the kernel still keeps the signal: tracer/core/held_lend.hpp). The first hit of a site
// whose out-of-line copy could not be placed at prepare time maps its scratch page then, in
// the one thread of the program: the thread whose hit is being handled. Single-stepped on our
// registers with the SIGTRAP held, a death of probecost there delivered that SIGTRAP at our
// registers (the vDSO's `syscall`): the program died of it. Now the hold is let go of first
// (the thread rewound onto its site, its stop collected) and the call has its way back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "run_capture.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;
using probecost::test::MemFile;

namespace {

constexpr const char* kSite = "probecost_test_site";

// A scratch mapper that has no page to give at prepare time (as when no thread can run a call
// then), so that the copy is placed at the first hit; `placed` runs after each page it maps.
ScratchMapper later_mapper(TracedProcess& proc, std::function<void()> placed = nullptr) {
  auto first = std::make_shared<bool>(true);
  return [&proc, first, placed](RuntimeAddr near) -> std::optional<RuntimeAddr> {
    if (*first) {
      *first = false;
      return std::nullopt;
    }
    auto page = proc.map_scratch(near);
    if (page && placed) placed();
    return page;
  };
}

class HeldLend : public ::testing::TestWithParam<StepOverChoice> {};

// Alive: a call injected into the held thread at each hit (and, out of line, the first hit's
// scratch page) leaves every step-over able to go on with the hit from the site, where the
// thread is rewound.
TEST_P(HeldLend, CallsInjectedAtEachHitLeaveTheHitsAndTheOutputRight) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = {LOOP_TARGET_PIE, "200", "1"};
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess& proc = family->root();
  proc.run_to_entry();
  Symbol site = ProcessSymbols(proc.pid()).resolve(kSite);
  auto step =
      make_step_over(GetParam(), proc.memory(), later_mapper(proc), &proc.space().relocated());
  add_int3_probe(proc, *step, site.address, site.name, "");
  Session session(proc, *step);
  int lent = 0;
  // Called at each hit before the step-over, the thread held at its SIGTRAP stop.
  session.set_hit_observer([&](pid_t tid, StoppedThread&, BreakpointSite&) {
    Task* t = proc.task(tid);
    ASSERT_NE(t, nullptr);
    auto r = proc.calls().syscall(SYS_getpid, {}, t);
    EXPECT_EQ(r.value_or(0), proc.pid());
    EXPECT_FALSE(t->held());  // let go of before the lending, not held by a last step's stop
    ++lent;
  });
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  EXPECT_EQ(proc.space().sites().find(site.address)->hits, 200u);
  EXPECT_EQ(lent, 200);
  ASSERT_TRUE(proc.end());
  EXPECT_TRUE(proc.end()->exited() && proc.end()->exit_code() == 0) << proc.end()->describe();
  EXPECT_EQ(out.contents(), "calls=200 signals=0\n");
}

INSTANTIATE_TEST_SUITE_P(StepOvers, HeldLend,
                         ::testing::Values(StepOverChoice::Outline, StepOverChoice::Auto,
                                           StepOverChoice::Emulate, StepOverChoice::SingleStep),
                         [](const auto& info) {
                           return std::string(kStepOverNames.name(info.param));
                         });

// A tracer process of the test's own (forked): attaches to `target`, puts an int3 probe on its
// site with its copy placed at the first hit, and dies at that hit's `n`-th system call on the
// target (PROBECOST_DIE_AT_HIT's 1+n). Writes 'r' to `report` once tracing, 'i' once the first
// hit's scratch page is mapped (the death came after the injected mmap).
pid_t trace_and_die(pid_t target, int n, int report) {
  pid_t tracer = ::fork();
  if (tracer != 0) return tracer;
  int code = 3;
  try {
    auto family = Family::attach(target, false);
    TracedProcess& proc = family->root();
    Symbol site = ProcessSymbols(target).resolve(kSite);
    auto placed = [report] { [[maybe_unused]] auto w = ::write(report, "i", 1); };
    FastStepOver step(StepOverChoice::Outline, proc.memory(), later_mapper(proc, placed),
                      &proc.space().relocated());
    add_int3_probe(proc, step, site.address, site.name, "");
    Session session(proc, step);
    fault_plan::plan_death(("1+" + std::to_string(n)).c_str());
    [[maybe_unused]] auto w = ::write(report, "r", 1);
    run_session(*family, session);
    code = 0;
  } catch (const std::exception&) {
  }
  ::_exit(code);
}

// One death: the target's output and status, and whether the mmap was over before it.
struct Death {
  std::string output;
  int status = 0;
  bool after_mmap = false;
};

Death die_at(int n, int threads) {
  int in[2], out[2], report[2];
  EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(report, O_CLOEXEC), 0);
  pid_t target = ::fork();
  if (target == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    std::string t = std::to_string(threads);
    ::execl(LOOP_TARGET_PIE, LOOP_TARGET_PIE, "20", t.c_str(), "--pause",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  FILE* from = ::fdopen(out[0], "r");
  char line[256] = "";
  EXPECT_NE(std::fgets(line, sizeof line, from), nullptr);  // phase1: waits for a line
  pid_t tracer = trace_and_die(target, n, report[1]);
  ::close(report[1]);
  char c = 0;
  EXPECT_EQ(::read(report[0], &c, 1), 1);
  EXPECT_EQ(c, 'r');
  EXPECT_EQ(::write(in[1], "\n", 1), 1);
  ::waitpid(tracer, nullptr, 0);
  Death d;
  d.after_mmap = ::read(report[0], &c, 1) == 1 && c == 'i';
  for (char buf[256]; std::fgets(buf, sizeof buf, from);) d.output += buf;
  ::waitpid(target, &d.status, 0);
  ::close(in[1]);
  ::close(report[0]);
  std::fclose(from);
  return d;
}

// Every system call of the first hit up to its scratch page's mmap, and a few after: the
// program ends as untraced (the trap area's handler stands in for the dead tracer at the
// later hits), with no stray SIGTRAP.
void every_death_of_the_first_hit(int threads) {
  int after = 0, before = 0;
  std::string calls = "calls=" + std::to_string(40 * threads) + " signals=0\n";
  for (int n = 1; n <= 120 && after < 3; ++n) {
    Death d = die_at(n, threads);
    ++(d.after_mmap ? after : before);
    EXPECT_TRUE(WIFEXITED(d.status) && WEXITSTATUS(d.status) == 0)
        << "death at 1+" << n << ": the program's status " << d.status;
    EXPECT_EQ(d.output, calls) << "death at 1+" << n;
  }
  EXPECT_EQ(after, 3) << "the first hit never got to its mmap";
  EXPECT_GT(before, 5) << "few deaths before the mmap was over";
  std::cout << before << " deaths before the scratch page's mmap was over, " << after << " after\n";
}

}  // namespace

TEST(HeldLendDeath, ADeathWhileTheHitThreadMapsItsCopysPageLeavesTheProgramRight) {
  every_death_of_the_first_hit(1);
}

// With another thread running, the wait that stops it collected the hit thread's stop, and
// the call's way back led to one past the int3, inside the instruction: it is rewound before
// that wait now. (This site's tail, `addq` without its `lock`, does the same as the whole:
// this one passed before too.)
TEST(HeldLendDeath, TheSameWithAnotherThreadRunning) {
  every_death_of_the_first_hit(2);
}
