// A shared library for probing MODULE:SYMBOL.
#include <atomic>
#include <cstdint>

static std::atomic<std::uint64_t> g_lib_calls{0};

extern "C" __attribute__((noipa, visibility("default"))) void probecost_lib_site(std::uint64_t i) {
  asm volatile("" ::"r"(i));
  g_lib_calls.fetch_add(1, std::memory_order_relaxed);
}

extern "C" std::uint64_t probecost_lib_calls() {
  return g_lib_calls.load();
}
