// Jump-patched probes that count per CPU with rseq (see PerCpuCounter), in-process (see
// test_jump_exec.cpp): exact counts from four threads, on CPUs inside the counter row and
// outside it (the lock inc fallback), with timer signals that abort the restartable sequence.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <thread>

#include "jump_exec.hpp"

using namespace probecost;
using namespace probecost::selftest;

TEST(JumpExec, FourThreadsCountExactly) {
  std::string why;
  auto plan = plan_kind("frame", why);
  ASSERT_TRUE(plan) << why;
  for (Mode mode : {Mode::Count, Mode::PerCpu}) {
    if (mode == Mode::PerCpu && !have_rseq()) continue;
    auto p = place(*plan, mode);
    p.site->install();
    constexpr std::uint64_t kCalls = 200000;
    std::barrier start(kThreads);
    probecost_kinds_checksum = 0;
    hammer(inferior::kind_entry("frame"), kCalls, start);
    EXPECT_EQ(p.area->writer().hits(0), kThreads * kCalls) << name_of(mode);
    EXPECT_EQ(probecost_kinds_checksum,
              0u + kThreads * (kCalls * (kCalls - 1) / 2) + (0ull + 1 + 2 + 3) * (kCalls << 32))
        << name_of(mode);
    p.site->remove();
  }
}

namespace {

// The signal handler sees where the thread will resume: after an rseq abort, the abort address.
std::atomic<std::uint64_t> g_abort_ip{0}, g_aborts{0}, g_signals{0};

void count_aborts(int, siginfo_t*, void* context) {
  auto rip = static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP];
  ++g_signals;
  if (static_cast<std::uint64_t>(rip) == g_abort_ip.load()) ++g_aborts;
}

// The abort address: right after the rseq signature in the trampoline's cold code.
std::uint64_t abort_ip_of(const Trampoline& t) {
  const std::uint8_t sig[] = {0x53, 0x30, 0x05, 0x53};
  auto it = std::search(t.code.begin(), t.code.end(), std::begin(sig), std::end(sig));
  return it == t.code.end() ? 0 : t.address.value() + (it - t.code.begin()) + 4;
}

}  // namespace

// Per-CPU counting under fire: threads pinned to CPUs inside and outside the counter row (the
// latter take the lock inc fallback), each with a 50 us timer signal that lands inside the
// restartable sequence now and then (a wrong abort signature or descriptor gets the process
// killed; a sequence the kernel did not see would lose counts).
TEST(JumpExec, PerCpuCountsExactlyWithFallbackAndSignals) {
  if (!have_rseq()) GTEST_SKIP() << "no rseq";
  std::string why;
  auto plan = plan_kind("nop5", why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, Mode::PerCpu, 1 << 12, 1);  // a row of 1: CPU 0 only
  p.site->install();
  g_abort_ip = abort_ip_of(p.placed.trampoline);
  ASSERT_NE(g_abort_ip.load(), 0u);
  g_aborts = 0;
  struct sigaction sa {};
  sa.sa_sigaction = count_aborts;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  ::sigaction(SIGUSR2, &sa, nullptr);
  constexpr std::uint64_t kCalls = 1'000'000;
  KindFn fn = inferior::kind_entry("nop5");
  const int cpus = get_nprocs();
  auto round = [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(t % cpus, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        sigevent sev{};
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGUSR2;
        sev._sigev_un._tid = gettid();
        timer_t timer;
        timer_create(CLOCK_MONOTONIC, &sev, &timer);
        itimerspec every{{0, 50'000}, {0, 50'000}};
        timer_settime(timer, 0, &every, nullptr);
        for (std::uint64_t i = 0; i < kCalls; ++i) fn(i);
        timer_delete(timer);
      });
    }
    for (auto& th : threads) th.join();
  };
  // Until a signal lands inside the sequence at least once: about one timer signal in
  // 10,000 does here (the sequence is 6 of the trampoline's ~25 instructions, and a signal is
  // mostly delivered at a preemption), a round sees ~1,400.
  std::uint64_t rounds = 0;
  while (rounds < 100 && g_aborts.load() == 0) {
    round();
    ++rounds;
  }
  ::signal(SIGUSR2, SIG_IGN);  // a last timer signal may still be pending
  EXPECT_EQ(p.area->writer().hits(0), rounds * kThreads * kCalls);
  std::printf("per-CPU: %llu of %llu timer signals landed inside the restartable sequence\n",
              static_cast<unsigned long long>(g_aborts.load()),
              static_cast<unsigned long long>(g_signals.load()));
  p.site->remove();
  // Where a signal lands is the scheduler's choice: on a quiet machine 100 rounds (~150,000
  // signals) can pass without one inside the sequence (seen in a bare Debian 12 chroot). The
  // counts above were exact either way; say plainly that the restart path went untested.
  if (g_aborts.load() == 0) {
    GTEST_SKIP() << "no timer signal landed inside the restartable sequence in " << rounds
                 << " rounds: the counts were exact, the restart path was not exercised";
  }
}
