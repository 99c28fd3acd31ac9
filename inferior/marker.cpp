#include "inferior/marker.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace probecost::marker {

bool g_enabled = false;
__thread Ring* t_ring = nullptr;

void set_enabled(bool on) {
  __atomic_store_n(&g_enabled, on, __ATOMIC_RELEASE);
}

Ring& thread_init(std::size_t capacity) {
  if (t_ring) return *t_ring;
  std::size_t cap = 1;
  while (cap < capacity) cap <<= 1;
  void* mem = map_ring_memory(cap * sizeof(Record));
  t_ring = new Ring{static_cast<Record*>(mem), cap - 1, 0};
  return *t_ring;
}

void* map_ring_memory(std::size_t bytes) {
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mem == MAP_FAILED) throw std::bad_alloc();
  // MAP_POPULATE faulted the pages in (zeroed by the kernel, perhaps with stores that bypass
  // the cache); writing every line once brings them into this CPU's caches and TLB.
  std::memset(mem, 0, bytes);
  return mem;
}

void thread_release() {
  if (!t_ring) return;
  ::munmap(t_ring->records, (t_ring->mask + 1) * sizeof(Record));
  delete t_ring;
  t_ring = nullptr;
}

void record_slow(std::uint32_t id, std::uint64_t arg) {
  thread_init();
  record(id, arg);
}

View view() {
  View v;
  if (!t_ring) return v;
  const Ring& r = *t_ring;
  v.capacity = r.mask + 1;
  v.written = r.head;
  v.overwritten = r.head > v.capacity ? r.head - v.capacity : 0;
  for (std::uint64_t i = v.overwritten; i < r.head; ++i) v.records.push_back(r.records[i & r.mask]);
  return v;
}

}  // namespace probecost::marker
