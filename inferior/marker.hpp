#pragma once
// probecost's static marker: an LTTng-style event written straight into memory.
//
//   PROBECOST_MARKER(id, arg);
//
// Disabled, it costs a load of the enabled flag, a test and a branch predicted not taken.
// Enabled, it writes one Record {TSC, id, arg} into a ring buffer owned by the calling thread:
// no lock, no atomic read-modify-write, no system call, no allocation. When the ring is full the
// oldest records are overwritten; written() - capacity() of them are lost, and counted.
//
// Call probecost::marker::thread_init() on each thread before its hot loop to allocate (and
// pre-fault) its ring off the hot path; a thread that did not is initialised on its first event.
#include <x86intrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace probecost::marker {

struct Record {
  std::uint64_t tsc;
  std::uint64_t arg;
  std::uint32_t id;
  std::uint32_t reserved;
};
static_assert(sizeof(Record) == 24);

struct Ring {
  Record* records;
  std::uint64_t mask;  // capacity - 1; capacity is a power of two
  std::uint64_t head;  // records ever written by this thread
};

inline constexpr std::size_t kDefaultCapacity = 1 << 16;

// The enabled flag. A plain global read with a relaxed atomic load: readers never stall.
extern bool g_enabled;
// The calling thread's ring (GNU __thread: a POD pointer, no C++ TLS wrapper on the hot path).
extern __thread Ring* t_ring;

inline bool enabled() {
  return __atomic_load_n(&g_enabled, __ATOMIC_RELAXED);
}
void set_enabled(bool on);

// Allocates, pre-faults and warms this thread's ring (idempotent). Capacity is rounded up to
// 2^k.
Ring& thread_init(std::size_t capacity = kDefaultCapacity);
// `bytes` of zeroed memory for a ring, every page faulted in and every line written once, as
// LTTng touches its buffers at session setup: the first lap round a ring otherwise pays a page
// fault per 4 KiB and a cache miss per line, which would be charged to the first events (and
// make a short run's cost per event look several times a long one's). std::bad_alloc on failure.
void* map_ring_memory(std::size_t bytes);
// Frees this thread's ring. Records read through view() are invalid afterwards.
void thread_release();

[[gnu::noinline, gnu::cold]] void record_slow(std::uint32_t id, std::uint64_t arg);

inline void record(std::uint32_t id, std::uint64_t arg) {
  Ring* r = t_ring;
  if (__builtin_expect(r == nullptr, 0)) return record_slow(id, arg);
  Record& rec = r->records[r->head & r->mask];
  rec.tsc = __rdtsc();
  rec.arg = arg;
  rec.id = id;
  r->head = r->head + 1;  // only this thread writes its ring
}

// What this thread's ring holds, oldest first.
struct View {
  std::vector<Record> records;
  std::uint64_t written = 0;
  std::uint64_t overwritten = 0;
  std::uint64_t capacity = 0;
};
View view();

}  // namespace probecost::marker

#define PROBECOST_MARKER(id, arg)                                         \
  do {                                                                    \
    if (__builtin_expect(::probecost::marker::enabled(), 0))              \
      ::probecost::marker::record(static_cast<std::uint32_t>(id), (arg)); \
  } while (0)
