// Stack snapshots in-process (issue 26): a jump probe's trampoline copies the registers and the
// top of the stack into a call buffer; the test plays the tracer (it enters each thread's stack
// bounds in the buffer's thread table) and the reader (it unwinds each copy with libdw, from
// this process's modules). The stacks must equal what the program's own unwinder (glibc's
// backtrace(), from inside the probed function) says at the same hits; a stack it cannot bound
// is not copied, and says why; a copy never runs past its stack's end.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "breakpoint/in_tracee/stack_record.hpp"
#include "common/error.hpp"
#include "self_patch.hpp"
#include "tracer/symbols/stack_unwind.hpp"

using namespace probecost;
using namespace probecost::jump;
using namespace probecost::selftest;

namespace {

// What the probed function saw of its own stack, by glibc's unwinder (libgcc's), at each hit.
std::vector<std::vector<std::uint64_t>> g_backtraces;
bool g_take_backtraces = false;

}  // namespace

extern "C" {
__attribute__((noinline)) int stack_target(int x) {
  asm volatile("" ::: "memory");
  if (g_take_backtraces) {
    void* frames[64];
    int n = backtrace(frames, 64);
    std::vector<std::uint64_t> v;
    for (int i = 0; i < n; ++i) v.push_back(reinterpret_cast<std::uintptr_t>(frames[i]));
    g_backtraces.push_back(v);
  }
  return x * 3 + 1;
}
__attribute__((noinline)) int stack_path_a(int x) {
  int r = stack_target(x);
  asm volatile("" ::: "memory");
  return r + 1;
}
__attribute__((noinline)) int stack_path_b(int x) {
  int r = stack_target(x + 1);
  asm volatile("" ::: "memory");
  return r + 2;
}
__attribute__((noinline)) int stack_path_c(int x) {
  int r = stack_path_b(x + 2);
  asm volatile("" ::: "memory");
  return r + 3;
}
__attribute__((noinline)) int stack_deep(int depth) {
  if (depth == 0) return stack_target(1);
  int r = stack_deep(depth - 1);
  asm volatile("" ::: "memory");
  return r + 1;
}
}

namespace {

#define NEED_RSEQ() \
  if (!have_rseq()) GTEST_SKIP() << "glibc registered no rseq in this process"

CallBufferConfig config(std::uint32_t stack_bytes) {
  CallBufferConfig c;
  c.cpus = static_cast<std::uint32_t>(std::thread::hardware_concurrency() * 2);
  c.capacity = 4 << 20;
  c.subbuffers = 16;
  c.max_ids = 4;
  c.stack_bytes = stack_bytes;
  return c;
}

// This thread's stack as the tracer would enter it (pthread_getattr_np: a thread's mapping,
// or for the main thread [the stack's end - RLIMIT_STACK, its end) from /proc/self/maps).
std::pair<std::uint64_t, std::uint64_t> my_stack() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr)) throw Error("pthread_getattr_np");
  void* at = nullptr;
  std::size_t size = 0;
  pthread_attr_getstack(&attr, &at, &size);
  pthread_attr_destroy(&attr);
  auto lo = reinterpret_cast<std::uintptr_t>(at);
  return {lo, lo + size};
}

std::uint64_t my_tp() {
  std::uint64_t tp;
  asm("mov %%fs:0, %0" : "=r"(tp));
  return tp;
}

struct Snapshots {
  LocalCallBuffer buffer;
  LocalArea area;
  std::unique_ptr<PatchSite> site;
  CallReader reader;
  std::vector<std::vector<std::uint8_t>> raw;

  explicit Snapshots(std::uint32_t stack_bytes)
      : buffer(config(stack_bytes)),
        area(address_of("stack_target"), jump::AreaConfig{}),
        reader(buffer.view(), buffer.layout(), __rdtsc(), {}) {}
  ThreadTable table() {
    return ThreadTable(buffer.view().subspan(buffer.layout().threads_offset, kThreadTableBytes));
  }
  void enter_this_thread() {
    auto [lo, hi] = my_stack();
    ASSERT_TRUE(table().enter(my_tp(), lo, hi));
  }
  void patch() {
    Function f = function_named("stack_target");
    std::string why;
    auto plan = plan_jump(f.start, f.code, f.start, why);
    if (!plan) throw Error("stack_target: " + why);
    SiteOptions options;
    options.id = 1;
    options.calls = buffer.target(1);
    auto placed = area.writer().add_site(*plan, options, why);
    if (!placed) throw Error("stack_target: " + why);
    site = std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch);
    site->install();
  }
  ~Snapshots() {
    if (site) site->remove();
  }
  // Every snapshot so far, oldest first per CPU.
  std::vector<StackSnapshot> drain() {
    std::uint32_t size = buffer.layout().record_size;
    reader.poll(__rdtsc(), true, [&](std::uint32_t, const std::uint8_t* data, std::size_t n) {
      for (std::size_t at = 0; at + size <= n; at += size)
        raw.emplace_back(data + at, data + at + size);
    });
    std::vector<StackSnapshot> out;
    for (const auto& r : raw) out.push_back(decode_snapshot(r));
    return out;
  }
};

