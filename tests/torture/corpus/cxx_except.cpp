// C++ exceptions, built at -O0 (landing pads inside the function's body) and -O2 (pads mostly in
// .cold parts): throws caught by type, catch-all, rethrow, and cleanups (destructors) run while
// an exception passes through. The unwinder enters each landing pad; no direct branch does.
#include <stdexcept>
#include <string>

#include "torture.h"

namespace {

long g_destroyed = 0;

struct Guard {
  long v;
  explicit Guard(long x) : v(x) {}
  ~Guard() { g_destroyed += v; }
};

}  // namespace

extern "C" {

__attribute__((noinline)) long t_thrower(long x) {
  if (x % 3 == 0) throw std::runtime_error("three");
  if (x % 5 == 0) throw static_cast<int>(x);
  return x * 2;
}

__attribute__((noinline)) long t_catcher(long x) {
  long r = 0;
  try {
    Guard g(x);
    r = t_thrower(x) + g.v;
  } catch (const std::runtime_error& e) {
    r = -static_cast<long>(std::string(e.what()).size());
  } catch (int v) {
    r = v * 100;
  }
  return r + 1;
}

__attribute__((noinline)) long t_cleanup(long x) {
  Guard a(x), b(x + 1);
  long r = t_thrower(x + 1);
  return r + a.v - b.v;
}

__attribute__((noinline)) long t_rethrow(long x) {
  try {
    return t_cleanup(x);
  } catch (...) {
    if (x & 1) throw;
    return -1;
  }
}

__attribute__((noinline)) long t_outer(long x) {
  long total = 0;
  for (long i = x; i < x + 4; ++i) {
    try {
      total += t_rethrow(i);
    } catch (const std::runtime_error&) {
      total += 1000;
    } catch (int v) {
      total += v;
    }
    total += t_catcher(i);
  }
  return total;
}

}  // extern "C"

int main() {
  uint64_t h = TORTURE_SEED;
  for (long i = 0; i < 20; ++i) h = torture_mix(h, static_cast<uint64_t>(t_outer(i)));
  h = torture_mix(h, static_cast<uint64_t>(g_destroyed));
  torture_print("cxx_except", h);
  return 0;
}
