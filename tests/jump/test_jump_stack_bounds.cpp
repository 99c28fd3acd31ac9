// Stack snapshots in-process (issue 26), at the edges of a stack: a stack the trampoline cannot
// bound (a sigaltstack, a coroutine) is not copied and says why; a copy never runs past its
// stack's end; a copy cut by a preemption or a signal is taken again whole; a site reached with
// DF set copies nothing. The shared part: stack_snapshots.hpp.
#include "stack_snapshots.hpp"

namespace {

void on_usr2(int) {
  stack_path_a(2);
}

TEST(StackSnapshots, AnAlternateSignalStackIsNotCopied) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.enter_this_thread();
  s.patch();
  std::vector<std::uint8_t> alt(64 * 1024);
  stack_t ss{}, old{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  ASSERT_EQ(sigaltstack(&ss, &old), 0);
  struct sigaction sa {
  }, before{};
  sa.sa_handler = on_usr2;
  sa.sa_flags = SA_ONSTACK;
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &before), 0);
  raise(SIGUSR2);
  sigaction(SIGUSR2, &before, nullptr);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  stack_path_a(3);  // back on its own stack: copied
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 2u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::OffStack);
  EXPECT_EQ(snaps[0].stack.size(), 0u);
  EXPECT_GE(snaps[0].sp, reinterpret_cast<std::uintptr_t>(alt.data()));
  EXPECT_EQ(snaps[1].bound, SnapshotBound::Bounded);
}

ucontext_t g_main_ctx, g_co_ctx;
void coroutine() {
  stack_path_b(1);
  swapcontext(&g_co_ctx, &g_main_ctx);
}

TEST(StackSnapshots, ACoroutinesStackIsNotCopied) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.enter_this_thread();
  s.patch();
  std::vector<std::uint8_t> stack(64 * 1024);
  getcontext(&g_co_ctx);
  g_co_ctx.uc_stack.ss_sp = stack.data();
  g_co_ctx.uc_stack.ss_size = stack.size();
  g_co_ctx.uc_link = &g_main_ctx;
  makecontext(&g_co_ctx, coroutine, 0);
  ASSERT_EQ(swapcontext(&g_main_ctx, &g_co_ctx), 0);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::OffStack);
  EXPECT_EQ(snaps[0].stack.size(), 0u);
}

// A thread whose stack's last byte is the last of its mapping, with a PROT_NONE page right
// above: a copy one byte too long faults, and kills the test.
TEST(StackSnapshots, AStackAtItsMappingsEndIsCopiedToItsEndOnly) {
  NEED_RSEQ();
  Snapshots s(16384);
  s.patch();
  constexpr std::size_t kStack = 256 * 1024, kPage = 4096;
  void* m =
      mmap(nullptr, kStack + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto lo = reinterpret_cast<std::uintptr_t>(m), hi = lo + kStack;
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(hi), kPage, PROT_NONE), 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, m, kStack);
  struct Arg {
    Snapshots* s;
    std::uint64_t lo, hi;
  } arg{&s, lo, hi};
  pthread_t t;
  auto body = [](void* p) -> void* {
    auto* a = static_cast<Arg*>(p);
    a->s->table().enter(my_tp(), a->lo, a->hi);
    stack_path_a(1);
    a->s->table().forget(my_tp());
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, body, &arg), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  auto snaps = s.drain();
  munmap(m, kStack + kPage);
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  ASSERT_LT(hi - snaps[0].sp, 16384u) << "the thread's frame should be near its stack's end";
  EXPECT_EQ(snaps[0].stack.size(), hi - snaps[0].sp);
}

// A copy preempted in its rep movsb is aborted by the kernel and starts over: it must start
// with the site's own flags again (the copy leaves its destination in the register that held
// the direction flag). A spinning thread on the same CPU makes the preemptions; every
// snapshot must be whole and bounded, none "DF set".
TEST(StackSnapshots, ACopyPreemptedInTheMiddleStartsOverWithTheSitesFlags) {
  NEED_RSEQ();
  Snapshots s(16384);
  s.enter_this_thread();
  s.patch();
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    sched_setaffinity(0, sizeof one, &one);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::map<SnapshotBound, std::uint64_t> bounds;
  std::uint64_t short_copies = 0;
  std::uint32_t size = s.buffer.layout().record_size;
  const std::uint64_t hi = my_stack().second;
  int sum = 0;
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 100; ++i) sum += stack_target(i);
    s.reader.poll(__rdtsc(), true, [&](std::uint32_t, const std::uint8_t* data, std::size_t n) {
      for (std::size_t at = 0; at + size <= n; at += size) {
        StackSnapshot snap = decode_snapshot({data + at, size});
        ++bounds[snap.bound];
        if (snap.stack.size() != std::min<std::uint64_t>(16384, hi - snap.sp)) ++short_copies;
      }
    });
  }
  stop = true;
  hog.join();
  sched_setaffinity(0, sizeof before, &before);
  EXPECT_GT(sum, 0);
  EXPECT_EQ(bounds[SnapshotBound::Bounded], 100000u);
  EXPECT_EQ(bounds[SnapshotBound::DirectionFlag], 0u);
  EXPECT_EQ(short_copies, 0u);
}

