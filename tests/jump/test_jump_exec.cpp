// Jump-patched probes run in-process: functions of this test (inferior/kinds.S) are patched
// through /proc/self/mem with a jump to a trampoline in a shared area mapped twice, called, and
// their results compared with the untouched run; hit counts and event records are checked
// exactly. See self_patch.hpp for the in-process stand-in of the tracer.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/rseq.h>
#include <sys/sysinfo.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <map>
#include <thread>

#include "common/error.hpp"
#include "inferior/sites.hpp"
#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::selftest;

namespace {

using KindFn = void (*)(std::uint64_t);

// The function a kind's site is in: probecost_call_KIND, except the ret kind, whose site is
// a function of its own.
std::string function_of(const std::string& kind) {
  return kind == "ret" ? "probecost_kind_ret" : "probecost_call_" + kind;
}

struct Patched {
  std::unique_ptr<LocalArea> area;
  JumpPlan plan;
  jump::PlacedSite placed;
  std::unique_ptr<PatchSite> site;
};

std::optional<JumpPlan> plan_kind(const std::string& kind, std::string& why) {
  Function f = function_named(function_of(kind));
  return plan_jump(f.start, f.code, address_of("probecost_kind_" + kind), why);
}

// How a trampoline counts: lock inc, per CPU with rseq, or with an event record per hit.
enum class Mode { Count, PerCpu, Events };

std::string name_of(Mode m) {
  return m == Mode::Count ? "count" : m == Mode::PerCpu ? "percpu" : "events";
}

void PrintTo(Mode m, std::ostream* os) {
  *os << name_of(m);
}

Patched place(const JumpPlan& plan, Mode mode, std::uint64_t ring = 1 << 12, std::uint32_t cpus = 0,
              FlagSave flags = FlagSave::Lahf) {
  Patched p;
  jump::AreaConfig config{4, 4096, 1, ring};
  if (mode == Mode::PerCpu) {
    if (!have_rseq()) throw Error("no rseq registration in this process");
    config.cpus = cpus ? cpus : static_cast<std::uint32_t>(get_nprocs_conf());
    config.rseq_offset = static_cast<std::int32_t>(__rseq_offset);
  }
  p.area = std::make_unique<LocalArea>(plan.site, config);
  p.plan = plan;
  std::string why;
  auto placed = p.area->writer().add_site(plan, site_options(7, mode == Mode::Events, flags), why);
  if (!placed) throw Error("cannot place: " + why);
  p.placed = *placed;
  p.site = std::make_unique<PatchSite>(SelfMemory::instance(), p.placed.patch);
  return p;
}

std::uint64_t arg_of(std::uint64_t i) {
  // Around the flags kind's cmp $5, and negative too.
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(i % 13) - 3) + (i << 20);
}

struct Result {
  std::uint64_t checksum, slot;
  bool operator==(const Result&) const = default;
};

Result run(KindFn fn, std::uint64_t n) {
  probecost_kinds_checksum = 0;
  probecost_kinds_slot = 0;
  for (std::uint64_t i = 0; i < n; ++i) fn(arg_of(i));
  return {probecost_kinds_checksum, probecost_kinds_slot};
}

std::vector<std::uint8_t> bytes_at(RuntimeAddr at, std::size_t n) {
  std::vector<std::uint8_t> b(n);
  SelfMemory::instance().read(at, b);
  return b;
}

const std::vector<std::string> kRunnable = {
    "nop",  "nop5",      "endbr64", "push",          "pop",       "mov",
    "sub",  "lea",       "lea_rip", "load_rip",      "store_rip", "jmp32",
    "jmp8", "jcc_taken", "frame",   "jcc_not_taken", "flags",     "redzone"};

class KindTest : public ::testing::TestWithParam<std::tuple<std::string, Mode>> {};

}  // namespace

