// The in-process SIGTRAP handler, in this test process, as in a traced process whose tracer
// has died: int3 bytes written on the kind sites (inferior/kinds.S), no tracer, and every call
// must give the untouched result; every other SIGTRAP must reach this program's own handler,
// exactly as the kernel would have delivered it. No ptrace, no child process (the death tests
// are test_trap_handler_death.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/in_tracee/trap_handler.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"
#include "inferior/sites.hpp"
#include "self_patch.hpp"
#include "trap_fixture.hpp"

namespace probecost::trap {
namespace {

using KindFn = void (*)(std::uint64_t);

std::uint64_t run_kind(KindFn fn, std::uint64_t n) {
  probecost_kinds_checksum = 0;
  for (std::uint64_t i = 0; i < n; ++i) fn(i * 7919 + 3);
  return probecost_kinds_checksum;
}

class HandlerKind : public ::testing::TestWithParam<std::string> {};

TEST_P(HandlerKind, AHitWithNoTracerRunsTheDisplacedInstruction) {
  const std::string kind = GetParam();
  KindFn fn = inferior::kind_entry(kind.c_str());
  ASSERT_NE(fn, nullptr);
  std::uint64_t untouched = run_kind(fn, 1000);
  InstalledHandler h;
  RuntimeAddr site = selftest::address_of("probecost_kind_" + kind);
  h.probe(site);
  ASSERT_EQ(SelfMemory::instance().read_byte(site), 0xCC);
  EXPECT_EQ(run_kind(fn, 1000), untouched);
  h.unprobe_all();
  EXPECT_EQ(run_kind(fn, 1000), untouched);
}

INSTANTIATE_TEST_SUITE_P(Kinds, HandlerKind,
                         ::testing::Values("nop", "nop5", "endbr64", "push", "pop", "mov", "sub",
                                           "lea", "lea_rip", "load_rip", "store_rip", "jmp32",
                                           "jmp8", "call", "jcc_taken", "jcc_not_taken", "ret",
                                           "frame", "flags", "redzone", "syscall", "indirect"));

TEST(TrapHandler, TwoThreadsHittingCountExactly) {
  KindFn fn = inferior::kind_entry("push");
  std::uint64_t untouched = run_kind(fn, 20000);
  InstalledHandler h;
  h.probe(selftest::address_of("probecost_kind_push"));
  probecost_kinds_checksum = 0;
  std::thread a([&] {
    for (std::uint64_t i = 0; i < 10000; ++i) fn(i * 2 * 7919 + 3);
  });
  std::thread b([&] {
    for (std::uint64_t i = 0; i < 10000; ++i) fn((i * 2 + 1) * 7919 + 3);
  });
  a.join();
  b.join();
  EXPECT_EQ(probecost_kinds_checksum, untouched);
}

// --- what the tracer may have left a thread in when it died ---

siginfo_t info_with(int code) {
  siginfo_t info{};
  info.si_signo = SIGTRAP;
  info.si_code = code;
  return info;
}

ucontext_t context_at(std::uint64_t rip, bool trap_flag) {
  ucontext_t uc{};
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(rip);
  uc.uc_mcontext.gregs[REG_EFL] = 0x202 | (trap_flag ? 0x100 : 0);
  return uc;
}

TEST(TrapHandler, AHitResumesAtTheCopy) {
  InstalledHandler h;
  RuntimeAddr site = selftest::address_of("probecost_kind_mov");
  auto p = h.probe(site);
  siginfo_t info = info_with(SI_KERNEL);
  ucontext_t uc = context_at(site.value() + 1, false);
  h.call_handler(info, uc);
  EXPECT_EQ(static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RIP]), p.resume.value());
  h.unprobe_all();
}

TEST(TrapHandler, APendingTrapOfAThreadTheTracerMovedIsSpent) {
  InstalledHandler h;
  RuntimeAddr site = selftest::address_of("probecost_kind_jmp32");
  std::uint8_t bytes[15];
  SelfMemory::instance().read(site, bytes);
  auto in = decode(bytes, site);
  ASSERT_TRUE(in && in->relative_branch);
  RuntimeAddr tracer_copy(0x1000);  // where the tracer's own outline copy would be
  h.probe(site, tracer_copy);
  // Rewound onto the site, moved to the tracer's copy, emulated to the jump's target: the
  // thread goes on from there; a single-step's trap flag is cleared.
  for (std::uint64_t rip : {site.value(), tracer_copy.value(), in->target.value()}) {
    for (int code : {int{SI_KERNEL}, int{TRAP_TRACE}}) {
      siginfo_t info = info_with(code);
      ucontext_t uc = context_at(rip, code == TRAP_TRACE);
      h.call_handler(info, uc);
      EXPECT_EQ(static_cast<std::uint64_t>(uc.uc_mcontext.gregs[REG_RIP]), rip);
      EXPECT_EQ(uc.uc_mcontext.gregs[REG_EFL], 0x202);
    }
  }
  h.unprobe_all();
}

