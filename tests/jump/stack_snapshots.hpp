#pragma once
// What the in-process stack snapshot tests share (test_jump_stacks.cpp,
// test_jump_stack_bounds.cpp): the probed functions of known call paths (defined in
// test_jump_stacks.cpp), this thread's stack and thread pointer, and a call buffer of snapshots
// with stack_target patched into it.
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

// What the probed function saw of its own stack, by glibc's unwinder (libgcc's), at each hit.
extern std::vector<std::vector<std::uint64_t>> g_backtraces;
extern bool g_take_backtraces;

extern "C" {
int stack_target(int x);
int stack_path_a(int x);
int stack_path_b(int x);
int stack_path_c(int x);
int stack_deep(int depth);
}

namespace {

#define NEED_RSEQ() \
  if (!have_rseq()) GTEST_SKIP() << "glibc registered no rseq in this process"

inline CallBufferConfig config(std::uint32_t stack_bytes) {
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
inline std::pair<std::uint64_t, std::uint64_t> my_stack() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr)) throw Error("pthread_getattr_np");
  void* at = nullptr;
  std::size_t size = 0;
  pthread_attr_getstack(&attr, &at, &size);
  pthread_attr_destroy(&attr);
  auto lo = reinterpret_cast<std::uintptr_t>(at);
  return {lo, lo + size};
}

inline std::uint64_t my_tp() {
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

}  // namespace
