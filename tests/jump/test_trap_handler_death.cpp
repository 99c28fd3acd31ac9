// The in-process SIGTRAP handler's default action: a SIGTRAP the program would have died of
// (raised with SIG_DFL, its own int3 with SIG_DFL or SIG_IGN) still kills it with SIGTRAP.
// Each test forks (a death test): label ptrace.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "trap_fixture.hpp"

namespace probecost::trap {
namespace {

// --- the default action: the process dies of SIGTRAP, as it would have without us ---

void with_disposition(void (*handler)(int), void (*body)()) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigaction(SIGTRAP, &sa, nullptr);
  InstalledHandler h;
  body();
  _exit(0);
}

TEST(TrapHandlerDeathTest, DefaultActionKillsOnARaisedSigtrap) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(with_disposition(SIG_DFL, [] { raise(SIGTRAP); }), ::testing::KilledBySignal(SIGTRAP),
              "");
}

TEST(TrapHandlerDeathTest, DefaultActionKillsOnTheProgramsInt3) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(with_disposition(SIG_DFL, [] { asm volatile("int3"); }),
              ::testing::KilledBySignal(SIGTRAP), "");
}

TEST(TrapHandlerDeathTest, IgnoredForcedTrapKillsAsTheKernelWould) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(with_disposition(SIG_IGN, [] { asm volatile("int3"); }),
              ::testing::KilledBySignal(SIGTRAP), "");
}

}  // namespace
}  // namespace probecost::trap
