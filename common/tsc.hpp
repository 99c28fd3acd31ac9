#pragma once
// The TSC as a clock. rdtsc is what the probes can afford to read (a system call, or even the
// vDSO's clock_gettime, would cost more than the probe itself), so records carry TSC values and
// are converted afterwards: calibrated against CLOCK_MONOTONIC, the clock LTTng stamps its events
// with by default and perf with `perf record -k CLOCK_MONOTONIC` (perf's own default, sched_clock,
// is not exposed to user space), so that the traces of one machine line up; and shifted by
// CLOCK_REALTIME - CLOCK_MONOTONIC to the epoch (CTF's clock offset).
//
// This relies on an invariant TSC (constant rate, synchronised across CPUs: "constant_tsc
// nonstop_tsc" in /proc/cpuinfo), which every x86-64 CPU of the last decade has and which the
// kernel itself uses as its clocksource.
#include <time.h>
#include <x86intrin.h>

#include <cmath>
#include <cstdint>

#include "common/error.hpp"

namespace probecost::tsc {

// A TSC value and a clock's reading taken at the same instant.
struct Anchor {
  std::uint64_t tsc = 0;
  std::int64_t ns = 0;
};

inline std::int64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// rdtsc, clock_gettime, rdtsc, the TSC's midpoint taken as the clock's instant; the narrowest of
// a few brackets, so that one interrupted or preempted between the reads does not count.
inline Anchor read_anchor(clockid_t clock = CLOCK_MONOTONIC) {
  Anchor best;
  std::uint64_t narrowest = UINT64_MAX;
  for (int i = 0; i < 16; ++i) {
    std::uint64_t t0 = __rdtsc();
    std::int64_t ns = clock_ns(clock);
    std::uint64_t t1 = __rdtsc();
    if (t1 - t0 < narrowest) {
      narrowest = t1 - t0;
      best = {t0 + (t1 - t0) / 2, ns};
    }
  }
  return best;
}

// TSC ticks per second between two anchors.
inline double hz_between(const Anchor& a, const Anchor& b) {
  return static_cast<double>(b.tsc - a.tsc) * 1e9 / static_cast<double>(b.ns - a.ns);
}

// TSC ticks over `ns` of CLOCK_MONOTONIC. 50 ms with anchors good to ~50 ns: ~1 ppm, so 1 µs of
// drift per second away from the anchor.
inline double calibrate_hz(long ns = 50'000'000) {
  Anchor a = read_anchor();
  timespec nap{ns / 1'000'000'000, ns % 1'000'000'000};
  while (nanosleep(&nap, &nap) != 0) {
  }
  return hz_between(a, read_anchor());
}

struct Calibration {
  std::uint64_t hz = 0;                 // TSC ticks per second
  Anchor anchor;                        // against CLOCK_MONOTONIC
  std::int64_t realtime_offset_ns = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC at the anchor
};

// CLOCK_REALTIME - CLOCK_MONOTONIC: the realtime read between two monotonic reads, the narrowest
// pair of a few.
inline std::int64_t realtime_offset_ns() {
  std::int64_t best = 0, narrowest = INT64_MAX;
  for (int i = 0; i < 16; ++i) {
    std::int64_t m0 = clock_ns(CLOCK_MONOTONIC);
    std::int64_t r = clock_ns(CLOCK_REALTIME);
    std::int64_t m1 = clock_ns(CLOCK_MONOTONIC);
    if (m1 - m0 < narrowest) {
      narrowest = m1 - m0;
      best = r - (m0 + (m1 - m0) / 2);
    }
  }
  return best;
}

// Measures: the frequency over `ns` of CLOCK_MONOTONIC, anchored at its end.
inline Calibration calibrate(long ns = 50'000'000) {
  Calibration c;
  c.hz = static_cast<std::uint64_t>(std::llround(calibrate_hz(ns)));
  c.anchor = read_anchor();
  c.realtime_offset_ns = realtime_offset_ns();
  return c;
}

// Maps TSC values to CLOCK_MONOTONIC and CLOCK_REALTIME ns, exactly (128-bit integer arithmetic:
// no rounding drift over hours of trace, and values before the anchor come out right).
class Clock {
 public:
  explicit Clock(const Calibration& c) : c_(c) {
    if (c.hz == 0) throw Error("TSC clock: no calibrated frequency");
  }

  std::int64_t monotonic_ns(std::uint64_t tsc) const {
    auto ticks = static_cast<__int128>(static_cast<std::int64_t>(tsc - c_.anchor.tsc));
    return c_.anchor.ns + static_cast<std::int64_t>(ticks * 1'000'000'000 / c_.hz);
  }
  std::int64_t realtime_ns(std::uint64_t tsc) const {
    return monotonic_ns(tsc) + c_.realtime_offset_ns;
  }
  const Calibration& calibration() const { return c_; }

 private:
  Calibration c_;
};

}  // namespace probecost::tsc
