// The libraries of fault_dl: one source, two variants (FAULT_DL 1 and 2) of the same size and
// layout, so that the second dlopen'd where the first was dlclose'd lands at the same address
// with different code at dl_probe.
#include <cstdint>

extern "C" __attribute__((noipa, visibility("default"))) std::uint64_t dl_probe(std::uint64_t x) {
#if FAULT_DL == 1
  return x * 2654435761u + 1;
#else
  return (x ^ 0x5a5a5a5a) * 40503u + 7;
#endif
}

extern "C" __attribute__((noipa, visibility("default"))) std::uint64_t dl_expected(
    std::uint64_t x) {
#if FAULT_DL == 1
  return x * 2654435761u + 1;
#else
  return (x ^ 0x5a5a5a5a) * 40503u + 7;
#endif
}
