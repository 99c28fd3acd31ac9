// The marker variants' probes, their per-thread ring, and the enabling that patches the sites.
#include "inferior/variants.hpp"

#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "inferior/marker.hpp"

extern "C" {
bool probecost_variant_flag = false;
std::uint64_t probecost_variant_salt = 0x5eed;

// The patch tables the sites' asm fills in; the linker defines the bounds.
struct KeyEntry {
  std::uint64_t site, target;
};
extern const std::uint64_t __start_probecost_immediates[], __stop_probecost_immediates[];
extern const KeyEntry __start_probecost_static_keys[], __stop_probecost_static_keys[];
extern const KeyEntry __start_probecost_nop_calls[], __stop_probecost_nop_calls[];

#define DECLARE(v, n) void probecost_mv_##v##_##n(std::uint64_t);
#define FOR_ARGS(X, v) X(v, 0) X(v, 1) X(v, 3) X(v, 6)
DECLARE(none, 0)
FOR_ARGS(DECLARE, flag)
FOR_ARGS(DECLARE, immediate)
FOR_ARGS(DECLARE, static_key)
FOR_ARGS(DECLARE, nop_call)
#undef DECLARE
}

namespace probecost::inferior::variants {

namespace {

struct Ring {
  std::uint64_t* words;
  std::uint64_t mask;     // capacity in words - 1
  std::uint64_t head;     // words ever written
  std::uint64_t records;  // records ever written
  std::uint64_t last;     // word index of the last record
};
constexpr std::uint64_t kWords = 1 << 16;  // 512 KiB: stays in a Zen 4 core's L2
__thread Ring* t_ring = nullptr;

template <int N>
inline void write_record(const std::uint64_t (&args)[N == 0 ? 1 : N]) {
  if (__builtin_expect(t_ring == nullptr, 0)) thread_init();
  Ring& r = *t_ring;
  std::uint64_t h = r.head;
  r.words[h & r.mask] = __rdtsc();
  r.words[(h + 1) & r.mask] = (std::uint64_t{N} << 32) | kVariantEventId;
  for (int i = 0; i < N; ++i) r.words[(h + 2 + i) & r.mask] = args[i];
  r.last = h;
  r.head = h + 2 + N;
  ++r.records;
}

// Writes `bytes` over the program's own text: the page is made writable for the copy.
void patch_text(std::uint64_t at, const void* bytes, std::size_t n) {
  long page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t first = at & ~static_cast<std::uint64_t>(page - 1);
  std::size_t len = at + n - first;
  void* base = reinterpret_cast<void*>(first);
  if (::mprotect(base, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    throw std::runtime_error("mprotect: cannot make the marker sites writable");
  }
  std::memcpy(reinterpret_cast<void*>(at), bytes, n);
  ::mprotect(base, len, PROT_READ | PROT_EXEC);
}

void patch_rel32(std::uint64_t site, std::uint8_t opcode, std::uint64_t target) {
  std::uint8_t insn[5] = {opcode};
  auto rel = static_cast<std::int32_t>(static_cast<std::int64_t>(target - (site + 5)));
  std::memcpy(insn + 1, &rel, 4);
  patch_text(site, insn, 5);
}

constexpr std::uint8_t kNop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};

}  // namespace

const std::vector<VariantSite>& all_sites() {
#define SITE(v, n) {#v, n, "probecost_mv_" #v "_" #n, probecost_mv_##v##_##n},
  static const std::vector<VariantSite> sites = [] {
    std::vector<VariantSite> s = {SITE(none, 0) FOR_ARGS(SITE, flag) FOR_ARGS(SITE, immediate)
                                      FOR_ARGS(SITE, static_key) FOR_ARGS(SITE, nop_call)};
    for (auto& x : s) {
      for (auto& c : x.variant) c = c == '_' ? '-' : c;  // static_key -> static-key
    }
    return s;
  }();
#undef SITE
  return sites;
}

const VariantSite* find_site(const std::string& name) {
  for (const auto& s : all_sites()) {
    if (name == s.variant + ":" + std::to_string(s.args)) return &s;
  }
  return nullptr;
}

const char* const* variant_names() {
  static const char* const names[] = {"none",       "flag",     "immediate",
                                      "static-key", "nop-call", nullptr};
  return names;
}

void set_enabled(bool on) {
  __atomic_store_n(&probecost_variant_flag, on, __ATOMIC_RELEASE);
  for (auto* p = __start_probecost_immediates; p != __stop_probecost_immediates; ++p) {
    std::uint8_t imm = on ? 1 : 0;
    patch_text(*p, &imm, 1);
  }
  for (auto* e = __start_probecost_static_keys; e != __stop_probecost_static_keys; ++e) {
    if (on) {
      patch_rel32(e->site, 0xe9, e->target);  // jmp
    } else {
      patch_text(e->site, kNop5, 5);
    }
  }
  for (auto* e = __start_probecost_nop_calls; e != __stop_probecost_nop_calls; ++e) {
    if (on) {
      patch_rel32(e->site, 0xe8, e->target);  // call
    } else {
      patch_text(e->site, kNop5, 5);
    }
  }
}

void thread_init() {
  if (t_ring) return;
  void* mem = probecost::marker::map_ring_memory(kWords * 8);  // no first-lap faults or misses
  t_ring = new Ring{static_cast<std::uint64_t*>(mem), kWords - 1, 0, 0, 0};
}

RingView view() {
  RingView v;
  if (!t_ring) return v;
  const Ring& r = *t_ring;
  v.records = r.records;
  if (r.records) {
    v.last_id = r.words[(r.last + 1) & r.mask];
    v.last_first_arg = r.words[(r.last + 2) & r.mask];
  }
  return v;
}

void thread_release() {
  if (!t_ring) return;
  ::munmap(t_ring->words, kWords * 8);
  delete t_ring;
  t_ring = nullptr;
}

}  // namespace probecost::inferior::variants

using probecost::inferior::variants::write_record;

extern "C" {
__attribute__((noinline)) void probecost_variant_probe0() {
  write_record<0>({0});
}
__attribute__((noinline)) void probecost_variant_probe1(std::uint64_t a1) {
  write_record<1>({a1});
}
__attribute__((noinline)) void probecost_variant_probe3(std::uint64_t a1, std::uint64_t a2,
                                                        std::uint64_t a3) {
  write_record<3>({a1, a2, a3});
}
__attribute__((noinline)) void probecost_variant_probe6(std::uint64_t a1, std::uint64_t a2,
                                                        std::uint64_t a3, std::uint64_t a4,
                                                        std::uint64_t a5, std::uint64_t a6) {
  write_record<6>({a1, a2, a3, a4, a5, a6});
}
}
