#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include "tracer/os/wait_status.hpp"

using namespace probecost;

// Raw statuses as the kernel encodes them (see wait(2) and ptrace(2)).
TEST(WaitStatus, Decodes) {
  WaitStatus exited(3 << 8);
  EXPECT_TRUE(exited.exited());
  EXPECT_EQ(exited.exit_code(), 3);
  WaitStatus killed(SIGKILL);
  EXPECT_TRUE(killed.killed());
  EXPECT_EQ(killed.term_signal(), SIGKILL);
  WaitStatus trap((SIGTRAP << 8) | 0x7f);
  EXPECT_TRUE(trap.signal_stop());
  EXPECT_EQ(trap.stop_signal(), SIGTRAP);
  WaitStatus clone((PTRACE_EVENT_CLONE << 16) | (SIGTRAP << 8) | 0x7f);
  EXPECT_FALSE(clone.signal_stop());
  EXPECT_EQ(clone.ptrace_event(), PTRACE_EVENT_CLONE);
  WaitStatus sc(((SIGTRAP | 0x80) << 8) | 0x7f);
  EXPECT_TRUE(sc.syscall_stop());
  EXPECT_FALSE(sc.signal_stop());
}

TEST(WaitStatus, ClassifiesTraps) {
  siginfo_t info{};
  info.si_code = SI_KERNEL;
  EXPECT_EQ(classify_trap(info), TrapCause::Breakpoint);
  info.si_code = TRAP_TRACE;
  EXPECT_EQ(classify_trap(info), TrapCause::SingleStep);
  info.si_code = SI_USER;
  EXPECT_EQ(classify_trap(info), TrapCause::Other);
}

// waitid's report (si_code CLD_*, si_status), as waitpid's status would have said it: a ptrace
// stop's whole code (event bits, 0x80 of a syscall-stop) is in si_status.
TEST(WaitStatus, FromWaitidReport) {
  auto of = [](int code, int status) {
    siginfo_t info{};
    info.si_code = code;
    info.si_status = status;
    return WaitStatus::of(info).raw();
  };
  EXPECT_EQ(of(CLD_EXITED, 3), 3 << 8);
  EXPECT_EQ(of(CLD_KILLED, SIGKILL), SIGKILL);
  EXPECT_EQ(of(CLD_DUMPED, SIGSEGV), SIGSEGV | 0x80);
  EXPECT_EQ(of(CLD_TRAPPED, SIGTRAP), (SIGTRAP << 8) | 0x7f);
  EXPECT_EQ(of(CLD_TRAPPED, SIGTRAP | 0x80), ((SIGTRAP | 0x80) << 8) | 0x7f);
  int clone = SIGTRAP | (PTRACE_EVENT_CLONE << 8);
  EXPECT_EQ(of(CLD_TRAPPED, clone), (clone << 8) | 0x7f);
  EXPECT_EQ(WaitStatus(of(CLD_TRAPPED, clone)).ptrace_event(), PTRACE_EVENT_CLONE);
  EXPECT_EQ(of(CLD_STOPPED, SIGSTOP), (SIGSTOP << 8) | 0x7f);
}