// stack_target called with DF set (against the ABI, as a hand-written routine may): the copy is
// a rep movsb, so the trampoline copies nothing and says why; the next hit, DF clear, is copied.
// The probe's abort path reads the flags again (a retry no longer takes the copy's %rdi for DF).
extern "C" int df_call_stack_target(int x);
asm(R"(
  .text
  .type df_call_stack_target, @function
df_call_stack_target:
  push %rbp
  std
  call stack_target
  cld
  pop %rbp
  ret
  .size df_call_stack_target, .-df_call_stack_target
)");

TEST(StackSnapshots, ASiteReachedWithTheDirectionFlagSetIsNotCopied) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.enter_this_thread();
  s.patch();
  EXPECT_EQ(df_call_stack_target(2), 7);
  EXPECT_EQ(stack_path_a(2), 8);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 2u);
  if (snaps[0].tsc > snaps[1].tsc) std::swap(snaps[0], snaps[1]);  // per CPU: a move reorders
  EXPECT_EQ(snaps[0].bound, SnapshotBound::DirectionFlag);
  EXPECT_EQ(snaps[0].stack.size(), 0u);
  EXPECT_EQ(snaps[1].bound, SnapshotBound::Bounded);
  EXPECT_GT(snaps[1].stack.size(), 0u);
}

// A signal delivered inside the restartable sequence aborts it, and the kernel restarts it
// from its start: a register the sequence writes (the copy's %rdi) must not be what it tests
// there. Made certain here: a coroutine's stack whose bounds, as entered, run one page past it
// into a PROT_NONE page; the copy faults there, the SIGSEGV handler opens the page, and the
// sequence runs again. Before: the direction flag was kept in %rdi, and the second run said
// "the direction flag set at the site" and copied nothing.
std::uint8_t* g_shut_page = nullptr;
int g_faults = 0;

void open_shut_page(int, siginfo_t* si, void*) {
  auto* at = static_cast<std::uint8_t*>(si->si_addr);
  if (!g_shut_page || at < g_shut_page || at >= g_shut_page + 4096) std::abort();
  ++g_faults;
  mprotect(g_shut_page, 4096, PROT_READ | PROT_WRITE);
}

TEST(StackSnapshots, ACopyCutByASignalIsTakenAgainWhole) {
  NEED_RSEQ();
  constexpr std::size_t kStack = 64 * 1024, kPage = 4096;
  Snapshots s(16384);
  void* m =
      mmap(nullptr, kStack + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* base = static_cast<std::uint8_t*>(m);
  g_shut_page = base + kStack;
  g_faults = 0;
  ASSERT_EQ(mprotect(g_shut_page, kPage, PROT_NONE), 0);
  auto lo = reinterpret_cast<std::uintptr_t>(base);
  ASSERT_TRUE(s.table().enter(my_tp(), lo, lo + kStack + kPage));
  s.patch();
  struct sigaction sa {
  }, old{};
  sa.sa_sigaction = open_shut_page;
  sa.sa_flags = SA_SIGINFO;
  ASSERT_EQ(sigaction(SIGSEGV, &sa, &old), 0);
  getcontext(&g_co_ctx);
  g_co_ctx.uc_stack.ss_sp = base;
  g_co_ctx.uc_stack.ss_size = kStack;
  g_co_ctx.uc_link = &g_main_ctx;
  makecontext(&g_co_ctx, coroutine, 0);
  ASSERT_EQ(swapcontext(&g_main_ctx, &g_co_ctx), 0);
  sigaction(SIGSEGV, &old, nullptr);
  auto snaps = s.drain();
  munmap(m, kStack + kPage);
  EXPECT_EQ(g_faults, 1);
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  EXPECT_EQ(snaps[0].stack.size(),
            std::min<std::uint64_t>(16384, lo + kStack + kPage - snaps[0].sp));
}

}  // namespace
