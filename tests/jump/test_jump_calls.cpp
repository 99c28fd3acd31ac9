// Call probes in-process: plan_calls() on functions of known shapes (call_shapes.S), their
// trampolines writing entry and exit records into a call buffer, and the reader. The test
// process patches and calls its own functions (no ptrace). The reader alone, on records written
// by hand: test_call_reader.cpp.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "call_fixture.hpp"
#include "common/error.hpp"
#include "self_patch.hpp"

extern "C" {
std::int64_t shape_leaf(std::int64_t, std::int64_t);
std::int64_t shape_two_exits(std::int64_t);
std::int64_t shape_tail(std::int64_t, std::int64_t);
std::int64_t shape_cond_tail(std::int64_t, std::int64_t);
std::int64_t shape_fact(std::int64_t);
std::int64_t shape_call_flags(std::int64_t);
}

using namespace probecost;
using namespace probecost::jump;
using namespace probecost::selftest;

namespace {

CallPlans plans_of(const std::string& name) {
  Function f = function_named(name);
  return plan_calls(f.start, f.code);
}

TEST(CallPlan, ShortFunctionsArePatchedWhole) {
  for (const char* name : {"shape_leaf", "shape_tail", "shape_cond_tail"}) {
    CallPlans p = plans_of(name);
    ASSERT_TRUE(p.entry) << name << ": " << p.why_no_entry;
    EXPECT_EQ(p.entry->role, PlanRole::Call) << name;
    EXPECT_EQ(p.entry->site, address_of(name));
    EXPECT_TRUE(p.int3_exits.empty()) << name;
  }
  EXPECT_TRUE(plans_of("shape_leaf").exits.empty());
  EXPECT_TRUE(plans_of("shape_tail").exits.empty());
  EXPECT_EQ(plans_of("shape_cond_tail").exits.size(), 1u);  // its ret
}

TEST(CallPlan, EachExitGetsItsOwnPatch) {
  for (auto [name, exits] :
       {std::pair{"shape_two_exits", 2u}, {"shape_fact", 2u}, {"shape_flags", 1u}}) {
    CallPlans p = plans_of(name);
    ASSERT_TRUE(p.entry) << name << ": " << p.why_no_entry;
    EXPECT_EQ(p.entry->role, PlanRole::Entry) << name;
    ASSERT_EQ(p.exits.size(), exits) << name;
    for (const auto& e : p.exits) {
      EXPECT_EQ(e.role, PlanRole::Exit);
      EXPECT_GE(e.length, kJumpLength);
      EXPECT_EQ(e.covered.back().flow, Instruction::Flow::Return);
      EXPECT_GE(e.site, p.entry->end()) << name;
    }
    EXPECT_TRUE(p.int3_exits.empty()) << name << ": " << p.int3_exits.front().why_not_jump;
  }
}

TEST(CallPlan, WhatNoPatchFitsGetsAnInt3WithTheReason) {
  CallPlans shortx = plans_of("shape_short_exit");
  EXPECT_FALSE(shortx.entry);
  EXPECT_NE(shortx.why_no_entry.find("call"), std::string::npos) << shortx.why_no_entry;
  ASSERT_EQ(shortx.int3_exits.size(), 1u);
  EXPECT_NE(shortx.int3_exits[0].why_not_jump.find("call"), std::string::npos)
      << shortx.int3_exits[0].why_not_jump;

  CallPlans entered = plans_of("shape_entered_exit");
  ASSERT_TRUE(entered.entry);
  ASSERT_EQ(entered.int3_exits.size(), 1u);
  EXPECT_NE(entered.int3_exits[0].why_not_jump.find("branches to"), std::string::npos)
      << entered.int3_exits[0].why_not_jump;

  // Its jmp *%rax is an exit only if its target, at run time, is outside: an int3 looks.
  CallPlans sw = plans_of("shape_switch");
  EXPECT_FALSE(sw.entry);
  ASSERT_EQ(sw.int3_exits.size(), 2u);
  EXPECT_EQ(sw.int3_exits[0].exit.flow, Instruction::Flow::IndirectJump);
  EXPECT_TRUE(sw.int3_exits[0].exit.target_operand);
  EXPECT_TRUE(sw.unseen_exits.empty());
}

// --- records written by the trampolines ---

TEST(CallRecords, EntryAndExitOfAWholePatchedFunction) {
  NEED_RSEQ();
  Calls c(config(2));
  CallReader reader = reader_of(c);
  c.patch("shape_leaf", 3);
  int local = 0;
  EXPECT_EQ(shape_leaf(30, 12), 42);
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].exit);
  EXPECT_EQ(r[0].id, 3u);
  EXPECT_EQ(r[0].values[0], 30u);
  EXPECT_EQ(r[0].values[1], 12u);
  EXPECT_TRUE(r[1].exit);
  EXPECT_EQ(r[1].id, 3u);
  EXPECT_EQ(r[1].values[0], 42u);
  EXPECT_EQ(r[0].sp, r[1].sp);  // the return-address slot, at entry and at the ret
  EXPECT_LT(r[0].sp, reinterpret_cast<std::uintptr_t>(&local));
  EXPECT_GT(r[0].sp + 4096, reinterpret_cast<std::uintptr_t>(&local));
  EXPECT_EQ(r[0].tp, thread_pointer());
  EXPECT_EQ(r[1].tp, thread_pointer());
  EXPECT_LT(r[0].tsc, r[1].tsc);
  EXPECT_EQ(reader.lost_total(), 0u);
}

