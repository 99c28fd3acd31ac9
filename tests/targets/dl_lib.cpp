// Two libraries from one source (DL_VARIANT 1 and 2) for dlopen/dlclose tests: the same size and
// layout, so that one dlopen'd where the other was dlclose'd lands at the same address, with
// probecost_dl_site at the same offset but different code there.
#include <atomic>
#include <cstdint>

static std::atomic<std::uint64_t> g_calls{0};

extern "C" __attribute__((noipa, visibility("default"))) int probecost_dl_site(int x) {
#if DL_VARIANT == 1
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return x + 1;
#else
  int r = (x ^ 0x5a5a) * 3;
  g_calls.fetch_add(2, std::memory_order_relaxed);
  return r;
#endif
}

// What the site returns for x, as the program expects it.
extern "C" __attribute__((visibility("default"))) int probecost_dl_expected(int x) {
#if DL_VARIANT == 1
  return x + 1;
#else
  return (x ^ 0x5a5a) * 3;
#endif
}
