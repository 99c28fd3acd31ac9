// A library with a USDT marker of its own (probecost_lib:lib_tick, with a semaphore), for the
// marker of a library dlopen'd while traced. Returns how many of the n markers saw the
// semaphore raised.
#include "tests/targets/usdt_probes.hpp"

PROBECOST_SEMAPHORE(probecost_lib, lib_tick)

extern "C" __attribute__((noinline)) long probecost_usdt_lib_fire(long n) {
  long enabled = 0;
  for (long i = 0; i < n; ++i) {
    if (PROBECOST_ENABLED(probecost_lib, lib_tick)) ++enabled;
    DTRACE_PROBE1(probecost_lib, lib_tick, i);
  }
  return enabled;
}