TEST(CallRecords, EveryExitRecordsItsReturnValue) {
  NEED_RSEQ();
  Calls c(config(1));
  CallReader reader = reader_of(c);
  c.patch("shape_two_exits", 1);
  c.patch("shape_cond_tail", 2);
  EXPECT_EQ(shape_two_exits(5), 6);
  EXPECT_EQ(shape_two_exits(-7), 7);
  EXPECT_EQ(shape_cond_tail(5, 1), 6);
  EXPECT_EQ(shape_cond_tail(200, 1), 201);  // the jae's taken side: a tail call
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(r.size(), 8u);
  std::uint64_t want[][3] = {{1, 5, 6}, {1, static_cast<std::uint64_t>(-7), 7}, {2, 5, 6}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[2 * i].id, want[i][0]);
    EXPECT_EQ(r[2 * i].values[0], want[i][1]);
    EXPECT_TRUE(r[2 * i + 1].exit);
    EXPECT_EQ(r[2 * i + 1].values[0], want[i][2]);
    EXPECT_EQ(r[2 * i].sp, r[2 * i + 1].sp);
  }
  EXPECT_EQ(r[6].values[0], 200u);
  EXPECT_TRUE(r[7].exit);  // at the jae, before shape_leaf_far runs: rax is not a result yet
  EXPECT_EQ(r[6].sp, r[7].sp);
}

TEST(CallRecords, ATailCallIsAnExitThenTheCalleesEntryInTheSameSlot) {
  NEED_RSEQ();
  Calls c(config(2));
  CallReader reader = reader_of(c);
  c.patch("shape_leaf", 0);
  c.patch("shape_tail", 1);
  EXPECT_EQ(shape_tail(1, 2), 4);
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(!r[0].exit && r[0].id == 1 && r[1].exit && r[1].id == 1);
  EXPECT_TRUE(!r[2].exit && r[2].id == 0 && r[3].exit && r[3].id == 0);
  EXPECT_EQ(r[2].values[0], 2u);  // shape_tail's a + 1
  EXPECT_EQ(r[3].values[0], 4u);
  for (const auto& rec : r) EXPECT_EQ(rec.sp, r[0].sp);
}

TEST(CallRecords, RecursionNestsByTheSlot) {
  NEED_RSEQ();
  Calls c(config(1));
  CallReader reader = reader_of(c);
  c.patch("shape_fact", 5);
  EXPECT_EQ(shape_fact(6), 720);
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(r.size(), 12u);
  std::vector<const CallRecord*> open;
  std::uint64_t fact[] = {1, 1, 2, 6, 24, 120, 720};
  for (const auto& rec : r) {
    if (!rec.exit) {
      if (!open.empty()) {
        EXPECT_LT(rec.sp, open.back()->sp);  // deeper: lower
      }
      open.push_back(&rec);
      continue;
    }
    ASSERT_FALSE(open.empty());
    EXPECT_EQ(rec.sp, open.back()->sp);
    EXPECT_EQ(rec.values[0], fact[open.back()->values[0]]);
    open.pop_back();
  }
  EXPECT_TRUE(open.empty());
}

TEST(CallRecords, TheCallersFlagsReachTheFunction) {
  NEED_RSEQ();
  Calls c(config(0));
  CallReader reader = reader_of(c);
  c.patch("shape_flags", 0);
  EXPECT_EQ(shape_call_flags(1), 1);
  EXPECT_EQ(shape_call_flags(0), 0);
  c.unpatch();
  EXPECT_EQ(c.drain(reader).size(), 4u);
}

