// Issue 25: a signal that reaches a thread while the tracer holds it (single-stepped over a site,
// the others stopped meanwhile) is delivered later, and must be delivered as it was sent: the
// same value, code, sender and status in the program's SA_SIGINFO handler, none lost, none
// twice, in order for one real-time signal number (tests/targets/siginfo_target.cpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "run_capture.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;
using probecost::test::MemFile;

namespace {

constexpr const char* kRounds = "3";

// The signals queued for the whole process (/proc/PID/status ShdPnd).
std::uint64_t process_pending(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("ShdPnd:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

// At the burst point the worker asked for a burst, with the signals blocked: it is held there
// until the burst's last signal (SIGRTMIN+3, sent after the others) is queued, and its signals
// unblocked, so that the whole burst reaches it while it is single-stepped over the site. A
// condition polled, bounded by the test's timeout.
bool hold_for_burst(Task& t, pid_t pid, RuntimeAddr burst_point) {
  auto rip = t.rip();
  if (!rip || *rip != burst_point + 1) return false;
  std::uint64_t last = 1ull << (SIGRTMIN + 3 - 1);
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!(process_pending(pid) & last) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  EXPECT_TRUE(process_pending(pid) & last) << "the burst never came";
  auto mask = t.blocked_signals();
  std::uint64_t ours = 0;
  for (int sig : {SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM}) ours |= 1ull << (sig - 1);
  for (int sig = SIGRTMIN; sig <= SIGRTMIN + 3; ++sig) ours |= 1ull << (sig - 1);
  if (mask) t.set_blocked_signals(*mask & ~ours);
  return false;  // then handled as any hit
}

std::string traced_output(std::uint64_t& hits) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = {SIGINFO_TARGET, kRounds};
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  ProcessSymbols symbols(proc->pid());
  Symbol site = symbols.resolve("probecost_test_site");
  Symbol burst = symbols.resolve("probecost_burst_point");
  proc->space().sites().add(site.address, site.name).enable();
  proc->space().sites().add(burst.address, burst.name).enable();
  SingleStepOver step;
  Session session(*proc, step);
  pid_t pid = proc->pid();
  session.set_trap_hook([&](Task& t) { return hold_for_burst(t, pid, burst.address); });
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  hits = proc->space().sites().find(site.address)->hits;
  EXPECT_EQ(proc->space().sites().find(burst.address)->hits, 12u);  // 4 bursts a round
  EXPECT_TRUE(proc->end() && proc->end()->exited() && proc->end()->exit_code() == 0)
      << (proc->end() ? proc->end()->describe() : "no end");
  return out.contents();
}

}  // namespace

TEST(SignalInformation, HeldSignalsReachTheHandlerAsSent) {
  auto untraced = probecost::test::run_command({SIGINFO_TARGET, kRounds});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  ASSERT_NE(untraced.out.find("signals=123\n"), std::string::npos) << untraced.out;
  std::uint64_t hits = 0;
  std::string traced = traced_output(hits);
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(traced, untraced.out);
}
