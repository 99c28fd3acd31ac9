// The TSC clock (common/tsc.hpp): exact conversion arithmetic, and against the kernel's clocks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/error.hpp"
#include "common/tsc.hpp"

namespace probecost::tsc {
namespace {

TEST(TscClock, ConvertsExactlyOverHours) {
  Calibration c;
  c.hz = 2'994'375'000;
  c.anchor = {c.hz * 10, 10'000'000'000};
  c.realtime_offset_ns = 1'700'000'000'123'456'789;
  Clock clock(c);
  EXPECT_EQ(clock.monotonic_ns(c.anchor.tsc), 10'000'000'000);
  // Ten hours later, to the ns: no drift from rounding a per-tick factor.
  EXPECT_EQ(clock.monotonic_ns(c.anchor.tsc + c.hz * 36'000), 36'010'000'000'000);
  EXPECT_EQ(clock.monotonic_ns(c.anchor.tsc + 2'994'375), 10'001'000'000);  // +1 ms
  EXPECT_EQ(clock.monotonic_ns(c.anchor.tsc - c.hz), 9'000'000'000);        // before the anchor
  EXPECT_EQ(clock.realtime_ns(c.anchor.tsc), 1'700'000'010'123'456'789);
}

TEST(TscClock, RefusesAnUncalibratedClock) {
  EXPECT_THROW(Clock(Calibration{}), Error);
}

// A TSC read next to clock_gettime comes out as that clock's reading: within a few µs (the
// anchors' bracket, and the calibration's frequency error over the time since).
TEST(TscClock, AgreesWithClockGettime) {
  Clock clock(calibrate());
  Anchor later = read_anchor(CLOCK_MONOTONIC);
  EXPECT_LT(std::llabs(clock.monotonic_ns(later.tsc) - later.ns), 5'000);
  Anchor real = read_anchor(CLOCK_REALTIME);
  EXPECT_LT(std::llabs(clock.realtime_ns(real.tsc) - real.ns), 5'000);
}

TEST(TscClock, TwoCalibrationsAgree) {
  Clock a(calibrate(20'000'000));
  Clock b(calibrate(20'000'000));
  std::uint64_t now = __rdtsc();
  EXPECT_LT(std::llabs(a.monotonic_ns(now) - b.monotonic_ns(now)), 5'000);
  double ppm = (static_cast<double>(a.calibration().hz) - static_cast<double>(b.calibration().hz)) /
               static_cast<double>(a.calibration().hz) * 1e6;
  EXPECT_LT(std::abs(ppm), 50.0);
}

}  // namespace
}  // namespace probecost::tsc
