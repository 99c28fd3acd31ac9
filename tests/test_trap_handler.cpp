// The in-process SIGTRAP handler, in this test process, as in a traced process whose tracer
// has died: int3 bytes written on the kind sites (inferior/kinds.S), no tracer, and every call
// must give the untouched result; every other SIGTRAP must reach this program's own handler,
// exactly as the kernel would have delivered it. No ptrace; the death tests fork (label ptrace).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "breakpoint/decoder.hpp"
#include "breakpoint/trap_area.hpp"
#include "breakpoint/trap_handler.hpp"
#include "common/error.hpp"
#include "inferior/sites.hpp"
#include "tests/self_patch.hpp"

namespace probecost::trap {
namespace {

using selftest::SelfMemory;
using KindFn = void (*)(std::uint64_t);

KernelSigaction sigtrap_disposition(const KernelSigaction* set = nullptr) {
  KernelSigaction old{};
  if (syscall(SYS_rt_sigaction, SIGTRAP, set, &old, 8) != 0) throw Error::from_errno("sigaction");
  return old;
}

// A read-exec anonymous mapping within 1 GiB of `near`, as the tracer maps one in a tracee.
RuntimeAddr map_area(RuntimeAddr near, std::uint64_t size) {
  constexpr std::uint64_t kStep = 16ull << 20;
  for (std::uint64_t k = 1; k < 64; ++k) {
    for (std::int64_t sign : {-1, 1}) {
      std::uint64_t hint =
          (near.value() & ~(kStep - 1)) + sign * static_cast<std::int64_t>(k * kStep);
      void* p = mmap(reinterpret_cast<void*>(hint), size, PROT_READ | PROT_EXEC,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p != MAP_FAILED) return RuntimeAddr(reinterpret_cast<std::uint64_t>(p));
    }
  }
  throw Error("no room for the trap area");
}

// The area of this process, with our handler installed over the program's disposition of the
// moment, for one test.
class InstalledHandler {
 public:
  InstalledHandler()
      : layout_(Layout::of(64, true, 64)),
        at_(map_area(selftest::address_of("probecost_kind_nop"), layout_.size)),
        writer_(SelfMemory::instance(), at_, layout_, getpid()) {
    program_ = sigtrap_disposition();
    KernelSigaction ours = our_disposition(program_, writer_.handler(), writer_.restorer());
    writer_.set_dispositions(program_, ours);
    sigtrap_disposition(&ours);
    writer_.set_state(HandlerState::Installed);
  }
  ~InstalledHandler() {
    unprobe_all();
    sigtrap_disposition(&program_);
    munmap(reinterpret_cast<void*>(at_.value()), layout_.size);
  }
  InstalledHandler(const InstalledHandler&) = delete;
  InstalledHandler& operator=(const InstalledHandler&) = delete;

  // The int3 at `site`, recorded first; the original byte back when the test ends.
  struct Probe {
    RuntimeAddr site;
    std::uint8_t original;
    RuntimeAddr resume;
  };
  Probe probe(RuntimeAddr site, RuntimeAddr tracer_copy = {}) {
    std::uint8_t bytes[15];
    SelfMemory::instance().read(site, bytes);
    auto in = decode(bytes, site);
    if (!in) throw Error("cannot decode at " + site.hex());
    std::string why;
    auto resume = writer_.place_copy(*in, why);
    if (!resume) throw Error("no copy: " + why);
    SiteRecord r;
    r.site = site;
    r.resume = *resume;
    r.moved = moved_addresses(*in, tracer_copy);
    r.original = bytes[0];
    r.length = in->length;
    writer_.add(r);
    SelfMemory::instance().write_byte(site, 0xCC);
    probes_.push_back({site, bytes[0], *resume});
    return probes_.back();
  }
  void unprobe_all() {
    for (const auto& p : probes_) SelfMemory::instance().write_byte(p.site, p.original);
    writer_.remove_all();
    probes_.clear();
  }
  AreaWriter& writer() { return writer_; }

  // Our handler called directly, as the kernel would call it, on a made-up frame.
  void call_handler(siginfo_t& info, ucontext_t& uc) {
    auto fn = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(writer_.handler().value());
    fn(SIGTRAP, &info, &uc);
  }

 private:
  Layout layout_;
  RuntimeAddr at_;
  AreaWriter writer_;
  KernelSigaction program_{};
  std::vector<Probe> probes_;
};

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
