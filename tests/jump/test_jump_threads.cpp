// Jump-patched probes with four threads through one site, in-process (see test_jump_exec.cpp):
// every event record read back, a slow reader that counts what it lost, and the jump put in
// and taken out a thousand times while the threads run through it.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <thread>

#include "jump_exec.hpp"

using namespace probecost;
using namespace probecost::selftest;

namespace {

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