TEST_P(KindTest, SameResultAndExactHits) {
  const auto& [kind, mode] = GetParam();
  if (mode == Mode::PerCpu && !have_rseq()) GTEST_SKIP() << "no rseq";
  const bool events = mode == Mode::Events;
  KindFn fn = inferior::kind_entry(kind.c_str());
  ASSERT_NE(fn, nullptr);
  constexpr std::uint64_t kCalls = 1000;
  Result untouched = run(fn, kCalls);
  std::string why;
  auto plan = plan_kind(kind, why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, mode);
  auto original = bytes_at(plan->site, plan->length);
  p.site->install();
  EXPECT_EQ(run(fn, kCalls), untouched);
  EXPECT_EQ(p.area->writer().hits(0), kCalls);
  if (events) {
    std::uint64_t cursor = 0;
    auto d = jump::drain(p.area->writer().ring(0), cursor, true);
    EXPECT_EQ(d.lost, 0u);
    ASSERT_EQ(d.records.size(), kCalls);
    for (std::uint64_t i = 0; i < kCalls; ++i) {
      EXPECT_EQ(d.records[i].id, 7u);
      EXPECT_EQ(d.records[i].arg, arg_of(i)) << i;
      if (i) {
        EXPECT_GE(d.records[i].tsc, d.records[i - 1].tsc);
      }
    }
  }
  p.site->remove();
  EXPECT_EQ(bytes_at(plan->site, plan->length), original);
  EXPECT_EQ(run(fn, kCalls), untouched);
  EXPECT_EQ(p.area->writer().hits(0), kCalls);  // no hits once removed
}

INSTANTIATE_TEST_SUITE_P(AllKinds, KindTest,
                         ::testing::Combine(::testing::ValuesIn(kRunnable),
                                            ::testing::Values(Mode::Count, Mode::PerCpu,
                                                              Mode::Events)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + name_of(std::get<1>(info.param));
                         });

TEST(JumpExec, RefusedKindsSayWhy) {
  const std::map<std::string, std::string> reasons = {
      {"call", "a call pushes its own address"},
      {"ret", "the function ends 1 bytes after the site"},
      {"branch_in", "branches to"},
      {"short", "the function ends 4 bytes after the site"},
      {"syscall", "is a system call"},
      {"indirect", "indirect jump"},
  };
  for (const auto& [kind, reason] : reasons) {
    std::string why;
    EXPECT_FALSE(plan_kind(kind, why)) << kind;
    EXPECT_NE(why.find(reason), std::string::npos) << kind << ": " << why;
  }
}

TEST(JumpExec, FlagsArePreservedAndTheTestWouldSeeThemLost) {
  KindFn fn = inferior::kind_entry("flags");
  Result untouched = run(fn, 200);
  std::string why;
  auto plan = plan_kind("flags", why);
  ASSERT_TRUE(plan) << why;
  for (Mode mode : {Mode::Count, Mode::PerCpu, Mode::Events}) {
    if (mode == Mode::PerCpu && !have_rseq()) continue;
    auto p = place(*plan, mode);
    p.site->install();
    EXPECT_EQ(run(fn, 200), untouched) << name_of(mode);
    p.site->remove();
  }
  // Control: the same trampoline without keeping the flags gives another result, so the test
  // sees the flags a lock inc changes.
  auto p = place(*plan, Mode::Count, 1 << 12, 0, FlagSave::None);
  p.site->install();
  EXPECT_NE(run(fn, 200), untouched);
  p.site->remove();
}

TEST(JumpExec, RedZoneIsLeftAlone) {
  std::string why;
  auto plan = plan_kind("redzone", why);
  ASSERT_TRUE(plan) << why;
  KindFn fn = inferior::kind_entry("redzone");
  Result untouched = run(fn, 100);
  ASSERT_NE(untouched.checksum, 0u);  // the canary held untouched
  for (Mode mode : {Mode::Count, Mode::PerCpu, Mode::Events}) {
    if (mode == Mode::PerCpu && !have_rseq()) continue;
    auto p = place(*plan, mode);
    p.site->install();
    EXPECT_EQ(run(fn, 100), untouched) << name_of(mode);
    p.site->remove();
  }
}