TEST(CallRecords, AFullBufferDropsAndCountsTheNewest) {
  NEED_RSEQ();
  Calls c(config(0, 8192));  // two sub-buffers of 4 KiB: 256 records of 32 bytes
  CallReader reader = reader_of(c);
  c.patch("shape_leaf", 2);
  for (int i = 0; i < 1000; ++i) shape_leaf(i, 1);
  c.unpatch();
  auto& r = c.drain(reader);
  // Nobody read meanwhile: one CPU's 256 slots were written, the rest dropped (a thread that
  // moved CPU meanwhile may have filled another's: every record is read or lost).
  EXPECT_EQ(r.size() + reader.lost(2), 2000u);
  EXPECT_GE(r.size(), 256u);
  EXPECT_EQ(reader.lost(2), reader.lost_total());
  // Entries and exits are counted apart: each kind is read or lost, 1000 of each.
  auto exits = static_cast<std::uint64_t>(
      std::count_if(r.begin(), r.end(), [](const CallRecord& x) { return x.exit; }));
  EXPECT_EQ(r.size() - exits + reader.lost(2, false), 1000u);
  EXPECT_EQ(exits + reader.lost(2, true), 1000u);
}

// Blocking mode: a writer with no room waits for the reader, which frees room as it reads
// (a sink that only counts), woken by each sub-buffer filled: nothing is lost.
TEST(CallRecords, WritersWaitForTheReaderAndLoseNothing) {
  NEED_RSEQ();
  Calls c(config(0, 8192));  // 256 records of room per CPU
  CallReader reader = reader_of(c);
  reader.set_blocking(true, 10'000'000'000);
  c.patch("shape_leaf", 2);
  constexpr int kCalls = 20000;
  std::atomic<bool> done{false};
  std::uint64_t events = 0;  // the calls' records, their syncs not counted
  auto count = [&](std::uint32_t, const std::uint8_t* data, std::size_t n) {
    for (std::size_t at = 0; at < n; at += c.buffer.layout().record_size)
      events += call_record_id(data + at) >= 0;
  };
  std::thread drain([&] {
    while (!done) {
      std::uint32_t seen = reader.wake_word();
      if (!reader.poll(__rdtsc(), false, count)) reader.wait_for_writers(seen, 1'000'000);
    }
  });
  for (int i = 0; i < kCalls; ++i) ASSERT_EQ(shape_leaf(i, 1), i + 1);
  done = true;
  reader.wake_reader();
  drain.join();
  c.unpatch();
  reader.poll(__rdtsc(), true, count);
  EXPECT_EQ(reader.lost_total(), 0u);
  EXPECT_EQ(events, 2u * kCalls);
}

// No reader at all (a SIGKILLed probecost): the first writer to find no room waits out the
// bound, turns blocking off, and from then on every writer drops at once: the calls go on.
TEST(CallRecords, AWaitForAGoneReaderEndsAtItsBoundAndNoneWaitsAgain) {
  NEED_RSEQ();
  Calls c(config(0, 8192));
  CallReader reader = reader_of(c);
  reader.set_blocking(true, 20'000'000);  // 20 ms
  c.patch("shape_leaf", 2);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(shape_leaf(i, 1), i + 1);
  EXPECT_FALSE(reader.blocking());
  c.unpatch();
  auto& r = c.drain(reader);
  EXPECT_EQ(r.size() + reader.lost(2), 2000u);
  EXPECT_GT(reader.lost(2), 0u);
}

// Threads on every CPU, and a reader draining while they run: each thread's records pair up
// exactly, by slot, in TSC order.
TEST(CallRecords, ThreadsAndAConcurrentReaderPairExactly) {
  NEED_RSEQ();
  Calls c(config(1, 16 << 20));  // room for every record: the pairing is what is tested here
  CallReader reader(c.buffer.view(), c.buffer.layout(), __rdtsc(),
                    {.flush_ticks = 1'000'000, .commit_slack = 10'000'000});
  c.patch("shape_fact", 1);
  constexpr int kThreads = 4, kCalls = 5000, kDepth = 8;
  std::atomic<int> running{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) EXPECT_EQ(shape_fact(kDepth), 40320);
      --running;
    });
  }
  std::vector<CallRecord> records;
  while (running > 0) {
    reader.poll(__rdtsc());
    reader.take(records);
  }
  for (auto& t : threads) t.join();
  c.unpatch();
  reader.poll(__rdtsc(), true);
  reader.take(records);
  std::uint64_t lost = reader.lost_total();
  EXPECT_EQ(records.size() + lost, 2ull * kThreads * kCalls * kDepth);
  if (lost) GTEST_SKIP() << lost << " records lost: the reader fell behind (a loaded machine)";
  std::map<std::uint64_t, std::vector<std::uint64_t>> stacks;
  std::map<std::uint64_t, std::uint64_t> calls;
  for (const auto& rec : records) {
    auto& s = stacks[rec.tp];
    if (!rec.exit) {
      s.push_back(rec.sp);
      ++calls[rec.tp];
    } else {
      ASSERT_FALSE(s.empty());
      ASSERT_EQ(s.back(), rec.sp);
      s.pop_back();
    }
  }
  EXPECT_EQ(calls.size(), static_cast<std::size_t>(kThreads));
  for (auto& [tp, n] : calls) EXPECT_EQ(n, static_cast<std::uint64_t>(kCalls) * kDepth);
}