TEST(StackSnapshots, EveryStackEqualsTheProgramsOwnBacktrace) {
  NEED_RSEQ();
  Snapshots s(16384);
  s.enter_this_thread();
  s.patch();
  g_backtraces.clear();
  g_take_backtraces = true;
  int sum = 0;
  for (int i = 0; i < 3; ++i) sum += stack_path_a(i);
  for (int i = 0; i < 5; ++i) sum += stack_path_b(i);
  for (int i = 0; i < 7; ++i) sum += stack_path_c(i);
  g_take_backtraces = false;
  EXPECT_GT(sum, 0);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 15u);
  ASSERT_EQ(g_backtraces.size(), 15u);
  SnapshotUnwinder unwinder(getpid(), 64);
  Function target = function_named("stack_target");
  std::map<std::string, int> by_caller;
  auto [lo, hi] = my_stack();
  for (std::size_t i = 0; i < snaps.size(); ++i) {
    const StackSnapshot& snap = snaps[i];
    EXPECT_EQ(snap.bound, SnapshotBound::Bounded);
    EXPECT_EQ(snap.rip, address_of("stack_target").value());
    EXPECT_EQ(snap.tp, my_tp());
    EXPECT_EQ(snap.stack.size(), std::min<std::uint64_t>(16384, hi - snap.sp));
    auto st = unwinder.unwind(snap);
    EXPECT_FALSE(st.truncated) << i;
    ASSERT_GE(st.ips.size(), 3u);
    // backtrace()'s frame 0 is inside stack_target (its call of backtrace; under ASan the
    // interceptor's own frame comes first); from the frame after it on both are return
    // addresses, and must be the same ones, all of them.
    std::vector<std::uint64_t> ours(st.ips.begin() + 1, st.ips.end());
    const auto& bt = g_backtraces[i];
    auto in_target = std::find_if(bt.begin(), bt.end(), [&](std::uint64_t ip) {
      return ip >= target.start.value() && ip < target.start.value() + target.code.size();
    });
    ASSERT_NE(in_target, bt.end());
    std::vector<std::uint64_t> theirs(in_target + 1, bt.end());
    EXPECT_EQ(ours, theirs) << "hit " << i;
    std::string caller = unwinder.describe(st.ips[1], true);
    ++by_caller[caller.substr(0, caller.find('+'))];
  }
  EXPECT_EQ(by_caller["stack_path_a"], 3);
  EXPECT_EQ(by_caller["stack_path_b"], 12);  // 5 of its own, 7 from stack_path_c
}

TEST(StackSnapshots, AThreadIsBoundedByItsOwnStack) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.patch();
  std::uint64_t lo = 0, hi = 0;
  std::thread t([&] {
    std::tie(lo, hi) = my_stack();
    s.table().enter(my_tp(), lo, hi);
    stack_path_a(1);
    s.table().forget(my_tp());
  });
  t.join();
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  EXPECT_GE(snaps[0].sp, lo);
  EXPECT_LT(snaps[0].sp, hi);
  EXPECT_EQ(snaps[0].stack.size(), std::min<std::uint64_t>(4096, hi - snaps[0].sp));
  SnapshotUnwinder unwinder(getpid(), 64);
  auto st = unwinder.unwind(snaps[0]);
  ASSERT_GE(st.ips.size(), 2u);
  EXPECT_EQ(unwinder.describe(st.ips[1], true).rfind("stack_path_a+", 0), 0u);
}

TEST(StackSnapshots, AThreadNobodyEnteredGetsNoCopy) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.patch();
  std::thread t([] { stack_path_a(1); });
  t.join();
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::UnknownThread);
  EXPECT_EQ(snaps[0].stack.size(), 0u);
}

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

TEST(StackSnapshots, ADeepStackIsCutAtTheSizeAndSaysSo) {
  NEED_RSEQ();
  Snapshots s(4096);
  s.enter_this_thread();
  s.patch();
  EXPECT_EQ(stack_deep(500), 4 + 500);
  auto snaps = s.drain();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].bound, SnapshotBound::Bounded);
  EXPECT_EQ(snaps[0].stack.size(), 4096u);
  SnapshotUnwinder unwinder(getpid(), 1024);
  auto st = unwinder.unwind(snaps[0]);
  EXPECT_TRUE(st.truncated);
  EXPECT_GE(st.ips.size(), 10u);
  for (std::size_t i = 2; i < st.ips.size(); ++i)
    EXPECT_EQ(unwinder.describe(st.ips[i], true).rfind("stack_deep+", 0), 0u) << i;
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