namespace {

// Four threads through one site: thread t calls with arg (t << 32 | i).
constexpr int kThreads = 4;

void hammer(KindFn fn, std::uint64_t calls, std::barrier<>& start) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (std::uint64_t i = 0; i < calls; ++i) fn(std::uint64_t(t) << 32 | i);
    });
  }
  for (auto& th : threads) th.join();
}

// Checks records from many threads: ids, each thread's args in order, its TSC non-decreasing,
// no duplicate. Returns how many records each thread has.
std::vector<std::uint64_t> check_records(const std::vector<jump::Record>& records) {
  std::vector<std::uint64_t> count(kThreads), next(kThreads), last_tsc(kThreads);
  std::uint64_t bad_id = 0, bad_thread = 0, out_of_order = 0, tsc_back = 0;
  for (const auto& r : records) {
    auto t = r.arg >> 32, i = r.arg & 0xffffffff;
    bad_id += r.id != 7;
    if (t >= kThreads) {
      ++bad_thread;
      continue;
    }
    out_of_order += i < next[t];  // also catches a record read twice
    tsc_back += r.tsc < last_tsc[t];
    next[t] = i + 1;
    last_tsc[t] = r.tsc;
    ++count[t];
  }
  EXPECT_EQ(bad_id, 0u);
  EXPECT_EQ(bad_thread, 0u);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(tsc_back, 0u);
  return count;
}

}  // namespace

// As if a thread had run the frame kind's first instruction (push %rbp), or its first two, when
// the jump went in: it continues at `pc`, the copy Trampoline::moved_pc gives.
asm(R"(
  .text
  .globl probecost_test_after_push
  .type probecost_test_after_push, @function
probecost_test_after_push:
  push %rbp
  jmp *%rsi
  .globl probecost_test_after_push_mov
  .type probecost_test_after_push_mov, @function
probecost_test_after_push_mov:
  push %rbp
  mov %rsp, %rbp
  jmp *%rsi
)");
extern "C" void probecost_test_after_push(std::uint64_t arg, std::uint64_t pc);
extern "C" void probecost_test_after_push_mov(std::uint64_t arg, std::uint64_t pc);

TEST(JumpExec, AThreadBetweenDisplacedInstructionsContinuesInTheCopy) {
  std::string why;
  auto plan = plan_kind("frame", why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, Mode::Count);
  const auto& t = p.placed.trampoline;
  ASSERT_EQ(t.copies.size(), 2u);  // after push (site+1) and after mov (site+4)
  auto after_push = t.moved_pc(plan->site + 1), after_mov = t.moved_pc(plan->site + 4);
  ASSERT_TRUE(after_push && after_mov);
  p.site->install();
  probecost_kinds_checksum = 0;
  probecost_test_after_push(40, after_push->value());
  probecost_test_after_push_mov(2, after_mov->value());
  EXPECT_EQ(probecost_kinds_checksum, 42u);  // both finished the function's work
  EXPECT_EQ(p.area->writer().hits(0), 0u);   // neither counts: they had passed the site
  p.site->remove();
}

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

TEST(JumpExec, FourThreadsEveryRecordReadBack) {
  std::string why;
  auto plan = plan_kind("nop5", why);
  ASSERT_TRUE(plan) << why;
  constexpr std::uint64_t kCalls = 50000;
  auto p = place(*plan, Mode::Events, 1 << 18);  // room for all
  p.site->install();
  std::barrier start(kThreads);
  hammer(inferior::kind_entry("nop5"), kCalls, start);
  p.site->remove();
  std::uint64_t cursor = 0;
  auto d = jump::drain(p.area->writer().ring(0), cursor, true);
  EXPECT_EQ(d.lost, 0u);
  EXPECT_EQ(d.records.size(), kThreads * kCalls);
  for (auto c : check_records(d.records)) EXPECT_EQ(c, kCalls);
  EXPECT_EQ(p.area->writer().hits(0), kThreads * kCalls);
}