// --- the program's own SIGTRAP handler, chained as the kernel delivers ---

std::atomic<int> g_calls{0}, g_code{0};
std::atomic<bool> g_trap_blocked{false}, g_usr2_blocked{false}, g_on_altstack{false};
stack_t g_altstack{};

void program_handler(int sig, siginfo_t* info, void*) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  g_trap_blocked = sigismember(&now, SIGTRAP);
  g_usr2_blocked = sigismember(&now, SIGUSR2);
  char local;
  auto sp = reinterpret_cast<std::uintptr_t>(&local);
  auto alt = reinterpret_cast<std::uintptr_t>(g_altstack.ss_sp);
  g_on_altstack = alt && sp >= alt && sp < alt + g_altstack.ss_size;
  g_code = info->si_code;
  g_calls += sig == SIGTRAP;
}

struct ProgramHandler {
  explicit ProgramHandler(int flags) {
    struct sigaction sa {};
    sa.sa_sigaction = program_handler;
    sa.sa_flags = SA_SIGINFO | flags;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    sigaction(SIGTRAP, &sa, &old);
    g_calls = 0;
  }
  ~ProgramHandler() { sigaction(SIGTRAP, &old, nullptr); }
  struct sigaction old {};
};

TEST(TrapHandlerChain, ARaisedSigtrapReachesTheProgramsHandlerWithItsMask) {
  ProgramHandler program(0);
  InstalledHandler h;
  raise(SIGTRAP);
  EXPECT_EQ(g_calls, 1);
  EXPECT_EQ(g_code, SI_TKILL);
  EXPECT_TRUE(g_trap_blocked);
  EXPECT_TRUE(g_usr2_blocked);
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  EXPECT_FALSE(sigismember(&now, SIGUSR2));  // the interrupted mask is back
  EXPECT_FALSE(sigismember(&now, SIGTRAP));
}

TEST(TrapHandlerChain, TheProgramsOwnInt3ReachesItsHandler) {
  ProgramHandler program(0);
  InstalledHandler h;
  asm volatile("int3");
  EXPECT_EQ(g_calls, 1);
  EXPECT_EQ(g_code, SI_KERNEL);
}

TEST(TrapHandlerChain, NodeferLeavesSigtrapUnblocked) {
  ProgramHandler program(SA_NODEFER);
  InstalledHandler h;
  raise(SIGTRAP);
  EXPECT_EQ(g_calls, 1);
  EXPECT_FALSE(g_trap_blocked);
}

TEST(TrapHandlerChain, ResethandResetsToTheDefault) {
  ProgramHandler program(SA_RESETHAND);
  InstalledHandler h;
  raise(SIGTRAP);
  EXPECT_EQ(g_calls, 1);
  struct sigaction now {};
  sigaction(SIGTRAP, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(TrapHandlerChain, OnstackRunsTheProgramsHandlerOnItsAltStack) {
  std::vector<char> stack(1 << 16);
  g_altstack = {stack.data(), 0, stack.size()};
  stack_t old{};
  sigaltstack(&g_altstack, &old);
  {
    ProgramHandler program(SA_ONSTACK);
    InstalledHandler h;
    raise(SIGTRAP);
  }
  sigaltstack(&old, nullptr);
  EXPECT_EQ(g_calls, 1);
  EXPECT_TRUE(g_on_altstack);
  g_altstack = {};
}

TEST(TrapHandlerChain, IgnoredRaisedSigtrapStaysIgnored) {
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTRAP, &ign, &old);
  {
    InstalledHandler h;
    raise(SIGTRAP);  // sent by tgkill: dropped, as SIG_IGN drops it
  }
  sigaction(SIGTRAP, &old, nullptr);
  SUCCEED();
}

}  // namespace
}  // namespace probecost::trap
