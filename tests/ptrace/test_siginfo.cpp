// Issue 25: a signal that reaches a thread while the tracer holds it (single-stepped over a site,
// the others stopped meanwhile) is delivered later, and must be delivered as it was sent: the
// same value, code, sender and status in the program's SA_SIGINFO handler, none lost, none
// twice, in order for one real-time signal number (tests/targets/siginfo_target.cpp).
#include <gtest/gtest.h>

#include "run_capture.hpp"
#include "tracer/core/event_loop.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;
using probecost::test::MemFile;

namespace {

constexpr const char* kRounds = "3";

std::string traced_output(std::uint64_t& hits) {
  MemFile out;
  LaunchSpec spec;
  spec.argv = {SIGINFO_TARGET, kRounds};
  spec.stdout_fd = out.fd;
  auto family = Family::launch(spec);
  TracedProcess* proc = &family->root();
  Symbol site = ProcessSymbols(proc->pid()).resolve("probecost_test_site");
  proc->sites().add(site.address, site.name).enable();
  SingleStepOver step;
  Session session(*proc, step);
  EXPECT_EQ(run_session(*family, session), RunEnd::ProcessEnded);
  hits = proc->sites().find(site.address)->hits;
  EXPECT_TRUE(proc->end() && proc->end()->exited() && proc->end()->exit_code() == 0)
      << (proc->end() ? proc->end()->describe() : "no end");
  return out.contents();
}

}  // namespace

TEST(SignalInformation, HeldSignalsReachTheHandlerAsSent) {
  auto untraced = probecost::test::run_command({SIGINFO_TARGET, kRounds});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  ASSERT_NE(untraced.out.find("signals=93\n"), std::string::npos) << untraced.out;
  std::uint64_t hits = 0;
  std::string traced = traced_output(hits);
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(traced, untraced.out);
}