TEST(JumpExec, SlowReaderCountsWhatItLost) {
  std::string why;
  auto plan = plan_kind("nop5", why);
  ASSERT_TRUE(plan) << why;
  constexpr std::uint64_t kCalls = 100000;
  auto p = place(*plan, Mode::Events, 256);  // a small ring: the reader cannot keep up
  p.site->install();
  std::atomic<bool> done{false};
  std::vector<jump::Record> records;
  std::uint64_t lost = 0, cursor = 0, drains = 0, while_running = 0;
  std::thread reader([&] {
    auto ring = p.area->writer().ring(0);
    while (!done.load()) {
      auto d = jump::drain(ring, cursor);
      records.insert(records.end(), d.records.begin(), d.records.end());
      lost += d.lost;
      ++drains;
    }
    while_running = records.size();
    auto d = jump::drain(ring, cursor, true);
    records.insert(records.end(), d.records.begin(), d.records.end());
    lost += d.lost;
  });
  std::barrier start(kThreads);
  hammer(inferior::kind_entry("nop5"), kCalls, start);
  done = true;
  reader.join();
  p.site->remove();
  EXPECT_EQ(records.size() + lost, kThreads * kCalls);  // every position accounted for
  EXPECT_GT(lost, 0u);
  EXPECT_GT(records.size(), 0u);
  check_records(records);
  std::printf("slow reader: %zu records (%llu while the writers ran), %llu lost, %llu drains\n",
              records.size(), static_cast<unsigned long long>(while_running),
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(drains));
}

namespace {

// Workers call `fn` until told to stop, each counting its own calls.
struct Workers {
  explicit Workers(KindFn fn, ThreadSync& sync) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([this, fn] {
        std::uint64_t n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          fn(1);
          ++n;
          progress.fetch_add(1, std::memory_order_relaxed);
          // 4 workers and the patcher may share 2 CPUs: a worker the patcher signals must get
          // one soon, not at the end of another's time slice.
          sched_yield();
        }
        calls += n;
      });
      sync.add_worker(threads.back().native_handle());
    }
  }
  void join() {
    stop = true;
    for (auto& t : threads) t.join();
  }
  // Lets the workers make `n` more calls (a spin that yields: no sleep).
  void let_run(std::uint64_t n) {
    for (std::uint64_t until = progress.load() + n; progress.load() < until;) sched_yield();
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> calls{0}, progress{0};
  std::vector<std::thread> threads;
};

void cycle_while_running(const std::string& kind, Mode mode) {
  std::string why;
  auto plan = plan_kind(kind, why);
  ASSERT_TRUE(plan) << why;
  auto p = place(*plan, mode, 1 << 10);
  auto original = bytes_at(plan->site, plan->length);
  ThreadSync sync;
  sync.watch(*p.site, p.placed.trampoline);
  probecost_kinds_checksum = 0;
  std::uint64_t traps0 = ThreadSync::traps(), moved0 = ThreadSync::moved();
  Workers workers(inferior::kind_entry(kind.c_str()), sync);
  for (int i = 0; i < 1000; ++i) {
    p.site->install(&sync);
    workers.let_run(kThreads);  // through the jump
    p.site->remove(&sync);
    workers.let_run(kThreads);  // through the original code
  }
  workers.join();
  std::uint64_t hits = p.area->writer().hits(0);
  EXPECT_EQ(probecost_kinds_checksum, workers.calls.load());  // each call did its work once
  EXPECT_LE(hits, workers.calls.load());
  EXPECT_EQ(bytes_at(plan->site, plan->length), original);
  std::printf("%s: %llu calls, %llu through the trampoline, %llu trapped on the int3, %llu moved\n",
              kind.c_str(), static_cast<unsigned long long>(workers.calls.load()),
              static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(ThreadSync::traps() - traps0),
              static_cast<unsigned long long>(ThreadSync::moved() - moved0));
}

}  // namespace

TEST(JumpExec, InstallRemoveCyclesWhileFourThreadsRun) {
  cycle_while_running("nop5", Mode::Count);   // one instruction displaced
  cycle_while_running("frame", Mode::Count);  // three: threads between them are moved
  cycle_while_running("jcc_taken", Mode::Events);
  if (have_rseq()) cycle_while_running("frame", Mode::PerCpu);
}
