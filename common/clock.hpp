#pragma once
// The clocks the measurements read: CLOCK_MONOTONIC for wall time (never steps, counts while
// the machine is idle, the clock perf and the inferior's report use), CLOCK_THREAD_CPUTIME_ID
// for the calling thread's own CPU time.
#include <time.h>

namespace probecost {

inline double clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

inline double monotonic_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}
inline double now_s() {
  return monotonic_ns() / 1e9;
}
inline double thread_cpu_ns() {
  return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}
inline double thread_cpu_s() {
  return thread_cpu_ns() / 1e9;
}

}  // namespace probecost