// Format 3 keeps 24 bits of each record's TSC and slot, the rest in the sync before it: calls
// more than 2^24 ticks apart, and calls on a thread whose stack is in another 16 MiB window
// (an mmap'd stack), interleaved with the main thread's on the same CPUs, each decode to
// their own thread, a TSC between the caller's readings before and after, and the same slot at
// entry and exit, inside the caller's stack.
TEST(CallRecords, TimesAndSlotsAreWholeAcrossSyncWindows) {
  NEED_RSEQ();
  Calls c(config(1));
  CallReader reader = reader_of(c);
  c.patch("shape_leaf", 1);
  struct Call {
    std::uint64_t before, after, tp;
  };
  std::vector<Call> calls;
  auto call = [&](std::int64_t i) {
    std::uint64_t before = __rdtsc();
    EXPECT_EQ(shape_leaf(i, 1), i + 1);
    calls.push_back({before, __rdtsc(), thread_pointer()});
  };
  constexpr std::size_t kStack = 1 << 20;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(stack, MAP_FAILED);
  auto lo = reinterpret_cast<std::uint64_t>(stack);
  for (int i = 0; i < 4; ++i) {
    call(i);
    // Past the 2^24-tick window: the next record needs a sync of its own time.
    for (std::uint64_t until = __rdtsc() + (2ull << kWindowBits); __rdtsc() < until;) {
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, kStack);
    pthread_t t;
    auto body = [](void* arg) -> void* {
      (*static_cast<decltype(call)*>(arg))(100);
      return nullptr;
    };
    ASSERT_EQ(pthread_create(&t, &attr, body, &call), 0);
    pthread_join(t, nullptr);
    pthread_attr_destroy(&attr);
  }
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(r.size(), 2 * calls.size());
  std::uint64_t main_tp = thread_pointer();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const CallRecord &entry = r[2 * i], &exit = r[2 * i + 1];
    EXPECT_FALSE(entry.exit);
    EXPECT_TRUE(exit.exit);
    EXPECT_EQ(entry.tp, calls[i].tp) << i;
    EXPECT_EQ(exit.tp, calls[i].tp) << i;
    EXPECT_LE(calls[i].before, entry.tsc) << i;
    EXPECT_LE(entry.tsc, exit.tsc) << i;
    EXPECT_LE(exit.tsc, calls[i].after) << i;
    EXPECT_EQ(entry.sp, exit.sp) << i;
    bool own = calls[i].tp != main_tp;
    EXPECT_EQ(own, entry.sp >= lo && entry.sp < lo + kStack) << i << std::hex << " sp " << entry.sp;
    EXPECT_EQ(entry.values[0], own ? 100u : i / 2) << i;
  }
  ::munmap(stack, kStack);
}

std::atomic<std::uint64_t> g_handler_calls{0};

void call_in_handler(int) {
  shape_leaf(1, 2);
  g_handler_calls.fetch_add(1, std::memory_order_relaxed);
}

// A signal handler calls the function while the thread is in it, or in the middle of a
// record (the kernel aborts the restartable sequence, which starts over): every call is
// recorded once, and nested calls pair by slot.
TEST(CallRecords, SignalHandlersNestExactly) {
  NEED_RSEQ();
  Calls c(config(2, 16 << 20));
  CallReader reader = reader_of(c);
  c.patch("shape_leaf", 0);
  struct sigaction sa {};
  sa.sa_handler = call_in_handler;
  ASSERT_EQ(::sigaction(SIGALRM, &sa, nullptr), 0);
  itimerval every{{0, 200}, {0, 200}};
  ASSERT_EQ(::setitimer(ITIMER_REAL, &every, nullptr), 0);
  std::uint64_t own = 0;
  while (g_handler_calls < 30 && own < 200'000) {
    shape_leaf(3, 4);
    ++own;
  }
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::signal(SIGALRM, SIG_DFL);
  c.unpatch();
  auto& r = c.drain(reader);
  ASSERT_EQ(reader.lost_total(), 0u);
  ASSERT_EQ(r.size(), 2 * (own + g_handler_calls));
  std::vector<std::uint64_t> open;
  std::uint64_t nested = 0;
  for (const auto& rec : r) {
    if (!rec.exit) {
      nested += !open.empty();
      open.push_back(rec.sp);
    } else {
      ASSERT_FALSE(open.empty());
      ASSERT_EQ(open.back(), rec.sp);
      open.pop_back();
    }
  }
  EXPECT_TRUE(open.empty());
  RecordProperty("nested", static_cast<int>(nested));
}

}  // namespace
